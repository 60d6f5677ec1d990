"""The raise decision and the one object each raise writes (docs/design.md §2 'Raising A')."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch_k8s.core.rules import trainjob, wire
from dispatch_k8s.core.rules.decisions import Refusal, ResourceVersion
from dispatch_k8s.core.rules.request import StartRequest
from dispatch_k8s.core.rules.trainjob import (
    OLDEST_TRAINER,
    Draining,
    ForeignFlag,
    Raise,
    admission_in_patch,
    build_trainjob,
    decide_patch_stored,
    decide_raise,
    finished_reason,
    is_kueue_managed,
    multikueue_refusal,
    opened_by_last_raise,
    refusal_error,
    with_admission,
    with_hold,
)
from tests.unit.audit_factories import UID, jobset_dict, trainjob_dict
from tests.unit.factories import runtime_dict


def suspended(**overrides: Any) -> dict[str, Any]:
    job = trainjob_dict(**overrides)
    job["spec"]["suspend"] = True
    return job


def raised(admission: int, **fields: Any) -> Raise:
    defaults: dict[str, Any] = {
        "resource_version": ResourceVersion("4711"),
        "jobset_uid": None,
        "restart": 0,
        "highest_restart": 0,
        "generation": 4,
    }
    return Raise(admission=admission, **{**defaults, **fields})


def test_raise_takes_the_larger_of_patch_and_floor_plus_one() -> None:
    decision = decide_raise(suspended(admission="2", floor="5"), None)
    assert decision == raised(6)


def test_raise_after_a_reset_of_j_keeps_r_above_the_highest_r() -> None:
    # A=2 ran with J up to 3 (R=5); the JobSet was replaced: J=0. The next R must be above 5.
    job = suspended(admission="2", floor="2", highest_restart="3", jobset_uid="old")
    decision = decide_raise(job, jobset_dict(restarts=0))
    assert decision == raised(6, highest_restart=3)


def test_raise_records_the_highest_j_and_the_generation_it_writes() -> None:
    decision = decide_raise(suspended(highest_restart="1", jobset_uid=UID), jobset_dict(restarts=4))
    assert decision == raised(2, restart=4, highest_restart=4)
    assert isinstance(decision, Raise)
    annotations = with_admission(suspended(), decision)["metadata"]["annotations"]
    assert annotations[wire.HIGHEST_RESTART_ANNOTATION] == "4"
    # Read at generation 3, written at 4; Kueue may write once more (5) before it opens.
    assert annotations[wire.OPEN_UNTIL_GENERATION_ANNOTATION] == "5"
    opened = with_admission(suspended(), decision, suspend=False)["metadata"]["annotations"]
    assert opened[wire.OPEN_UNTIL_GENERATION_ANNOTATION] == "4", "spent by its own opening"


def test_foreign_job_is_refused_with_its_cause_and_how_to_clear_it() -> None:
    decision = decide_raise(suspended(foreign="true", cause="JobSet UID x is not y"), None)
    assert isinstance(decision, ForeignFlag)
    assert "flagged foreign" in decision.reason
    assert "JobSet UID x is not y" in decision.reason
    assert wire.FOREIGN_CAUSE_ANNOTATION in decision.reason
    assert refusal_error(decision).exit_code == 7
    assert refusal_error(Refusal("any rule")).exit_code == 6


def test_running_trainjob_is_refused() -> None:
    decision = decide_raise(trainjob_dict(), None)
    assert isinstance(decision, Refusal)
    assert "spec.suspend is not true" in decision.reason


def test_active_jobset_is_refused_with_what_to_wait_for() -> None:
    jobset = jobset_dict()
    jobset["status"]["replicatedJobsStatus"] = [{"name": "node", "active": 1}]
    decision = decide_raise(suspended(), jobset)
    assert isinstance(decision, Draining), "a state admit --wait waits out"
    assert "replicated job node still has active Jobs" in decision.reason
    assert "active is 0" in decision.reason


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"patched": False}, "no entry of manager"),
        ({"admission": None}, "is missing"),
        ({"admission": "01"}, "not a canonical decimal"),
        ({"floor": None}, "admission-floor is missing"),
        ({"floor": "x"}, "not a canonical decimal"),
        ({"admission": "999999"}, "bound is reached"),
        ({"highest_restart": "x"}, "highest-restart 'x' is not a canonical decimal"),
        ({"generation": None}, "metadata.generation None is not a number"),
    ],
    ids=[
        "no-patch",
        "no-a",
        "garbage-a",
        "no-floor",
        "garbage-floor",
        "bound",
        "garbage-j",
        "no-gen",
    ],
)
def test_garbage_is_refused_not_guessed(overrides: dict[str, Any], says: str) -> None:
    decision = decide_raise(suspended(**overrides), None)
    assert isinstance(decision, Refusal)
    assert says in decision.reason


def test_first_sight_of_the_jobset_records_its_uid() -> None:
    decision = decide_raise(suspended(), jobset_dict())
    assert isinstance(decision, Raise)
    assert decision.jobset_uid == UID
    recorded = decide_raise(suspended(jobset_uid="other"), jobset_dict())
    assert isinstance(recorded, Raise)
    assert recorded.jobset_uid is None, "a recorded UID is never overwritten: audit compares"


def test_with_admission_writes_patch_and_floor_and_nothing_else() -> None:
    job = suspended(admission="2", floor="2")
    decision = raised(3, jobset_uid=UID)
    written = with_admission(job, decision, suspend=False)
    assert admission_in_patch(written) == 3
    annotations = written["metadata"]["annotations"]
    assert annotations[wire.ADMISSION_FLOOR_ANNOTATION] == "3"
    assert annotations[wire.JOBSET_UID_ANNOTATION] == UID
    assert written["spec"]["suspend"] is False
    assert written["spec"]["runtimePatches"][0] == job["spec"]["runtimePatches"][0]
    assert written["spec"]["trainer"] == job["spec"]["trainer"]
    assert admission_in_patch(job) == 2, "the object read is left as it was"


@given(a=st.integers(0, 999_998), floor=st.integers(0, 999_998))
def test_raise_always_passes_both(a: int, floor: int) -> None:
    decision = decide_raise(suspended(admission=str(a), floor=str(floor)), None)
    assert isinstance(decision, Raise)
    assert decision.admission > max(a, floor)


def test_multikueue_is_refused_with_why() -> None:
    job = trainjob_dict()
    assert multikueue_refusal(job) is None
    job["spec"]["managedBy"] = wire.MULTIKUEUE_MANAGER
    refusal = multikueue_refusal(job)
    assert refusal is not None
    assert "not supported yet" in refusal.reason
    assert "starts J at 0 again" in refusal.reason


def test_queue_label_marks_kueue_management() -> None:
    job = trainjob_dict()
    assert not is_kueue_managed(job)
    job["metadata"]["labels"] = {wire.QUEUE_LABEL: "team-a"}
    assert is_kueue_managed(job)


@pytest.mark.parametrize(
    ("conditions", "says"),
    [
        ([], None),
        ([{"type": "Complete", "status": "False"}], None),
        ([{"type": "Suspended", "status": "True"}], None),
        ([{"type": "Complete", "status": "True"}], "is Complete"),
        (
            [{"type": "Suspended", "status": "False"}, {"type": "Failed", "status": "True"}],
            "is Failed",
        ),
    ],
    ids=["none", "not-complete", "suspended", "complete", "failed"],
)
def test_only_trainers_terminal_conditions_finish_a_job(
    conditions: list[dict[str, str]], says: str | None
) -> None:
    job = trainjob_dict()
    job["status"] = {"conditions": conditions}
    reason = finished_reason(job)
    assert (reason is None) if says is None else (reason is not None and says in reason)


def test_a_job_open_on_its_own_raise_is_done_and_any_other_is_not() -> None:
    job = suspended(admission="1", floor="1")
    opened = with_admission(job, raised(2, generation=4), suspend=False)
    opened["metadata"]["generation"] = 4  # what the API server gives the update
    assert opened_by_last_raise(opened) == 2
    held_again = {**opened, "metadata": {**opened["metadata"], "generation": 5}}
    assert opened_by_last_raise(held_again) is None, "suspended and opened again since"
    raised_while_suspended = with_admission(job, raised(2, generation=4))
    raised_while_suspended["metadata"]["generation"] = 4
    assert opened_by_last_raise(raised_while_suspended) is None, "still suspended"
    by_hand = trainjob_dict(open_until=None)  # open, no record of a raise that opened it
    assert opened_by_last_raise(by_hand) is None


# --- hold: suspend, and record J in the same update (issue 24) --------------------------------


@pytest.mark.parametrize(
    ("recorded", "restarts", "written"),
    [(None, 0, None), (None, 2, "2"), ("1", 3, "3"), ("5", 3, "5"), ("garbage", 3, "garbage")],
    ids=["none-seen", "first-seen", "raised", "never-lowered", "unreadable-left-to-audit"],
)
def test_hold_records_the_highest_j_in_its_one_update(
    recorded: str | None, restarts: int, written: str | None
) -> None:
    job = trainjob_dict(highest_restart=recorded)
    held = with_hold(job, jobset_dict(restarts=restarts))
    assert held["spec"]["suspend"] is True
    assert held["metadata"]["annotations"].get(wire.HIGHEST_RESTART_ANNOTATION) == written
    assert job["spec"]["suspend"] is False, "the read object is left as it was"


def test_hold_without_a_jobset_suspends_only() -> None:
    held = with_hold(trainjob_dict(), None)
    assert wire.HIGHEST_RESTART_ANNOTATION not in held["metadata"]["annotations"]


def test_a_trainjob_stored_without_our_patch_names_the_oldest_trainer() -> None:
    stored = trainjob_dict(jobset_uid=UID)
    assert decide_patch_stored(stored) is None
    # What an API server serving Trainer v2.1's TrainJob CRD stores: the unknown field pruned.
    del stored["spec"]["runtimePatches"]
    refusal = decide_patch_stored(stored)
    assert refusal is not None
    assert "Trainer before v2.2, with podTemplateOverrides" in refusal.reason
    assert f"dispatch-k8s needs Trainer {OLDEST_TRAINER} or later" in refusal.reason


@pytest.mark.parametrize(
    ("annotations", "recorded"),
    [
        ({}, ""),
        (
            {wire.ALLOW_RESTARTS_ANNOTATION: "torchrun, pod-failure-ignore"},
            "pod-failure-ignore,torchrun",
        ),
        (
            {wire.ALLOW_RANK_RESTART_ANNOTATION: "true"},
            "sidecars,container-restart,pod-failure-ignore,restart-job,torchrun",
        ),
    ],
    ids=["none", "listed", "allow-rank-restart"],
)
def test_start_records_the_restart_mechanisms_the_runtime_allows(
    annotations: dict[str, str], recorded: str
) -> None:
    runtime = runtime_dict()
    runtime["metadata"] |= {"uid": "rt-uid", "generation": 2, "annotations": annotations}
    request = StartRequest.model_validate(
        {
            "job_id": "train",
            "generation": 1,
            "submission": 1,
            "attempt": 1,
            "image": "registry.example/trainer:1",
            "command": ["python"],
            "runtime_name": "test-runtime",
            "namespace": "team-a",
        }
    )
    built = build_trainjob(request, trainer_job="node", runtime=runtime)
    assert built["metadata"]["annotations"][wire.RUNTIME_ALLOWS_ANNOTATION] == recorded
    # Not part of what was asked for: the same request is the same whatever the runtime allows.
    assert request_digest_of(built) == request_digest_of(
        build_trainjob(request, trainer_job="node")
    )


def request_digest_of(trainjob: dict[str, Any]) -> str:
    return str(trainjob["metadata"]["annotations"][wire.REQUEST_DIGEST_ANNOTATION])


def _job(floor: str, *, suspend: bool = True, foreign: bool = False) -> dict[str, Any]:
    annotations = {wire.ADMISSION_FLOOR_ANNOTATION: floor}
    if foreign:
        annotations[wire.FOREIGN_ANNOTATION] = wire.FOREIGN
    return {"metadata": {"name": "j", "annotations": annotations}, "spec": {"suspend": suspend}}


def test_a_raise_is_seen_only_where_the_floor_rose() -> None:
    assert trainjob.raise_seen(_job("1"), _job("3")) == 3
    assert trainjob.raise_seen(_job("3"), _job("3")) is None
    assert trainjob.raise_seen(_job("x"), _job("3")) is None, "a garbled floor tells no raise"


def test_only_a_suspended_job_flagged_foreign_has_its_workload_deactivated() -> None:
    flag = trainjob.foreign_and_suspended(_job("1", foreign=True))
    assert flag is not None
    assert "flagged foreign" in flag.reason
    assert trainjob.foreign_and_suspended(_job("1", foreign=True, suspend=False)) is None
    assert trainjob.foreign_and_suspended(_job("1")) is None
