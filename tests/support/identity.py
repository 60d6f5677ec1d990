"""What the prologue must print, written as the formulas: the tests' expected values.

The product never computes these in Python: the prologue does, in the pod's shell, from A and
J (core/rules/prologue.py). The suites compare what it printed with these.
"""

from __future__ import annotations

from dispatch_k8s.core.rules.identity import MAX_R, Counts, Identity, IdentityError


def check_r(counts: Counts) -> int:
    """R, refused when it no longer fits the epoch's last six digits (as the prologue does)."""
    if counts.r > MAX_R:
        raise IdentityError(
            f"R = A + J = {counts.admission} + {counts.restart} = {counts.r} "
            f"must be below 10^6 (at most {MAX_R})"
        )
    return counts.r


def epoch(identity: Identity, counts: Counts) -> int:
    """DISPATCH_EPOCH = G x 10^12 + N x 10^6 + R."""
    return identity.epoch_prefix * 10**6 + check_r(counts)


def attempt_token(identity: Identity, counts: Counts) -> str:
    """DISPATCH_ATTEMPT = `<JobID>.<N>.<attempt>.<A>.<J>`."""
    check_r(counts)
    return f"{identity.token_prefix}.{counts.admission}.{counts.restart}"
