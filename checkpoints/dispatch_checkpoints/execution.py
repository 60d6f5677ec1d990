"""Which execution this process is, from the variables dispatch-k8s gives it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

# An epoch is G x 10^12 + N x 10^6 + R and fits a signed 64-bit integer (docs/design.md §2).
EPOCH_LIMIT: Final = 2**63


class MissingIdentity(ValueError):
    """The process was not started as a dispatch-k8s execution."""


@dataclass(frozen=True, slots=True)
class Execution:
    """Which execution this process is: its epoch and its attempt."""

    epoch: int
    attempt: str

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Execution:
        """The execution dispatch-k8s started, from its variables; refuses without them."""
        epoch, attempt = environ.get("DISPATCH_EPOCH", ""), environ.get("DISPATCH_ATTEMPT", "")
        # isdecimal, not isdigit: int() refuses superscripts that isdigit() accepts.
        if not (epoch.isascii() and epoch.isdecimal()) or not 0 < int(epoch) < EPOCH_LIMIT:
            raise MissingIdentity(f"DISPATCH_EPOCH must be a positive integer, not {epoch!r}")
        if not attempt:
            raise MissingIdentity("DISPATCH_ATTEMPT is not set")
        return cls(int(epoch), attempt)
