"""Leader election on a coordination.k8s.io/v1 Lease: the bodies a candidate writes.

As client-go's leaderelection: a candidate takes the Lease when it is free or its record
has not changed for a whole lease duration by the candidate's own clock (never by
comparing its clock with the holder's renewTime), renews it while it leads, and frees it
on a graceful stop so the next leader need not wait. Every write is a create or an update
preconditioned on the resourceVersion read, so of two candidates at most one wins.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final

from dispatch_k8s.core.rules import shapes

# client-go's proportions (a 2 s retry period and a 10 s renew deadline for a 15 s lease): the
# leader tries to renew every fifth of the lease, and leads until two thirds of it after the
# start of its last successful renewal.
RETRY_SHARE: Final = Fraction(1, 5)
RENEW_DEADLINE_SHARE: Final = Fraction(2, 3)


def holder(lease: Mapping[str, Any] | None) -> str:
    """Who holds the Lease ("" when nobody does)."""
    return str(shapes.at(lease, "spec").get("holderIdentity") or "")


def record(lease: Mapping[str, Any] | None) -> tuple[str, str]:
    """What changes on every renewal: a record unchanged for a duration has expired."""
    spec = shapes.at(lease, "spec")
    return holder(lease), str(spec.get("renewTime") or "")


def claim(
    lease: Mapping[str, Any] | None,
    *,
    namespace: str,
    name: str,
    identity: str,
    duration_seconds: int,
    now: str,
) -> dict[str, Any]:
    """The Lease taken or renewed by `identity` at `now` (a MicroTime), to create or update."""
    if lease is None:
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {},
        }
    else:
        body = copy.deepcopy(dict(lease))
    spec = body.setdefault("spec", {})
    if holder(lease) != identity:
        spec["acquireTime"] = now
        if lease is not None:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
    spec.setdefault("leaseTransitions", 0)
    spec["holderIdentity"] = identity
    spec["leaseDurationSeconds"] = duration_seconds
    spec["renewTime"] = now
    return body


def released(lease: Mapping[str, Any], *, now: str) -> dict[str, Any]:
    """The Lease given up by its holder: free at once for the next candidate."""
    body = copy.deepcopy(dict(lease))
    spec = body.setdefault("spec", {})
    spec["holderIdentity"] = ""
    spec["leaseDurationSeconds"] = 1
    spec["renewTime"] = now
    return body
