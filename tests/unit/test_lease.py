"""Leader election bodies: take, renew and free a Lease, always from what was read."""

from __future__ import annotations

from typing import Any

from dispatch_k8s.core.rules import lease

NOW = "2026-12-01T10:00:00.000000Z"
LATER = "2026-12-01T10:00:05.000000Z"


def claimed(previous: dict[str, Any] | None, identity: str, now: str) -> dict[str, Any]:
    return lease.claim(
        previous, namespace="ns", name="l", identity=identity, duration_seconds=15, now=now
    )


def test_a_new_lease_is_created_for_the_candidate() -> None:
    body = claimed(None, "a", NOW)
    assert body["metadata"] == {"name": "l", "namespace": "ns"}
    assert body["spec"] == {
        "acquireTime": NOW,
        "renewTime": NOW,
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "leaseTransitions": 0,
    }


def test_a_renewal_keeps_the_acquire_time_and_the_precondition() -> None:
    held = {
        **claimed(None, "a", NOW),
        "metadata": {"name": "l", "namespace": "ns", "resourceVersion": "7"},
    }
    renewed = claimed(held, "a", LATER)
    assert renewed["metadata"]["resourceVersion"] == "7"
    assert renewed["spec"]["acquireTime"] == NOW
    assert renewed["spec"]["renewTime"] == LATER
    assert renewed["spec"]["leaseTransitions"] == 0
    assert lease.record(renewed) != lease.record(held)


def test_a_takeover_counts_a_transition_and_a_release_frees_it_at_once() -> None:
    taken = claimed(claimed(None, "a", NOW), "b", LATER)
    assert lease.holder(taken) == "b"
    assert taken["spec"]["leaseTransitions"] == 1
    assert taken["spec"]["acquireTime"] == LATER
    freed = lease.released(taken, now=LATER)
    assert lease.holder(freed) == ""
    assert freed["spec"]["leaseDurationSeconds"] == 1
    assert lease.holder(None) == ""
