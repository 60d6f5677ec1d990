"""The identity rules: A, J, R and the epoch and attempt token built from them.

docs/design.md §1-2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

MAX_SUBMISSION: Final = 999_999  # N < 10^6: N fills six digits of the epoch
MAX_R: Final = 999_999  # R < 10^6: R fills the last six digits of the epoch
INT64_MAX: Final = 2**63 - 1
COUNTER_DIGITS: Final = len(str(MAX_R))
# A canonical decimal: "0", or digits without a leading zero. Anything else (sign, space,
# leading zero that a shell would read as octal) is refused, never reinterpreted.
_CANONICAL_DECIMAL: Final = re.compile(r"0|[1-9][0-9]*")
JOB_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class IdentityError(ValueError):
    """A value breaks an identity rule; the message names the value and the bound."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """Who a job is, from the start request: JobID, generation G, submission N, attempt."""

    job_id: str
    generation: int
    submission: int
    attempt: int

    def __post_init__(self) -> None:
        check_identity(self)

    @property
    def epoch_prefix(self) -> int:
        """G x 10^6 + N: the epoch without its last six digits (R)."""
        return self.generation * 10**6 + self.submission

    @property
    def token_prefix(self) -> str:
        """`<JobID>.<N>.<attempt>`: the attempt token without A and J."""
        return f"{self.job_id}.{self.submission}.{self.attempt}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Counts:
    """The two counters one execution sees."""

    admission: int  # A, raised before every admission
    restart: int  # J: JobSet's status.restarts

    @property
    def r(self) -> int:
        """R = A + J; it only ever increases."""
        return self.admission + self.restart


def check_identity(identity: Identity) -> None:
    """Refuse an identity whose epochs could be ambiguous or overflow (docs/design.md §2)."""
    if not JOB_ID_PATTERN.fullmatch(identity.job_id):
        raise IdentityError(
            f"job ID {identity.job_id!r} must be 1-128 characters of [A-Za-z0-9._-] "
            "starting with a letter or digit"
        )
    for name, value in (
        ("generation", identity.generation),
        ("submission", identity.submission),
        ("attempt", identity.attempt),
    ):
        if value < 0:
            raise IdentityError(f"{name} {value} must not be negative")
    if identity.submission > MAX_SUBMISSION:
        raise IdentityError(
            f"submission N={identity.submission} must be below 10^6 (at most {MAX_SUBMISSION})"
        )
    if identity.epoch_prefix < 1:
        raise IdentityError(
            f"G x 10^6 + N = {identity.epoch_prefix} must be at least 1 "
            "(G=0 and N=0 would give an epoch with a leading zero)"
        )
    largest = largest_epoch(identity)
    if largest > INT64_MAX:
        raise IdentityError(
            f"generation G={identity.generation} is too large: the largest epoch "
            f"{largest} does not fit a signed 64-bit integer ({INT64_MAX})"
        )


def largest_epoch(identity: Identity) -> int:
    """The epoch of this identity's last possible execution (R = 999,999)."""
    return identity.epoch_prefix * 10**6 + MAX_R


def identity_from_text(
    *, job_id: object, generation: object, submission: object, attempt: object
) -> Identity:
    """The identity as text records it (the TrainJob's annotations), checked as at start."""
    numbers = []
    for name, text in (
        ("generation", generation),
        ("submission", submission),
        ("attempt", attempt),
    ):
        if not isinstance(text, str) or not _CANONICAL_DECIMAL.fullmatch(text):
            raise IdentityError(f"{name} {text!r} is not a canonical decimal")
        numbers.append(int(text))
    if not isinstance(job_id, str):
        raise IdentityError(f"job ID {job_id!r} is not a string")
    return Identity(job_id=job_id, generation=numbers[0], submission=numbers[1], attempt=numbers[2])


def check_r(counts: Counts) -> int:
    """R, refused when it no longer fits the epoch's last six digits (as the prologue does)."""
    if counts.r > MAX_R:
        raise IdentityError(
            f"R = A + J = {counts.admission} + {counts.restart} = {counts.r} "
            f"must be below 10^6 (at most {MAX_R})"
        )
    return counts.r


def epoch(identity: Identity, counts: Counts) -> int:
    """DISPATCH_EPOCH = G x 10^12 + N x 10^6 + R, as the prologue prints it in the pod."""
    return identity.epoch_prefix * 10**6 + check_r(counts)


def attempt_token(identity: Identity, counts: Counts) -> str:
    """DISPATCH_ATTEMPT = `<JobID>.<N>.<attempt>.<A>.<J>`, as the prologue prints it."""
    check_r(counts)
    return f"{identity.token_prefix}.{counts.admission}.{counts.restart}"


def parse_counter(text: object, *, name: str) -> int:
    """Read A or J from its string form: a canonical decimal no larger than 999,999."""
    if text is None or text == "":
        raise IdentityError(f"{name} is missing")
    if not isinstance(text, str):  # only an object someone wrote by hand holds one
        raise IdentityError(f"{name} {text!r} is not a string")
    if len(text) > COUNTER_DIGITS or not _CANONICAL_DECIMAL.fullmatch(text):
        raise IdentityError(f"{name} {text!r} is not a canonical decimal from 0 to {MAX_R}")
    return int(text)


def next_admission(*, in_patch: int, floor: int, highest_restart: int, restart: int) -> int:
    """The raise rule: the new A keeps R = A + J above every R the job has had.

    Every R so far is at most max(A in the patch, floor) + the highest J seen (A never exceeds
    the floor, J never exceeds the highest J recorded). The next execution runs with the
    current J (`restart`), so A must exceed that bound minus it. While the JobSet has never
    been replaced, J is the highest J seen and this is the max(A in the patch, floor) + 1 of
    docs/design.md §2; after a reset of J it makes up for the restarts that were lost.
    """
    raised = max(in_patch, floor) + max(0, highest_restart - restart) + 1
    if raised > MAX_R:
        raise IdentityError(f"admission A={raised} would exceed {MAX_R}: the bound is reached")
    return raised
