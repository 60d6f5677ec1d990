"""The controller's decision for one Workload: raise, approve (after a raise, or with nothing
raised), or neither; and the Active condition of its AdmissionChecks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch_k8s.core.rules import gate, trainjob, wire
from dispatch_k8s.core.rules.decisions import NeedsPerson, Refusal, ResourceVersion
from dispatch_k8s.core.rules.gate import Approve, RaiseFor
from dispatch_k8s.core.rules.identity import MAX_R
from dispatch_k8s.core.rules.trainjob import Draining
from dispatch_k8s.core.rules.workload import (
    MAX_CHECK_MESSAGE,
    Finished,
    Skip,
    build_check_state,
    decide_approval,
    reservation_record,
)
from tests.unit.audit_factories import trainjob_dict
from tests.unit.test_workload import CHECK, OWNER_UID, workload_dict


def dispatch_job(*, raised_for: str | None = None, floor: str = "1", **fields: Any) -> Any:
    job = trainjob_dict(floor=floor, **fields)
    job["spec"]["suspend"] = True
    job["metadata"]["name"] = "train-1"
    job["metadata"]["uid"] = OWNER_UID
    job["metadata"]["labels"] = {wire.MANAGED_BY_LABEL: wire.MANAGED_BY}
    if raised_for is not None:
        job["metadata"]["annotations"][wire.RAISED_FOR_ANNOTATION] = raised_for
    return job


def test_a_reservation_not_raised_for_is_raised_for() -> None:
    decision = gate.decide_gate(workload_dict(), dispatch_job(raised_for="old 1"), check=CHECK)
    assert isinstance(decision, RaiseFor)
    assert decision.reservation.record == reservation_record(workload_dict())


def test_a_reservation_already_raised_for_is_approved_with_that_a_and_no_second_raise() -> None:
    record = reservation_record(workload_dict())
    decision = gate.decide_gate(
        workload_dict(), dispatch_job(raised_for=record, floor="4", admission="4"), check=CHECK
    )
    assert isinstance(decision, Approve)
    assert (decision.admission, decision.message) == (4, "dispatch: admission count raised to 4")
    assert decision.reservation.record == record


def other_teams_job() -> Any:
    job = trainjob_dict(floor=None, patched=False)
    job["spec"]["suspend"] = True
    job["metadata"]["uid"] = OWNER_UID
    return job


def test_a_workload_of_no_dispatch_trainjob_is_approved_with_nothing_raised() -> None:
    for job in (None, other_teams_job()):  # no TrainJob read; a TrainJob with no mark of ours
        decision = gate.decide_gate(workload_dict(), job, check=CHECK)
        assert isinstance(decision, Approve)
        assert decision.admission is None
        assert "approved without raising an admission count" in decision.message
        assert "TrainJob train-1 is not a dispatch-managed TrainJob" in decision.message


def test_nothing_is_done_for_a_check_that_is_not_pending_or_a_workload_not_reserved() -> None:
    for workload in (workload_dict(state="Ready"), workload_dict(reserved="False")):
        assert isinstance(gate.decide_gate(workload, dispatch_job(), check=CHECK), Skip)
    finished = workload_dict(finished="True")
    assert isinstance(gate.decide_gate(finished, dispatch_job(), check=CHECK), Finished)


def test_a_foreign_flagged_or_multikueue_trainjob_is_refused_not_approved() -> None:
    flagged = dispatch_job(foreign="true", cause="a reset")
    assert isinstance(gate.decide_gate(workload_dict(), flagged, check=CHECK), Refusal)
    remote = dispatch_job()
    remote["spec"]["managedBy"] = wire.MULTIKUEUE_MANAGER
    assert isinstance(gate.decide_gate(workload_dict(), remote, check=CHECK), Refusal)


def test_a_garbled_floor_on_a_recorded_raise_is_refused() -> None:
    record = reservation_record(workload_dict())
    job = dispatch_job(raised_for=record, floor="x")
    decision = gate.decide_gate(workload_dict(), job, check=CHECK)
    assert isinstance(decision, Refusal)
    assert "admission-floor" in decision.reason


def test_only_our_checks_are_gated() -> None:
    assert gate.our_checks(workload_dict(), {CHECK}) == [CHECK]
    assert gate.our_checks(workload_dict(), {"someone-else"}) == []
    assert gate.our_checks(workload_dict(checks=False), {CHECK}) == []


def admission_check(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "dispatch-admission", "generation": 2},
        "spec": {"controllerName": wire.ADMISSION_CHECK_CONTROLLER, **spec},
    }


def test_an_admission_check_is_kept_active_and_written_only_when_it_differs() -> None:
    check = admission_check()
    assert gate.is_ours(check)
    wanted = gate.active_status(check, now="2026-12-01T10:00:00Z")
    (condition,) = wanted["status"]["conditions"]
    assert (condition["status"], condition["reason"], condition["observedGeneration"]) == (
        "True",
        "Active",
        2,
    )
    assert gate.needs_active_write(check, wanted)
    check["status"] = wanted["status"]
    again = gate.active_status(check, now="2026-12-01T11:00:00Z")
    assert not gate.needs_active_write(check, again)
    assert again["status"]["conditions"][0]["lastTransitionTime"] == "2026-12-01T10:00:00Z"


def test_an_admission_check_with_parameters_is_inactive_with_a_reason() -> None:
    check = admission_check(parameters={"apiGroup": "x", "kind": "Y", "name": "z"})
    (condition,) = gate.active_status(check, now="2026-12-01T10:00:00Z")["status"]["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "ParametersNotSupported")
    assert "remove spec.parameters" in condition["message"]
    assert not gate.is_ours(admission_check(controllerName="kueue.x-k8s.io/provisioning"))


@pytest.mark.parametrize("kept", ["label", "floor", "patch"])
def test_a_dispatch_trainjob_that_lost_some_of_its_marks_is_still_raised_for(kept: str) -> None:
    job = trainjob_dict(floor="1" if kept == "floor" else None, patched=kept == "patch")
    job["spec"]["suspend"] = True
    if kept == "label":
        job["metadata"]["labels"] = {wire.MANAGED_BY_LABEL: wire.MANAGED_BY}
    assert gate.is_dispatch_managed(job)
    decision = gate.decide_gate(workload_dict(), job, check=CHECK)
    assert not isinstance(decision, Approve), "never approved with A unchanged"


@pytest.mark.parametrize(
    "job",
    [
        dispatch_job(),
        dispatch_job(raised_for=reservation_record(workload_dict())),
        other_teams_job(),
    ],
    ids=["not-raised-for", "raised-for-already", "not-dispatch-managed"],
)
def test_a_workload_of_a_trainjob_replaced_under_its_name_is_skipped(job: Any) -> None:
    """The TrainJob is read by the owner's name: one with another UID is a replacement, and
    the old Workload is neither raised for in the new job nor approved."""
    job["metadata"]["uid"] = "new-job-uid"
    decision = gate.decide_gate(workload_dict(), job, check=CHECK)
    assert isinstance(decision, Skip)
    assert "deleted and made again under the same name" in decision.reason


def test_an_eviction_within_the_second_of_the_raise_is_raised_for_again() -> None:
    raised = dispatch_job(raised_for=reservation_record(workload_dict()), floor="4", admission="4")
    again = workload_dict(evictions=[("Preempted", 1)], evicted="False")
    assert isinstance(gate.decide_gate(again, raised, check=CHECK), RaiseFor)


def _refusals_needing_a_person() -> list[Refusal]:
    """Every refusal the controller meets that no wait resolves."""
    flagged = dispatch_job(foreign="true", cause="a reset")
    remote = dispatch_job()
    remote["spec"]["managedBy"] = wire.MULTIKUEUE_MANAGER
    garbled = dispatch_job(raised_for=reservation_record(workload_dict()), floor="x")
    decided = [
        gate.decide_gate(workload_dict(), job, check=CHECK) for job in (flagged, remote, garbled)
    ]
    at_bound = dispatch_job(admission=str(MAX_R), floor=str(MAX_R))
    raised = [
        trainjob.decide_raise(job, None) for job in (flagged, dispatch_job(floor="x"), at_bound)
    ]
    found = [d for d in [*decided, *raised] if isinstance(d, Refusal)]
    assert len(found) == 6, found
    return found


@pytest.mark.parametrize(
    ("on_refusal", "state"), [("reject", "Rejected"), ("retry", "Retry"), ("wait", "Pending")]
)
def test_a_refusal_a_person_must_resolve_gets_the_configured_state(
    on_refusal: gate.OnRefusal, state: str
) -> None:
    for refusal in _refusals_needing_a_person():
        assert isinstance(refusal, NeedsPerson), refusal
        update = gate.refused_check(refusal, on_refusal=on_refusal)
        assert (update.state, update.message) == (state, f"dispatch: {refusal.reason}")
        assert update.requeue_after_seconds == (60 if state == "Retry" else None)


def test_a_wait_or_a_race_stays_pending_whatever_the_setting() -> None:
    running = dispatch_job()
    running["spec"]["suspend"] = False
    draining = trainjob.decide_raise(
        dispatch_job(), {"status": {"replicatedJobsStatus": [{"name": "node", "active": 1}]}}
    )
    open_job = trainjob.decide_raise(running, None)
    assert isinstance(draining, Draining)
    assert isinstance(open_job, Refusal)
    for refusal in (draining, open_job):
        assert not isinstance(refusal, NeedsPerson)
        for on_refusal in ("reject", "retry", "wait"):
            update = gate.refused_check(refusal, on_refusal=on_refusal, retry_count=9)
            assert (update.state, update.requeue_after_seconds) == ("Pending", None)


def test_retries_back_off_as_kueues_provisioning_check_then_reject() -> None:
    """Kueue's defaults (60, 1800, 3): 60 s, 120 s, 240 s, then Rejected with the count."""
    (refusal, *_) = _refusals_needing_a_person()
    told = [gate.refused_check(refusal, on_refusal="retry", retry_count=n) for n in range(4)]
    assert [(u.state, u.requeue_after_seconds) for u in told] == [
        ("Retry", 60),
        ("Retry", 120),
        ("Retry", 240),
        ("Rejected", None),
    ]
    assert told[3].message == f"dispatch: {refusal.reason} (retried 3 times, the limit being 3)"


@given(
    count=st.integers(min_value=0, max_value=2**31 - 1),
    base=st.integers(min_value=1, max_value=2**31 - 1),
    most=st.integers(min_value=1, max_value=2**31 - 1),
    limit=st.integers(min_value=0, max_value=2**31 - 1),
)
def test_the_delay_doubles_up_to_the_max_and_none_past_the_limit(
    count: int, base: int, most: int, limit: int
) -> None:
    backoff = gate.Backoff(base_seconds=base, max_seconds=most, limit_count=limit)
    delay = gate.retry_delay(count, backoff)
    if count >= limit:
        assert delay is None
        return
    assert delay == (most if count >= 64 else min(base * 2**count, most))
    assert delay is not None
    following = gate.retry_delay(count + 1, backoff)
    assert following is None or following == min(2 * delay, most)


def test_the_check_state_carries_the_reason_bounded_the_previous_state_and_a_delay() -> None:
    body = build_check_state(
        workload_dict(),
        check=CHECK,
        state="Retry",
        resource_version=ResourceVersion("7"),
        message="x" * 5000,
        now="2026-12-02T00:00:00Z",
        requeue_after_seconds=120,
    )
    (entry,) = body["status"]["admissionChecks"]
    assert (entry["state"], entry["requeueAfterSeconds"]) == ("Retry", 120)
    assert len(entry["message"]) == MAX_CHECK_MESSAGE
    assert body["metadata"]["resourceVersion"] == "7"
    short = build_check_state(
        workload_dict(),
        check=CHECK,
        state="Rejected",
        resource_version=ResourceVersion("7"),
        message="dispatch: why",
        now="2026-12-02T00:00:00Z",
    )
    (entry,) = short["status"]["admissionChecks"]
    assert entry["message"] == 'dispatch: why, Previously: "Pending"'
    assert "requeueAfterSeconds" not in entry


@given(
    state=st.sampled_from(["Pending", "Ready", "Retry", "Rejected"]),
    admitted=st.sampled_from([None, "True", "False"]),
    evictions=st.sampled_from([None, [("Preempted", 1)]]),
    raised=st.booleans(),
    floor=st.sampled_from(["0", "1", "4", "01", " 4", "x", ""]),
    flagged=st.booleans(),
)
def test_the_gate_approves_only_what_dispatch_approve_would(
    state: str,
    admitted: str | None,
    evictions: list[tuple[str, int]] | None,
    raised: bool,
    floor: str,
    flagged: bool,
) -> None:
    # The gate does not call workload.decide_approval: each thing it checks, the gate has
    # already decided on the same objects. Were one missed, this finds the approval.
    current = workload_dict(state=state, admitted=admitted, evictions=evictions)
    job = dispatch_job(raised_for=reservation_record(current) if raised else "old 1", floor=floor)
    if flagged:
        job["metadata"]["annotations"][wire.FOREIGN_ANNOTATION] = "true"
    decision = gate.decide_gate(current, job, check=CHECK)
    if isinstance(decision, Approve):
        assert decision.admission is not None
        assert decide_approval(current, job, check=CHECK, admission=decision.admission) is None
