"""A record that bounds R moved back, from two versions of one TrainJob (core/rules/erasure.py), and
the audit's decision given it (core/shell/auditing.py `decide`)."""

from __future__ import annotations

import copy
from typing import Any, Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch_k8s.core.rules import audit, erasure, trainjob, wire
from dispatch_k8s.core.rules.audit import Execution, FindingKind
from dispatch_k8s.core.shell import auditing
from tests.unit.audit_factories import OTHER_UID, UID, jobset_dict, pod_dict, trainjob_dict

TRAINJOB_UID: Final = "7d444840-9dc0-11d1-b245-5ffdce74fad2"
RAN: Final = Execution(r=3, pods={"node/0/0": "pod-uid-1"}).text()  # A = 2, J = 1
FLOOR: Final = wire.ADMISSION_FLOOR_ANNOTATION
HIGHEST: Final = wire.HIGHEST_RESTART_ANNOTATION
LAST: Final = wire.LAST_EXECUTION_ANNOTATION
JOBSET_UID: Final = wire.JOBSET_UID_ANNOTATION
UNTIL: Final = wire.OPEN_UNTIL_GENERATION_ANNOTATION


def recorded(**changes: Any) -> dict[str, Any]:
    """A running TrainJob after a raise to A = 2 and audits that saw J = 1 and an execution;
    `changes` sets (None removes) annotations on top."""
    job = trainjob_dict(admission="2", floor="2", jobset_uid=UID, highest_restart="1")
    job["metadata"]["uid"] = TRAINJOB_UID
    annotations = job["metadata"]["annotations"]
    annotations.update({LAST: RAN, UNTIL: "3"})
    for key, value in changes.items():
        annotation = {"floor": FLOOR, "highest": HIGHEST, "last": LAST}.get(key, key)
        annotation = {"jobset_uid": JOBSET_UID, "until": UNTIL}.get(key, annotation)
        if value is None:
            annotations.pop(annotation, None)
        else:
            annotations[annotation] = value
    return job


# (what someone did, the changes, the records it moved back)
ERASED = [
    ("last-execution removed", {"last": None}, [LAST]),
    (
        "last-execution replaced by a lower R",
        {"last": Execution(r=1, pods={"s": "p"}).text()},
        [LAST],
    ),
    ("last-execution made garbage", {"last": "{}"}, [LAST]),
    (
        "last-execution's slot given another pod at the same R",
        {"last": Execution(r=3, pods={"node/0/0": "rerun"}).text()},
        [LAST],
    ),
    (
        "last-execution's slot dropped at the same R",
        {"last": Execution(r=3, pods={"node/0/1": "pod-uid-2"}).text()},
        [LAST],
    ),
    ("highest-restart removed", {"highest": None}, [HIGHEST]),
    ("highest-restart lowered", {"highest": "0"}, [HIGHEST]),
    ("admission-floor lowered", {"floor": "1"}, [FLOOR]),
    ("admission-floor removed", {"floor": None}, [FLOOR]),
    ("admission-floor garbage", {"floor": "two"}, [FLOOR]),
    ("jobset-uid removed", {"jobset_uid": None}, [JOBSET_UID]),
    ("open-until-generation moved on with no raise", {"until": "9"}, [UNTIL]),
    ("open-until-generation removed", {"until": None}, [UNTIL]),
    (
        "every record at once",
        {"last": None, "floor": None, "jobset_uid": None},
        [LAST, FLOOR, JOBSET_UID],
    ),
    ("jobset-uid replaced (a person accepting a new JobSet)", {"jobset_uid": "other"}, []),
    ("the flag cleared by a person", {wire.FOREIGN_ANNOTATION: None}, []),
    ("a newer execution recorded", {"last": Execution(r=4, pods={"s": "q"}).text()}, []),
    (
        "a slot seen later appended at the same R",
        {"last": Execution(r=3, pods={"node/0/0": "pod-uid-1", "node/0/1": "b"}).text()},
        [],
    ),
    ("a raise: floor and open-until-generation on", {"floor": "3", "until": "5"}, []),
    ("a restart recorded", {"highest": "2"}, []),
]


@pytest.mark.parametrize(
    ("changes", "moved_back"), [e[1:] for e in ERASED], ids=[e[0] for e in ERASED]
)
def test_only_a_record_moved_back_is_an_erasure(
    changes: dict[str, Any], moved_back: list[str]
) -> None:
    before = recorded()
    found = erasure.decide_erasures(before, recorded(**changes))
    assert [e.annotation for e in found] == moved_back
    for e in found:
        assert e.finding.kind is FindingKind.RECORD_ERASED
        assert e.annotation in e.finding.reason
        assert "erased" in e.finding.reason
        assert e.value == before["metadata"]["annotations"][e.annotation]


def test_another_trainjob_of_the_same_name_is_no_erasure() -> None:
    """Deleted and made again: the new one starts with no records (start's ledger refuses
    that), and nothing of the old one was moved back."""
    again = recorded(last=None, floor=None, highest=None)
    again["metadata"]["uid"] = "another-uid"
    assert erasure.decide_erasures(recorded(), again) == ()


def test_put_back_where_it_was_left_not_where_it_has_moved_on() -> None:
    (removed,) = erasure.decide_erasures(recorded(), recorded(last=None))
    assert erasure.restored(recorded(last=None), (removed,))["metadata"]["annotations"][LAST] == RAN
    newer = Execution(r=5, pods={"s": "q"}).text()
    moved_on = erasure.restored(recorded(last=newer), (removed,))
    assert moved_on["metadata"]["annotations"][LAST] == newer


def test_two_erasures_of_one_record_put_back_the_first_value() -> None:
    (first,) = erasure.decide_erasures(recorded(), recorded(floor="1"))
    (second,) = erasure.decide_erasures(recorded(floor="1"), recorded(floor=None))
    both = first.then(second)
    assert (both.value, both.left) == ("2", None)
    assert erasure.restored(recorded(floor=None), (both,))["metadata"]["annotations"][FLOOR] == "2"


def test_the_decision_flags_it_and_writes_the_record_back() -> None:
    """The rerun the erasure hid (a new pod repeating the recorded R) is found against the
    record put back, and the one update writes it back beside the flag."""
    erased = recorded(last=None)
    found = erasure.decide_erasures(recorded(), erased)
    job = erasure.restored(erased, found)
    rerun = pod_dict(admission="2", restart="1", uid="pod-uid-2", completion_index="0")
    jobset = jobset_dict(restarts=1)
    job_audit = auditing.audit_of(job, jobset, runtime_now=None, jobs=[], pods=[rerun])
    decision = auditing.decide(
        job, jobset, job_audit, jobset_after=jobset, created=None, erased=found
    )
    kinds = [f.kind for f in decision.findings]
    assert kinds == [FindingKind.RECORD_ERASED, FindingKind.REPEATED_R], decision.findings
    assert decision.changes is not None
    assert decision.changes[LAST] == RAN
    assert decision.changes[wire.FOREIGN_ANNOTATION] == wire.FOREIGN
    written = audit.with_annotations(erased, decision.changes)
    assert written["metadata"]["annotations"][LAST] == RAN


def test_erased_again_after_the_flag_it_is_still_written_back() -> None:
    """The same erasure a second time: the flag and its cause are already as this pass would
    set them, yet the record is put back."""
    erased = recorded(last=None)
    found = erasure.decide_erasures(recorded(), erased)
    cause = audit.build_cause([e.finding.reason for e in found])
    flagged = recorded(last=None, **{wire.FOREIGN_ANNOTATION: "true"})
    flagged["metadata"]["annotations"][wire.FOREIGN_CAUSE_ANNOTATION] = cause
    job = erasure.restored(flagged, found)
    job_audit = auditing.audit_of(job, jobset_dict(), runtime_now=None, jobs=[], pods=[])
    decision = auditing.decide(
        job, jobset_dict(), job_audit, jobset_after=None, created=None, erased=found
    )
    assert decision.changes == {LAST: RAN}


def _held(**changes: Any) -> dict[str, Any]:
    held = recorded(**changes)
    held["spec"]["suspend"] = True
    return held


def _audited(job: dict[str, Any], jobset: dict[str, Any]) -> auditing.Decision:
    """The controller's pass over a version of the job and its (podless) JobSet."""
    job_audit = auditing.audit_of(job, jobset, runtime_now=None, jobs=[], pods=[])
    return auditing.decide(job, jobset, job_audit, jobset_after=jobset, created=None)


def test_step_4_in_one_write_leaves_nothing_to_flag_and_the_first_of_two_writes_does() -> None:
    """docs/operations.md, A job flagged foreign, step 4, on a held job whose JobSet was
    replaced: the controller audits each version it is told. The one write (flag and cause
    removed, the new JobSet recorded, J's bound raised) moves no record back and is audited
    clean; the flag removed alone, as the first of two commands did, is flagged again."""
    cause = f"JobSet UID {OTHER_UID} is not the recorded {UID}: J may have been reset"
    flagged = _held(**{wire.FOREIGN_ANNOTATION: wire.FOREIGN, wire.FOREIGN_CAUSE_ANNOTATION: cause})
    replaced = jobset_dict(uid=OTHER_UID)
    one_write = _held(jobset_uid=OTHER_UID, highest="3")
    assert erasure.decide_erasures(flagged, one_write) == ()
    assert _audited(one_write, replaced) == auditing.Decision(findings=(), changes=None)
    first_of_two = _held()
    assert erasure.decide_erasures(flagged, first_of_two) == ()
    again = _audited(first_of_two, replaced)
    assert [f.kind for f in again.findings] == [FindingKind.JOBSET_UID]
    assert (again.changes or {}).get(wire.FOREIGN_ANNOTATION) == wire.FOREIGN


def _raised(job: dict[str, Any], restarts: int) -> dict[str, Any]:
    """What dispatch-unsuspend writes on the job held (its flag, if any, cleared by a person
    as docs/operations.md says): the raise, opening it."""
    suspended = copy.deepcopy({**job, "spec": {**job["spec"], "suspend": True}})
    for flag in (wire.FOREIGN_ANNOTATION, wire.FOREIGN_CAUSE_ANNOTATION):
        suspended["metadata"]["annotations"].pop(flag, None)
    decision = trainjob.decide_raise(suspended, jobset_dict(restarts=restarts))
    assert isinstance(decision, trainjob.Raise), decision
    raised = trainjob.with_admission(suspended, decision, suspend=False)
    raised["metadata"]["generation"] = decision.generation
    return raised


@given(st.lists(st.tuples(st.sampled_from(["raise", "audit"]), st.integers(0, 5)), max_size=6))
def test_nothing_dispatch_k8s_writes_is_an_erasure(history: list[tuple[str, int]]) -> None:
    """Raises (A, floor, highest J, open-until-generation) and audits of a pod at some J (the
    highest J, a newer execution, any finding) one after another: none moves a record back."""
    job = recorded()
    for step, (what, restarts) in enumerate(history):
        before = copy.deepcopy(job)
        if what == "raise":
            job = _raised(job, restarts)
        else:
            pod = pod_dict(
                admission=str(trainjob.admission_in_patch(job)),
                restart=str(restarts),
                uid=f"pod-{step}",
                completion_index="0",
            )
            jobset = jobset_dict(restarts=restarts)
            job_audit = auditing.audit_of(job, jobset, runtime_now=None, jobs=[], pods=[pod])
            decision = auditing.decide(job, jobset, job_audit, jobset_after=jobset, created=None)
            job = audit.with_annotations(job, decision.changes or {})
        assert erasure.decide_erasures(before, job) == (), what
