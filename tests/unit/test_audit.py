"""The audit (docs/design.md §2, "Resets are detected"): findings and the one write."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch_k8s.core.rules.audit import (
    CAUSE_SEPARATOR,
    MAX_CAUSE_CHARS,
    Execution,
    Finding,
    FindingKind,
    Observed,
    build_cause,
    decide_annotations,
    with_annotations,
)
from dispatch_k8s.core.rules.shapes import shown
from dispatch_k8s.core.rules.snapshot import Snapshot
from dispatch_k8s.core.rules.trainjob import runtime_seen
from dispatch_k8s.core.rules.wire import (
    ADMISSION_ANNOTATION,
    ADMISSION_FLOOR_ANNOTATION,
    FOREIGN,
    FOREIGN_ANNOTATION,
    FOREIGN_CAUSE_ANNOTATION,
    HIGHEST_RESTART_ANNOTATION,
    JOBSET_UID_ANNOTATION,
    LAST_EXECUTION_ANNOTATION,
    RUNTIME_ALLOWS_ANNOTATION,
)
from tests.unit.audit_factories import (
    NAME,
    OTHER_UID,
    UID,
    decide_audit,
    decide_findings,
    jobset_dict,
    pod_dict,
    trainjob_dict,
)
from tests.unit.factories import replicated_job_dict

PATCH_A = (
    f"TrainJob {NAME} spec.runtimePatches[1].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
    f".template.spec.template.metadata.annotations['{ADMISSION_ANNOTATION}']"
)
POD = f"{NAME}-node-0-0-x7k2p"
POD_A = f"pod {POD} annotation {ADMISSION_ANNOTATION}"
FLOOR = f"TrainJob {NAME} annotation {ADMISSION_FLOOR_ANNOTATION}"
RESET = f"JobSet UID {OTHER_UID} is not the recorded {UID}: J may have been reset"
CANONICAL = re.compile(r"0|[1-9][0-9]{0,5}")

# Not a canonical decimal from 0 to 999,999: what the prologue would refuse with exit 125.
GARBAGE = pytest.mark.parametrize(
    "value",
    ["01", "-1", "+1", "1.0", " 1", "1\n", "0x1", "abc", "1000000", "\uff11", 1],
    ids=[
        "leading-zero",
        "negative",
        "plus-sign",
        "fraction",
        "space",
        "newline",
        "hex",
        "word",
        "above-bound",
        "fullwidth-digit",
        "not-a-string",
    ],
)


def audit(
    trainjob: Mapping[str, Any],
    jobset: Mapping[str, Any] | None = None,
    pods: Iterable[Mapping[str, Any]] = (),
) -> tuple[Finding, ...]:
    # Pods always arrive as a one-pass generator, the way the step streams list pages.
    return decide_findings(trainjob, jobset, pods=(pod for pod in pods))


def reasons(findings: Iterable[Finding]) -> list[str]:
    return [finding.reason for finding in findings]


def kinds(findings: Iterable[Finding]) -> list[FindingKind]:
    return [finding.kind for finding in findings]


# --- A clean job is clean ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trainjob", "jobset", "pods"),
    [
        (trainjob_dict(), jobset_dict(), [pod_dict()]),
        (trainjob_dict(jobset_uid=UID), jobset_dict(), [pod_dict()]),
        (trainjob_dict(jobset_uid=UID), None, []),
        (trainjob_dict(admission="0", floor="0"), None, []),
        (trainjob_dict(admission="7", floor="5"), jobset_dict(), [pod_dict(admission="7")]),
        (
            trainjob_dict(jobset_uid=UID),
            jobset_dict(),
            [
                pod_dict("done", admission=None, jobset_uid=OTHER_UID, phase="Succeeded"),
                pod_dict("failed", admission="0", jobset_uid=OTHER_UID, phase="Failed"),
                pod_dict("going", admission="x", jobset_uid=OTHER_UID, terminating=True),
            ],
        ),
        (
            trainjob_dict(),
            jobset_dict(),
            [pod_dict("init", admission=None, replicated_job="dataset-initializer")],
        ),
        (
            trainjob_dict(jobset_uid=UID),
            jobset_dict(),
            [pod_dict(jobset_uid=None)],
        ),
    ],
    ids=[
        "first-sight-nothing-recorded",
        "recorded-uid-matches",
        "no-jobset-yet",
        "never-admitted",
        "admission-above-floor",
        "finished-and-terminating-pods-not-checked",
        "initializer-pod-carries-no-admission",
        "pod-without-jobset-uid-label",
    ],
)
def test_clean_job_has_no_findings(
    trainjob: dict[str, Any], jobset: dict[str, Any] | None, pods: list[dict[str, Any]]
) -> None:
    assert audit(trainjob, jobset, pods) == ()


# --- a. JobSet UID ---------------------------------------------------------------------------


def test_replaced_jobset_is_reported_in_exact_words() -> None:
    findings = audit(trainjob_dict(jobset_uid=UID), jobset_dict(uid=OTHER_UID))
    assert findings == (Finding(kind=FindingKind.JOBSET_UID, reason=RESET),)
    assert str(findings[0]) == RESET


@pytest.mark.parametrize(
    ("jobset", "pods"),
    [
        (jobset_dict(), [pod_dict(jobset_uid=OTHER_UID)]),
        (jobset_dict(), [pod_dict(f"p{i}", jobset_uid=OTHER_UID) for i in range(3)]),
        (jobset_dict(uid=OTHER_UID), [pod_dict(f"p{i}", jobset_uid=OTHER_UID) for i in range(3)]),
        (None, [pod_dict(jobset_uid=OTHER_UID)]),
    ],
    ids=["one-pod", "many-pods", "jobset-and-its-pods", "pods-without-jobset"],
)
def test_live_pod_of_another_jobset_is_the_same_finding_once(
    jobset: dict[str, Any] | None, pods: list[dict[str, Any]]
) -> None:
    assert reasons(audit(trainjob_dict(jobset_uid=UID), jobset, pods)) == [RESET]


def test_each_foreign_jobset_uid_is_reported() -> None:
    third = "00000000-0000-0000-0000-000000000003"
    pods = [pod_dict("a", jobset_uid=OTHER_UID), pod_dict("b", jobset_uid=third)]
    found = reasons(audit(trainjob_dict(jobset_uid=UID), jobset_dict(uid=OTHER_UID), pods))
    assert found == [RESET, f"JobSet UID {third} is not the recorded {UID}: J may have been reset"]


@pytest.mark.parametrize("recorded", ["", 7], ids=["blank", "not-a-string"])
def test_blanked_jobset_uid_record_is_a_finding(recorded: Any) -> None:
    findings = audit(trainjob_dict(jobset_uid=recorded), jobset_dict())
    assert kinds(findings) == [FindingKind.JOBSET_UID]
    assert f"annotation {JOBSET_UID_ANNOTATION} is {recorded!r}" in findings[0].reason


# --- Floor -----------------------------------------------------------------------------------


MISSING = pytest.mark.parametrize(
    ("value", "said"), [(None, "is missing"), ("", "is empty")], ids=["unset", "empty"]
)


@MISSING
def test_missing_floor_is_a_finding(value: Any, said: str) -> None:
    assert audit(trainjob_dict(floor=value)) == (
        Finding(kind=FindingKind.ADMISSION_FLOOR, reason=f"{FLOOR} {said}"),
    )


@GARBAGE
def test_garbage_floor_is_a_finding(value: Any) -> None:
    findings = audit(trainjob_dict(floor=value))
    assert kinds(findings) == [FindingKind.ADMISSION_FLOOR]
    assert findings[0].reason.startswith(f"{FLOOR} {value!r} is not")


def test_without_floor_garbage_admission_is_still_found() -> None:
    findings = audit(trainjob_dict(floor="x", admission="y"), None, [pod_dict(admission=None)])
    assert kinds(findings) == [
        FindingKind.ADMISSION_FLOOR,
        FindingKind.RUNTIME_PATCH,
        FindingKind.POD_ADMISSION,
    ]


# --- b. The runtime patch --------------------------------------------------------------------


def test_missing_runtime_patch_is_a_finding() -> None:
    findings = audit(trainjob_dict(patched=False))
    assert reasons(findings) == [
        f"TrainJob {NAME} spec.runtimePatches has no entry of manager "
        "dispatch.phpboyscout.uk/adapter: A is set on no pod"
    ]


def test_runtime_patch_of_no_replicated_job_is_a_finding() -> None:
    trainjob = trainjob_dict()
    trainjob["spec"]["runtimePatches"][1]["trainingRuntimeSpec"]["template"]["spec"] = {}
    assert kinds(audit(trainjob)) == [FindingKind.RUNTIME_PATCH]


@MISSING
def test_missing_admission_in_runtime_patch_is_a_finding(value: Any, said: str) -> None:
    assert reasons(audit(trainjob_dict(admission=value))) == [f"{PATCH_A} {said}"]


@GARBAGE
def test_garbage_admission_in_runtime_patch_is_a_finding(value: Any) -> None:
    findings = audit(trainjob_dict(admission=value))
    assert kinds(findings) == [FindingKind.RUNTIME_PATCH]
    assert findings[0].reason.startswith(f"{PATCH_A} {value!r} is not")


def test_admission_below_floor_in_runtime_patch_is_a_finding() -> None:
    assert reasons(audit(trainjob_dict(admission="1", floor="2"))) == [
        f"{PATCH_A} is 1, below the admission floor 2: A may have been reset"
    ]


# --- c. Live pods ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pod",
    [
        pod_dict(admission=None),
        pod_dict(admission=None, phase="Pending"),
        pod_dict(admission=None, phase="Unknown"),
        pod_dict(admission=None, replicated_job=None),
        pod_dict(admission=""),
    ],
    ids=["running", "pending", "unknown", "no-replicated-job-label", "empty"],
)
def test_live_pod_without_admission_is_a_finding(pod: dict[str, Any]) -> None:
    said = "is empty" if pod["metadata"]["annotations"] else "is missing"
    assert audit(trainjob_dict(), jobset_dict(), [pod]) == (
        Finding(kind=FindingKind.POD_ADMISSION, reason=f"{POD_A} {said}"),
    )


@GARBAGE
def test_live_pod_with_garbage_admission_is_a_finding(value: Any) -> None:
    findings = audit(trainjob_dict(), jobset_dict(), [pod_dict(admission=value)])
    assert kinds(findings) == [FindingKind.POD_ADMISSION]
    assert findings[0].reason.startswith(f"{POD_A} {value!r} is not")


def test_live_pod_below_floor_is_a_finding() -> None:
    findings = audit(trainjob_dict(admission="3", floor="3"), None, [pod_dict(admission="2")])
    assert reasons(findings) == [
        f"{POD_A} is 2, below the admission floor 3: A may have been reset"
    ]


def test_every_offending_pod_is_named() -> None:
    pods = [pod_dict("ok"), pod_dict("bare", admission=None), pod_dict("low", admission="0")]
    found = reasons(audit(trainjob_dict(), jobset_dict(), pods))
    assert [reason.split()[1] for reason in found] == ["bare", "low"]


def test_pods_are_consumed_in_one_pass_page_by_page() -> None:
    consumed: list[str] = []

    def pages() -> Iterator[dict[str, Any]]:
        for page in ([pod_dict("a"), pod_dict("b")], [pod_dict("c", admission="0")]):
            for pod in page:
                consumed.append(pod["metadata"]["name"])
                yield pod

    stream = pages()
    findings = decide_findings(trainjob_dict(), jobset_dict(), pods=stream)
    assert consumed == ["a", "b", "c"]
    assert [reason.split()[1] for reason in reasons(findings)] == ["c"]
    assert next(stream, None) is None


# --- Properties: A against the floor ---------------------------------------------------------

counters = st.integers(0, 999_999)


@given(floor=counters, data=st.data())
def test_any_admission_at_or_above_floor_is_clean(floor: int, data: st.DataObject) -> None:
    at_least = st.integers(max(floor, 1), 999_999)  # A = 0 with J = 0 is R = 0: a finding
    patch = data.draw(at_least)
    pods = [pod_dict(f"p{i}", admission=str(data.draw(at_least))) for i in range(3)]
    trainjob = trainjob_dict(admission=str(patch), floor=str(floor), jobset_uid=UID)
    trainjob["spec"]["suspend"] = True  # pods of any A may still drain: only the floor counts
    assert audit(trainjob, jobset_dict(), pods) == ()


@given(floor=st.integers(1, 999_999), data=st.data())
def test_any_admission_below_floor_is_found(floor: int, data: st.DataObject) -> None:
    below = st.integers(0, floor - 1)
    trainjob = trainjob_dict(admission=str(data.draw(below)), floor=str(floor))
    findings = audit(trainjob, jobset_dict(), [pod_dict(admission=str(data.draw(below)))])
    assert kinds(findings) == [FindingKind.RUNTIME_PATCH, FindingKind.POD_ADMISSION]
    assert all(f"below the admission floor {floor}:" in reason for reason in reasons(findings))


@given(value=st.text(max_size=8))
def test_pod_admission_is_found_unless_canonical(value: str) -> None:
    job = trainjob_dict(admission="0", floor="0")
    job["spec"]["suspend"] = True  # pods of any A may still drain: only the floor counts
    # J = 1, so that A = 0 is not also an execution with R = 0 (test_audit_path.py).
    findings = audit(job, None, [pod_dict(admission=value, restart="1")])
    assert bool(findings) is not bool(CANONICAL.fullmatch(value))


# --- The one write ---------------------------------------------------------------------------


def audit_and_decide(
    trainjob: dict[str, Any],
    jobset: dict[str, Any] | None,
    pods: Iterable[dict[str, Any]] = (),
) -> dict[str, str] | None:
    findings = audit(trainjob, jobset, pods)
    return decide_annotations(trainjob, findings, jobset=jobset)


def test_first_clean_audit_records_jobset_uid_and_second_writes_nothing() -> None:
    trainjob, jobset = trainjob_dict(), jobset_dict()
    first = audit_and_decide(trainjob, jobset, [pod_dict()])
    assert first == {JOBSET_UID_ANNOTATION: UID}
    written = with_annotations(trainjob, first)
    assert audit_and_decide(written, jobset, [pod_dict()]) is None


def test_no_jobset_records_nothing() -> None:
    assert audit_and_decide(trainjob_dict(), None) is None


def test_findings_flag_the_trainjob_foreign_with_the_cause() -> None:
    pods = [pod_dict("bare", admission=None)]
    decision = audit_and_decide(trainjob_dict(admission="1", floor="2"), jobset_dict(), pods)
    cause = CAUSE_SEPARATOR.join(
        [
            f"{PATCH_A} is 1, below the admission floor 2: A may have been reset",
            f"pod bare annotation {ADMISSION_ANNOTATION} is missing",
        ]
    )
    # Not a UID finding, so the JobSet is still recorded on first sight in the same write.
    assert decision == {
        JOBSET_UID_ANNOTATION: UID,
        FOREIGN_ANNOTATION: FOREIGN,
        FOREIGN_CAUSE_ANNOTATION: cause,
    }


def test_replaced_jobset_is_flagged_and_never_recorded() -> None:
    decision = audit_and_decide(trainjob_dict(jobset_uid=UID), jobset_dict(uid=OTHER_UID))
    assert decision == {FOREIGN_ANNOTATION: FOREIGN, FOREIGN_CAUSE_ANNOTATION: RESET}


def test_uid_finding_without_a_record_records_nothing() -> None:
    decision = audit_and_decide(trainjob_dict(jobset_uid=""), jobset_dict())
    assert decision is not None
    assert JOBSET_UID_ANNOTATION not in decision


def test_same_findings_again_write_nothing() -> None:
    trainjob, jobset = trainjob_dict(jobset_uid=UID), jobset_dict(uid=OTHER_UID)
    first = audit_and_decide(trainjob, jobset)
    assert first is not None
    assert audit_and_decide(with_annotations(trainjob, first), jobset) is None


@pytest.mark.parametrize(
    ("jobset", "pods"),
    [(jobset_dict(), [pod_dict()]), (jobset_dict(), []), (None, [])],
    ids=["clean-with-pods", "clean-pods-gone", "clean-jobset-gone"],
)
def test_clean_audit_keeps_an_earlier_flag(
    jobset: dict[str, Any] | None, pods: list[dict[str, Any]]
) -> None:
    flagged = trainjob_dict(jobset_uid=UID, foreign=FOREIGN, cause=f"{POD_A} is missing")
    assert audit_and_decide(flagged, jobset, pods) is None


def test_new_findings_on_a_flagged_job_replace_the_cause_and_keep_the_flag() -> None:
    flagged = trainjob_dict(jobset_uid=UID, foreign=FOREIGN, cause="an earlier finding")
    decision = audit_and_decide(flagged, jobset_dict(uid=OTHER_UID))
    assert decision == {FOREIGN_CAUSE_ANNOTATION: RESET}


def test_flag_a_person_cleared_is_set_again_by_new_findings() -> None:
    cleared = trainjob_dict(jobset_uid=UID, foreign="false", cause=RESET)
    assert audit_and_decide(cleared, jobset_dict(uid=OTHER_UID)) == {FOREIGN_ANNOTATION: FOREIGN}


def test_cause_of_many_pods_is_capped_and_counts_what_it_drops() -> None:
    pods = [pod_dict(f"{NAME}-node-0-{i}-x7k2p", admission=None) for i in range(500)]
    decision = audit_and_decide(trainjob_dict(jobset_uid=UID), jobset_dict(), pods)
    assert decision is not None
    cause = decision[FOREIGN_CAUSE_ANNOTATION]
    kept = cause.split(CAUSE_SEPARATOR)
    assert len(cause) <= MAX_CAUSE_CHARS
    assert kept[-1] == f"and {500 - (len(kept) - 1)} more findings"
    assert kept[0] == f"pod {NAME}-node-0-0-x7k2p annotation {ADMISSION_ANNOTATION} is missing"


def test_one_huge_garbage_value_is_trimmed() -> None:
    cause = build_cause(["x" * (2 * MAX_CAUSE_CHARS), "short"])
    assert len(cause) == MAX_CAUSE_CHARS
    assert cause.endswith(f"[trimmed]{CAUSE_SEPARATOR}and 1 more finding")


@given(reasons=st.lists(st.text(min_size=1, max_size=3000), max_size=20))
def test_cause_never_exceeds_cap(reasons: list[str]) -> None:
    assert len(build_cause(reasons)) <= MAX_CAUSE_CHARS


# --- with_annotations ------------------------------------------------------------------------


def test_with_annotations_copies_and_leaves_spec_alone() -> None:
    trainjob = trainjob_dict(jobset_uid=UID)
    before = copy.deepcopy(trainjob)
    updated = with_annotations(trainjob, {FOREIGN_ANNOTATION: FOREIGN})
    assert trainjob == before
    assert updated["spec"] == before["spec"]
    assert updated["spec"] is not trainjob["spec"]
    assert updated["metadata"]["resourceVersion"] == "4711"
    assert updated["metadata"]["annotations"] == {
        **before["metadata"]["annotations"],
        FOREIGN_ANNOTATION: FOREIGN,
    }


def test_with_annotations_on_a_trainjob_without_annotations() -> None:
    trainjob = trainjob_dict()
    del trainjob["metadata"]["annotations"]
    updated = with_annotations(trainjob, {JOBSET_UID_ANNOTATION: UID})
    assert updated["metadata"]["annotations"] == {JOBSET_UID_ANNOTATION: UID}


# --- executions: a repeated or lowered R, and what the audit records ----------------------


def observe(
    trainjob: Mapping[str, Any],
    jobset: Mapping[str, Any] | None = None,
    pods: Iterable[Mapping[str, Any]] = (),
) -> tuple[tuple[Finding, ...], Observed]:
    return decide_audit(trainjob, jobset, pods=(pod for pod in pods))


def recorded(r: int, pod: str = "pod-uid-1", slot: str = "node/0/None") -> str:
    return Execution(r=r, pods={slot: pod}).text()


def test_first_execution_seen_is_recorded_with_the_highest_j() -> None:
    job = trainjob_dict(admission="2", floor="2", jobset_uid=UID)
    pods = [
        pod_dict(f"{NAME}-node-0-1-b", admission="2", restart="3", completion_index="1", uid="b"),
        pod_dict(admission="2", restart="3", completion_index="0", uid="a"),
        pod_dict("old", admission="1", restart="2", phase="Failed", uid="c"),
    ]
    findings, observed = observe(job, jobset_dict(restarts=3), pods)
    assert findings == ()
    assert observed == Observed(
        highest_restart=3, execution=Execution(r=5, pods={"node/0/0": "a", "node/0/1": "b"})
    )
    changes = decide_annotations(job, findings, jobset=jobset_dict(), observed=observed)
    assert changes == {
        HIGHEST_RESTART_ANNOTATION: "3",
        LAST_EXECUTION_ANNOTATION: '{"pods":{"node/0/0":"a","node/0/1":"b"},"r":5}',
    }


def test_the_same_execution_again_writes_nothing() -> None:
    job = trainjob_dict(jobset_uid=UID, highest_restart="0", last_execution=recorded(1))
    findings, observed = observe(job, jobset_dict(), [pod_dict()])
    assert findings == ()
    assert decide_annotations(job, findings, jobset=jobset_dict(), observed=observed) is None


def test_a_new_execution_with_the_recorded_r_is_a_finding() -> None:
    # Held, then opened by hand without a raise: a new pod in the same slot, same A and J.
    job = trainjob_dict(jobset_uid=UID, last_execution=recorded(1, pod="first"))
    findings, observed = observe(job, jobset_dict(), [pod_dict(uid="second")])
    assert [f.kind for f in findings] == [FindingKind.REPEATED_R]
    assert "began an execution with R = 1" in findings[0].reason
    assert "pod UID first already had" in findings[0].reason
    assert observed.execution is None, "the record stays with the first execution"
    changes = decide_annotations(job, findings, jobset=jobset_dict(), observed=observed)
    assert changes is not None
    assert changes[FOREIGN_ANNOTATION] == FOREIGN


def test_a_live_pod_below_the_recorded_r_is_a_finding() -> None:
    job = trainjob_dict(admission="2", floor="2", jobset_uid=UID, last_execution=recorded(5))
    findings, _ = observe(job, jobset_dict(), [pod_dict(admission="2", restart="0", uid="new")])
    assert [f.kind for f in findings] == [FindingKind.LOWER_R]
    assert "R = A + J = 2 + 0 = 2, below the R = 5" in findings[0].reason


def test_a_higher_r_is_recorded_from_the_slots_seen() -> None:
    job = trainjob_dict(admission="2", floor="2", jobset_uid=UID, last_execution=recorded(1))
    other_slot = pod_dict(admission="2", completion_index="1", uid="x")
    findings, observed = observe(job, jobset_dict(), [other_slot])
    assert findings == ()
    assert observed.execution == Execution(r=2, pods={"node/0/1": "x"})


def test_a_slot_seen_later_at_the_recorded_r_is_appended() -> None:
    # The auditor often sees a job's first pod before the others are made.
    job = trainjob_dict(jobset_uid=UID, last_execution=recorded(1, pod="a", slot="node/0/1"))
    pods = [pod_dict(completion_index="1", uid="a"), pod_dict(completion_index="0", uid="b")]
    findings, observed = observe(job, jobset_dict(), pods)
    assert findings == ()
    assert observed.execution == Execution(r=1, pods={"node/0/1": "a", "node/0/0": "b"})
    assert observed.execution.text() == '{"pods":{"node/0/1":"a","node/0/0":"b"},"r":1}', (
        "the record as it was is a prefix of the one written"
    )


@pytest.mark.parametrize("slot", ["0", "1"])
def test_a_rank_made_again_at_the_recorded_r_is_a_finding_whichever_slot(slot: str) -> None:
    # A child Job scaled down and up: the rank's pod went without a failure (J stays) and
    # JobSet's template made it again with the same A.
    ran = Execution(r=1, pods={"node/0/0": "first-0", "node/0/1": "first-1"}).text()
    job = trainjob_dict(jobset_uid=UID, last_execution=ran)
    kept = "1" if slot == "0" else "0"
    pods = [
        pod_dict(completion_index=kept, uid=f"first-{kept}"),
        pod_dict(f"{NAME}-node-0-{slot}-again", completion_index=slot, uid="again"),
    ]
    findings, observed = observe(job, jobset_dict(), pods)
    assert [f.kind for f in findings] == [FindingKind.REPEATED_R]
    assert f"R = 1 in slot node/0/{slot}" in findings[0].reason
    assert f"pod UID first-{slot} already had" in findings[0].reason
    assert observed.execution is None, "the record stays with the first execution"


@pytest.mark.parametrize(
    "forged",
    [
        Execution(r=1, pods={"pinned/0/0": "forged"}).text(),
        json.dumps({"pod": "forged", "r": 1, "slot": "pinned/0/0"}),  # the earlier format
    ],
    ids=["per-slot", "earlier-format"],
)
def test_a_record_of_a_slot_that_never_existed_bounds_nothing(forged: str) -> None:
    # Forged at creation: no pod ever ran in pinned/0/0. The first opening's slot is added to
    # the record, so the second opening without a raise is found.
    job = trainjob_dict(jobset_uid=UID, last_execution=forged)
    findings, observed = observe(job, jobset_dict(), [pod_dict(uid="first")])
    assert findings == ()
    assert observed.execution == Execution(
        r=1, pods={"pinned/0/0": "forged", "node/0/None": "first"}
    )
    again = trainjob_dict(jobset_uid=UID, last_execution=observed.execution.text())
    findings, _ = observe(again, jobset_dict(), [pod_dict(uid="second")])
    assert [f.kind for f in findings] == [FindingKind.REPEATED_R]


def test_the_earlier_record_format_is_read_as_its_one_slot() -> None:
    earlier = json.dumps({"pod": "first", "r": 1, "slot": "node/0/None"})
    assert Execution.parse(earlier) == Execution(r=1, pods={"node/0/None": "first"})
    job = trainjob_dict(jobset_uid=UID, last_execution=earlier)
    findings, _ = observe(job, jobset_dict(), [pod_dict(uid="second")])
    assert [f.kind for f in findings] == [FindingKind.REPEATED_R]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[]",
        '{"r":"1","slot":"s","pod":"p"}',
        "null",
        '{"pods":[],"r":1}',
        '{"pods":{"s":1},"r":1}',
        '{"pods":{},"r":true}',
    ],
)
def test_an_unreadable_record_reads_as_none(text: str) -> None:
    assert Execution.parse(text) is None


def test_highest_j_is_never_lowered() -> None:
    job = trainjob_dict(jobset_uid=UID, highest_restart="7")
    findings, observed = observe(job, jobset_dict(restarts=2), [])
    assert observed.highest_restart == 2
    assert decide_annotations(job, findings, jobset=jobset_dict(), observed=observed) is None


# --- what ran: in-place restarts, duplicate pods, stale pods, the live JobSet --------------


def test_a_trainer_container_restarted_in_place_is_a_finding() -> None:
    pod = pod_dict()
    pod["status"]["containerStatuses"] = [
        {"name": "sidecar", "restartCount": 4},
        {"name": "node", "restartCount": 2},
    ]
    findings = audit(trainjob_dict(jobset_uid=UID), jobset_dict(), [pod])
    assert kinds(findings) == [FindingKind.RESTARTED_IN_PLACE]
    assert "container node was restarted in place 2 times" in findings[0].reason


def test_two_pods_of_one_slot_under_one_a_and_j_are_a_finding() -> None:
    first = pod_dict("first", completion_index="0", phase="Failed", uid="1")
    rerun = pod_dict("rerun", completion_index="0", uid="2")
    other = pod_dict("other", completion_index="1", uid="3")
    findings = audit(trainjob_dict(jobset_uid=UID), jobset_dict(), [first, rerun, other])
    assert kinds(findings) == [FindingKind.DUPLICATE_POD]
    assert "pods first, rerun all ran node/0/0 with A = 1 and J = 0" in findings[0].reason
    next_attempt = pod_dict("next", completion_index="0", restart="1", uid="4")
    restarted = jobset_dict(restarts=1)  # the JobSet counted the restart the pod runs under
    assert audit(trainjob_dict(jobset_uid=UID), restarted, [first, next_attempt]) == ()


def test_a_running_jobs_pod_below_the_patch_is_stale_but_not_while_held() -> None:
    job = trainjob_dict(admission="3", floor="3", jobset_uid=UID)
    pods = [pod_dict(admission="3", uid="a"), pod_dict("old", admission="3", uid="b")]
    assert audit(job, jobset_dict(), pods) == ()
    job["metadata"]["annotations"]["dispatch.phpboyscout.uk/admission-floor"] = "2"
    stale = pod_dict("old", admission="2", uid="b")
    findings = audit(job, jobset_dict(), [stale])
    assert kinds(findings) == [FindingKind.STALE_POD]
    assert "runs with A = 2 while the running job's runtime patch holds A = 3" in findings[0].reason
    job["spec"]["suspend"] = True
    assert audit(job, jobset_dict(), [stale]) == ()


def test_the_live_jobset_is_checked_against_the_rules_no_annotation_waives() -> None:
    jobset = jobset_dict()
    jobset["spec"] = {
        "ttlSecondsAfterFinished": 30,
        "replicatedJobs": [
            {
                "name": "node",
                "template": {
                    "spec": {
                        "backoffLimit": 0,
                        "template": {"spec": {"restartPolicy": "Never", "containers": []}},
                    }
                },
            }
        ],
    }
    findings = audit(trainjob_dict(jobset_uid=UID), jobset, [])
    assert kinds(findings) == [FindingKind.JOBSET_SPEC]
    assert findings[0].reason.startswith(
        f"JobSet {NAME} spec.ttlSecondsAfterFinished: must be unset"
    )


IGNORE_42: Final = {
    "rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}}]
}
IGNORED = (
    "podFailurePolicy.rules[0].action: must not be Ignore: the failure is not counted and the "
    "pod is replaced, moving neither A nor J (allowed by dispatch.phpboyscout.uk/allow-restarts: "
    "pod-failure-ignore)"
)


def ignoring_jobset() -> dict[str, Any]:
    """A live JobSet whose trainer job ignores exit 42: the p-blind case of issue 44."""
    jobset = jobset_dict()
    trainer = replicated_job_dict(job_fields={"podFailurePolicy": IGNORE_42})
    jobset["spec"] = {"replicatedJobs": [trainer]}
    return jobset


def ignoring_child_job() -> dict[str, Any]:
    """The trainer child Job JobSet made from that template."""
    job = ignoring_jobset()["spec"]["replicatedJobs"][0]["template"]
    labels = {**job["metadata"]["labels"], "jobset.sigs.k8s.io/replicatedjob-name": "node"}
    meta = {"name": f"{NAME}-node-0", "labels": labels, "ownerReferences": []}
    return {"metadata": meta, "spec": job["spec"]}


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (
            "",
            [
                f"JobSet {NAME} spec.replicatedJobs[0].template.spec.{IGNORED}",
                f"Job {NAME}-node-0 spec.{IGNORED}",
            ],
        ),
        (
            "sidecars,torchrun",
            [
                f"JobSet {NAME} spec.replicatedJobs[0].template.spec.{IGNORED}",
                f"Job {NAME}-node-0 spec.{IGNORED}",
            ],
        ),
        ("pod-failure-ignore", []),
        ("sidecars, pod-failure-ignore", []),
        (None, []),  # started before the record: every mechanism, as before
    ],
    ids=["none-allowed", "others-allowed", "allowed", "allowed-among-others", "no-record"],
)
def test_the_live_jobset_and_jobs_are_judged_by_the_opt_ins_start_recorded(
    record: str | None, expected: list[str]
) -> None:
    job = trainjob_dict(jobset_uid=UID)
    if record is not None:
        job["metadata"]["annotations"][RUNTIME_ALLOWS_ANNOTATION] = record
    findings, _ = decide_audit(job, ignoring_jobset(), pods=(), jobs=[ignoring_child_job()])
    assert reasons(findings) == expected
    assert {finding.kind for finding in findings} <= {FindingKind.JOBSET_SPEC}


@pytest.mark.parametrize("record", ["every", "pod-failure-ignore,restart", 5], ids=str)
def test_a_record_of_opt_ins_no_start_writes_is_a_finding_and_allows_none(record: Any) -> None:
    job = trainjob_dict(jobset_uid=UID)
    job["metadata"]["annotations"][RUNTIME_ALLOWS_ANNOTATION] = record
    findings, _ = decide_audit(job, ignoring_jobset(), pods=())
    assert kinds(findings) == [FindingKind.RUNTIME_CHANGED, FindingKind.JOBSET_SPEC]
    assert reasons(findings)[0].startswith(
        f"TrainJob {NAME} annotation {RUNTIME_ALLOWS_ANNOTATION} is {shown(record)}, not "
        "mechanisms from sidecars, container-restart, pod-failure-ignore, restart-job, torchrun"
    )
    assert reasons(findings)[1].endswith(IGNORED)


def test_a_runtime_changed_or_gone_since_start_is_a_finding() -> None:
    job = trainjob_dict(jobset_uid=UID)
    job["spec"]["runtimeRef"] = {"kind": "ClusterTrainingRuntime", "name": "torch"}
    same = {"metadata": {"uid": "rt-uid", "generation": 1}, "spec": RUNTIME_SPEC}
    job["metadata"]["annotations"]["dispatch.phpboyscout.uk/runtime"] = runtime_seen(same)
    edited = {"metadata": {"uid": "rt-uid", "generation": 2}, "spec": RUNTIME_SPEC}

    def found(runtime_now: dict[str, Any] | None) -> list[str]:
        findings, _ = decide_audit(job, jobset_dict(), pods=iter(()), runtime_now=runtime_now)
        return reasons(findings)

    assert found(same) == []
    [changed] = found(edited)
    assert changed.startswith(
        "ClusterTrainingRuntime torch changed since start checked it (UID, generation and spec "
        f"digest {runtime_seen(same)}, is now rt-uid 2 "
    )
    [gone] = found(None)
    assert f"{runtime_seen(same)}, is gone" in gone
    # Deleted, kept by Trainer v2.2.1's finalizer: the API server's raise of the generation when
    # the deletion began is no edit; an edit before or after it is.
    deleting = {"deletionTimestamp": "2026-12-07T07:00:00Z", "finalizers": ["in-use"]}
    being_deleted = {
        "metadata": {**same["metadata"], **deleting, "generation": 2},
        "spec": RUNTIME_SPEC,
    }
    assert found(being_deleted) == []
    edited_then_deleted = copy.deepcopy(being_deleted)
    edited_then_deleted["metadata"]["generation"] = 3
    [deleted_edit] = found(edited_then_deleted)
    assert "is now rt-uid 2 " in deleted_edit
    # A record made before the digest: the UID and generation alone are compared.
    job["metadata"]["annotations"]["dispatch.phpboyscout.uk/runtime"] = "rt-uid 1"
    assert (found(same), len(found(edited))) == ([], 1)


RUNTIME_SPEC: Final[dict[str, Any]] = {
    "template": {
        "spec": {
            "replicatedJobs": [
                {
                    "name": "node",
                    "template": {
                        "spec": {
                            "backoffLimit": 0,
                            "template": {"spec": {"restartPolicy": "Never", "containers": []}},
                        }
                    },
                }
            ]
        }
    }
}


def test_the_snapshot_a_job_is_built_from_is_judged_instead_of_the_runtime() -> None:
    job = trainjob_dict(jobset_uid=UID)
    job["metadata"]["uid"] = "tj-uid"
    job["spec"]["runtimeRef"] = {"kind": "ClusterTrainingRuntime", "name": "torch"}
    checked = {"metadata": {"uid": "rt-uid", "generation": 1}, "spec": RUNTIME_SPEC}
    job["metadata"]["annotations"]["dispatch.phpboyscout.uk/runtime"] = runtime_seen(checked)
    # Go's YAML of the same runtime: empty values spelled out, a quantity as text.
    as_go_writes = copy.deepcopy(checked)
    replicated = as_go_writes["spec"]["template"]["spec"]["replicatedJobs"][0]
    replicated["template"]["metadata"] = {"creationTimestamp": None}
    replicated["template"]["spec"]["template"]["spec"]["containers"] = []
    replicated["replicas"] = None
    edited = copy.deepcopy(checked)
    pod = edited["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    pod["podFailurePolicy"] = {"rules": [{"action": "Ignore", "onExitCodes": {"values": [42]}}]}

    def found(taken: Snapshot) -> list[str]:
        findings, _ = decide_audit(job, jobset_dict(), pods=iter(()), runtime_now=taken)
        return reasons(findings)

    name = f"{NAME}-runtime-snapshot"
    assert found(Snapshot(name=name, owner_uid="tj-uid", runtime=as_go_writes)) == []
    [changed] = found(Snapshot(name=name, owner_uid="tj-uid", runtime=edited))
    assert changed.startswith(
        f"runtime snapshot ConfigMap {name}, the copy of ClusterTrainingRuntime torch Trainer "
        "builds the job from, changed since start checked it"
    )
    [foreign] = found(Snapshot(name=name, owner_uid="other", runtime=checked))
    assert "is not controlled by the TrainJob (UID tj-uid, its controller's is other)" in foreign
    [empty] = found(Snapshot(name=name, owner_uid="tj-uid", runtime=None))
    assert empty.endswith("holds no runtime under key runtime")


def test_a_trainer_child_job_edited_by_hand_is_a_finding() -> None:
    def child(name: str, ancestor: str, backoff: int) -> dict[str, Any]:
        labels = {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}
        pod = {"restartPolicy": "Never", "containers": []}
        spec = {"backoffLimit": backoff, "template": {"spec": pod}}
        return {"metadata": {"name": name, "labels": labels}, "spec": spec}

    jobs = [child(f"{NAME}-node-0", "trainer", 3), child(f"{NAME}-init-0", "dataset", 6)]
    findings, _ = decide_audit(trainjob_dict(jobset_uid=UID), jobset_dict(), pods=(), jobs=jobs)
    assert reasons(findings) == [
        f"Job {NAME}-node-0 spec.backoffLimit: must be 0, not 3: the Job controller would "
        "replace a failed pod, moving neither A nor J"
    ]
