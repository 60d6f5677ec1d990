"""What every decision returns when it does not go ahead, and the precondition it writes on.

Shared by every rule (trainjob, workload, gate, ledger) and every step and the controller:
a refusal is exit 6 at the edge, a refusal a person must resolve is what the controller
rejects, and a resourceVersion read is what each one write is preconditioned on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

ResourceVersion = NewType("ResourceVersion", str)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a decision says no; the step turns it into exit 6."""

    reason: str


@dataclass(frozen=True, slots=True)
class NeedsPerson(Refusal):
    """A refusal no wait resolves: what the objects hold must change, a person decides how.

    The admission controller rejects such a reservation instead of holding its quota.
    """
