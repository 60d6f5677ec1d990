"""Which Workload reservation admit acts on, and the approval it leads to."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.rules.decisions import Refusal, ResourceVersion
from dispatch_k8s.core.rules.trainjob import ForeignFlag
from dispatch_k8s.core.rules.workload import (
    Finished,
    Replaced,
    Reservation,
    Skip,
    approval_message,
    build_approval,
    build_deactivation,
    decide_approval,
    decide_reservation,
    owner_replaced,
    pending_reservation,
    raised_for_reservation,
    reservation_record,
)

CHECK = "dispatch-admission"
OWNER_UID = "job-uid"
RESERVED_AT = "2026-11-30T10:00:00Z"
OWNER = {"metadata": {"name": "train-1", "uid": OWNER_UID}}  # the TrainJob, as admit reads it


def workload_dict(
    *,
    state: str = "Pending",
    reserved: str = "True",
    evicted: str | None = None,
    finished: str | None = None,
    admitted: str | None = None,
    owner: str = "train-1",
    owner_kind: str = "TrainJob",
    owner_uid: str = OWNER_UID,
    checks: bool = True,
    reserved_at: str = RESERVED_AT,
    evictions: list[tuple[str, int]] | None = None,
    evicted_at: str | None = None,
) -> dict[str, Any]:
    conditions = [{"type": "QuotaReserved", "status": reserved, "lastTransitionTime": reserved_at}]
    for kind, condition in (("Evicted", evicted), ("Finished", finished), ("Admitted", admitted)):
        if condition is not None:
            conditions.append({"type": kind, "status": condition})
            if kind == "Evicted" and evicted_at is not None:
                conditions[-1]["lastTransitionTime"] = evicted_at
    status: dict[str, Any] = {"conditions": conditions}
    if evictions is not None:  # Kueue's counts per (reason, underlyingCause)
        status["schedulingStats"] = {
            "evictions": [
                {"reason": reason, "underlyingCause": "", "count": count}
                for reason, count in evictions
            ]
        }
    if checks:
        status["admissionChecks"] = [
            {"name": "other-check", "state": "Ready"},
            {"name": CHECK, "state": state},
        ]
    return {
        "metadata": {
            "name": "trainjob-train-1-1a2b3",
            "namespace": "team-a",
            "uid": "wl-uid",
            "resourceVersion": "900",
            "ownerReferences": [
                {
                    "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": owner_kind,
                    "name": owner,
                    "uid": owner_uid,
                    "controller": True,
                }
            ],
        },
        "status": status,
    }


def test_pending_check_on_a_reservation_is_acted_on() -> None:
    decision = decide_reservation(workload_dict(), OWNER, check=CHECK)
    assert decision == Reservation(
        workload="trainjob-train-1-1a2b3",
        uid="wl-uid",
        owner_uid=OWNER_UID,
        resource_version=ResourceVersion("900"),
        evictions=0,
        reserved_at=RESERVED_AT,
    )
    assert decision.record == f"wl-uid 0 {RESERVED_AT}" == reservation_record(workload_dict())


def test_workload_being_deleted_is_skipped() -> None:
    workload = workload_dict()
    workload["metadata"]["deletionTimestamp"] = "2026-11-30T10:01:00Z"
    decision = decide_reservation(workload, OWNER, check=CHECK)
    assert isinstance(decision, Skip)
    assert "being deleted" in decision.reason


def test_workload_admitted_before_the_check_applied_is_skipped_not_refused() -> None:
    decision = decide_reservation(workload_dict(admitted="True"), OWNER, check=CHECK)
    assert isinstance(decision, Skip)
    assert "admitted before admission check" in decision.reason


@pytest.mark.parametrize("evicted", [None, "True"], ids=["finished", "finished-and-evicted"])
def test_a_finished_workload_ends_the_gating(evicted: str | None) -> None:
    workload = workload_dict(finished="True", evicted=evicted)
    decision = decide_reservation(workload, OWNER, check=CHECK)
    assert decision == Finished("Workload trainjob-train-1-1a2b3 is finished")


def test_another_check_that_would_set_a_is_refused() -> None:
    workload = workload_dict()
    workload["status"]["admissionChecks"][0]["podSetUpdates"] = [
        {"name": "node", "annotations": {wire.ADMISSION_ANNOTATION: "9"}}
    ]
    decision = decide_reservation(workload, OWNER, check=CHECK)
    assert isinstance(decision, Refusal)
    assert "other-check" in decision.reason
    assert "would override A" in decision.reason


def raised_trainjob(record: str | None, floor: str = "2", **extra: str) -> dict[str, Any]:
    annotations = {wire.ADMISSION_FLOOR_ANNOTATION: floor, **extra}
    if record is not None:
        annotations[wire.RAISED_FOR_ANNOTATION] = record
    return {"metadata": {"name": "train-1", "annotations": annotations}}


def test_approval_needs_the_raise_for_this_very_reservation() -> None:
    workload = workload_dict()
    record = reservation_record(workload)
    assert decide_approval(workload, raised_trainjob(record), check=CHECK, admission=2) is None
    for stale in (None, "wl-uid 0 2026-11-30T09:00:00Z", f"other-uid 0 {RESERVED_AT}"):
        refusal = decide_approval(workload, raised_trainjob(stale), check=CHECK, admission=2)
        assert isinstance(refusal, Refusal)
        assert "A was not raised for this reservation" in refusal.reason
    refusal = decide_approval(workload, raised_trainjob(record), check=CHECK, admission=1)
    assert isinstance(refusal, Refusal)
    assert "--admission 1 is not the A raised for it" in refusal.reason
    foreign = raised_trainjob(record, **{wire.FOREIGN_ANNOTATION: "true"})
    assert isinstance(decide_approval(workload, foreign, check=CHECK, admission=2), ForeignFlag)
    ready = workload_dict(state="Ready")
    refusal = decide_approval(ready, raised_trainjob(record), check=CHECK, admission=2)
    assert isinstance(refusal, Refusal)
    assert "is Ready, not Pending" in refusal.reason


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"reserved": "False"}, "no quota reserved"),
        ({"evicted": "True"}, "is evicted"),
        ({"state": "Ready"}, "is Ready, not Pending"),
        ({"state": "Retry"}, "is Retry, not Pending"),
        ({"checks": False}, "does not list admission check dispatch-admission yet"),
        ({"checks": False, "reserved": "False"}, "no quota reserved"),
    ],
    ids=[
        "unreserved",
        "evicted-still-reserved",
        "already-ready",
        "retry",
        "checks-not-synced-yet",
        "just-created",
    ],
)
def test_workloads_not_to_act_on_are_skipped(overrides: dict[str, Any], says: str) -> None:
    decision = decide_reservation(workload_dict(**overrides), OWNER, check=CHECK)
    assert isinstance(decision, Skip)
    assert says in decision.reason


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"owner": "someone-else"}, "controlled by someone-else"),
        ({"owner_kind": "Job"}, "controlled by no TrainJob"),
        ({"owner_uid": "old-job-uid"}, "with UID old-job-uid, not UID job-uid"),
        ({"checks": False, "admitted": "True"}, "without admission check"),
    ],
    ids=["other-trainjob", "other-controller", "owner-uid-mismatch", "admitted-without-our-check"],
)
def test_foreign_workloads_are_refused(overrides: dict[str, Any], says: str) -> None:
    decision = decide_reservation(workload_dict(**overrides), OWNER, check=CHECK)
    assert isinstance(decision, Refusal)
    assert says in decision.reason


def admitted_without_our_check(*flavors: str) -> dict[str, Any]:
    workload = workload_dict(checks=False, admitted="True")
    pod_set: dict[str, Any] = {"name": "node", "count": 1}
    if flavors:
        pod_set["flavors"] = {f"r{i}": flavor for i, flavor in enumerate(flavors)}
    workload["status"]["admission"] = {"clusterQueue": "cq", "podSetAssignments": [pod_set]}
    return workload


def test_admitted_with_no_flavor_says_the_job_requests_nothing() -> None:
    decision = decide_reservation(admitted_without_our_check(), OWNER, check=CHECK)
    assert isinstance(decision, Refusal)
    assert "by ClusterQueue cq without admission check" in decision.reason
    assert "its pods request no resource: Kueue assigned it no flavor" in decision.reason
    assert "Give the job resource requests" in decision.reason


def test_admitted_on_flavors_the_check_skips_names_them() -> None:
    workload = admitted_without_our_check("spot", "on-demand", "spot")
    decision = decide_reservation(workload, OWNER, check=CHECK)
    assert isinstance(decision, Refusal)
    assert "for the flavors it was assigned (on-demand, spot)" in decision.reason
    assert "where that entry has onFlavors, include on-demand, spot" in decision.reason


def test_approval_sets_only_our_check_and_carries_the_precondition() -> None:
    body = build_approval(
        workload_dict(),
        check=CHECK,
        resource_version=ResourceVersion("900"),
        message=approval_message(4),
        now="2026-11-30T10:00:05Z",
    )
    assert body["metadata"]["resourceVersion"] == "900"
    assert body["metadata"]["uid"] == "wl-uid"
    assert body["apiVersion"] == f"{wire.KUEUE_GROUP}/{wire.KUEUE_VERSION}"
    assert body["status"]["admissionChecks"] == [
        {
            "name": CHECK,
            "state": "Ready",
            "message": 'dispatch: admission count raised to 4, Previously: "Pending"',
            "lastTransitionTime": "2026-11-30T10:00:05Z",
        }
    ]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ([], [("Preempted", 1)]),
        ([("Preempted", 1)], [("Preempted", 2)]),
        ([("Preempted", 1)], [("Preempted", 1), ("Deactivated", 1)]),
    ],
    ids=["first-eviction", "same-reason-again", "another-reason"],
)
def test_two_reservations_within_one_second_get_different_records(
    before: list[tuple[str, int]], after: list[tuple[str, int]]
) -> None:
    """Kueue counts the eviction that ends the first in the Workload's status; the time of
    QuotaReserved has one-second resolution, so it is the same for both."""
    first = pending_reservation(workload_dict(evictions=before), check=CHECK)
    second = workload_dict(evictions=after, evicted="False", evicted_at=RESERVED_AT)
    again = pending_reservation(second, check=CHECK)
    assert isinstance(first, Reservation)
    assert isinstance(again, Reservation)
    assert first.reserved_at == again.reserved_at
    assert first.record != again.record
    assert not raised_for_reservation(first.record, second)
    refusal = decide_approval(second, raised_trainjob(first.record), check=CHECK, admission=2)
    assert isinstance(refusal, Refusal)
    assert "A was not raised for this reservation" in refusal.reason


@pytest.mark.parametrize(("count", "total"), [(3, 3), ("3", -1), (-1, -1), (True, -1)], ids=str)
def test_evictions_are_counted_and_a_garbled_count_matches_no_record(
    count: Any, total: int
) -> None:
    workload = workload_dict(evictions=[("Preempted", 1)])
    workload["status"]["schedulingStats"]["evictions"].append(
        {"reason": "Deactivated", "underlyingCause": "", "count": count}
    )
    found = pending_reservation(workload, check=CHECK)
    assert isinstance(found, Reservation)
    assert found.evictions == (total if total < 0 else total + 1)


LEGACY = f"wl-uid {RESERVED_AT}"  # the record before the evictions count, from an older raise


@pytest.mark.parametrize(
    ("record", "overrides", "names_it"),
    [
        (LEGACY, {}, True),
        (LEGACY, {"evicted": "False", "evicted_at": "2026-11-30T09:00:00Z"}, True),
        (LEGACY, {"evicted": "False", "evicted_at": RESERVED_AT}, False),
        (LEGACY, {"evicted": "False", "evicted_at": "2026-11-30T10:00:01Z"}, False),
        (LEGACY, {"evicted": "False", "evicted_at": "garbled"}, False),
        (LEGACY, {"evicted": "False", "evicted_at": "2026-11-30T10:00:00"}, False),
        ("wl-uid 2026-11-30T09:59:59Z", {}, False),
        (f"other-uid {RESERVED_AT}", {}, False),
        (f"wl-uid 0 {RESERVED_AT}", {}, True),
        (f"wl-uid 0 {RESERVED_AT}", {"evictions": [("Preempted", 1)]}, False),
        ("wl-uid", {}, False),
        ("", {}, False),
    ],
    ids=[
        "old-format-never-evicted",
        "old-format-evicted-long-before",
        "old-format-re-reserved-in-the-eviction-second",
        "old-format-re-reserved-a-second-after",
        "old-format-garbled-eviction-time",
        "old-format-eviction-time-without-zone",
        "old-format-other-time",
        "old-format-other-workload",
        "current-format",
        "current-format-before-an-eviction",
        "uid-alone",
        "empty",
    ],
)
def test_which_records_name_the_current_reservation(
    record: str, overrides: dict[str, Any], names_it: bool
) -> None:
    """An old-format record (before an upgrade) names the reservation it was raised for, unless
    an eviction may lie within its one second: then A is raised again, never approved on it."""
    workload = workload_dict(**overrides)
    assert raised_for_reservation(record, workload) is names_it
    refusal = decide_approval(workload, raised_trainjob(record), check=CHECK, admission=2)
    assert (refusal is None) is names_it


def test_a_same_name_replacement_of_the_owner_is_not_the_owner() -> None:
    found = pending_reservation(workload_dict(owner_uid="old-job-uid"), check=CHECK)
    assert isinstance(found, Reservation)
    assert owner_replaced(found, OWNER) == Replaced(
        "TrainJob train-1 (UID job-uid) is not the one Workload trainjob-train-1-1a2b3 belongs "
        "to (UID old-job-uid): it was deleted and made again under the same name; the old "
        "Workload goes with the old job, and the new job gets its own"
    )
    assert owner_replaced(found, {"metadata": {"name": "train-1", "uid": "old-job-uid"}}) is None


def test_deactivation_sets_active_false_with_why_once() -> None:
    wl = {"metadata": {"name": "w", "annotations": {"a": "b"}}, "spec": {"queueName": "q"}}
    body = build_deactivation(wl, reason="flagged foreign")
    assert body is not None
    assert body["spec"] == {"queueName": "q", "active": False}
    assert body["metadata"]["annotations"] == {
        "a": "b",
        wire.DEACTIVATED_ANNOTATION: "flagged foreign",
    }
    assert build_deactivation(body, reason="again") is None, "already inactive: no write"
