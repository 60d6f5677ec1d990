"""Whether Trainer carried an opening or a hold into the JobSet (core/rules/carried.py), on
plain dicts shaped as Trainer v2.3.0 leaves them."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch_k8s.core.rules import events
from dispatch_k8s.core.rules.carried import NO_REASON, WAITING, Uncarried, decide_carried
from dispatch_k8s.core.rules.wire import TRAINER_FAILED_REASON

UID = "7d0c3c1e-0000-4000-8000-000000000001"
REFUSED = (
    'TrainJob resources reconciliation failed: JobSet.jobset.x-k8s.io "j" is invalid: '
    "spec.replicatedJobs: Invalid value: ...: field is immutable"
)


def job(*, suspend: bool, condition: str | None, finished: bool = False) -> dict[str, Any]:
    conditions = []
    if condition is not None:
        conditions.append({"type": "Suspended", "status": condition})
    if finished:
        conditions.append({"type": "Complete", "status": "True"})
    return {
        "metadata": {"name": "j", "namespace": "team", "uid": UID, "generation": 3},
        "spec": {"suspend": suspend},
        "status": {"conditions": conditions},
    }


def jobset(*, suspend: bool) -> dict[str, Any]:
    return {"metadata": {"name": "j"}, "spec": {"suspend": suspend}}


def failure(message: str, at: str, *, uid: str = UID) -> dict[str, Any]:
    return {
        "reason": TRAINER_FAILED_REASON,
        "message": message,
        "involvedObject": {"kind": "TrainJob", "name": "j", "uid": uid},
        "eventTime": at,
    }


@pytest.mark.parametrize(
    ("story", "trainjob", "found", "expected"),
    [
        ("suspended", job(suspend=True, condition="True"), jobset(suspend=True), None),
        ("opened", job(suspend=False, condition="False"), jobset(suspend=False), None),
        # Trainer opened the JobSet before it wrote the condition: read after, it is open.
        ("JobSet first", job(suspend=False, condition="True"), jobset(suspend=False), None),
        ("not reconciled", job(suspend=False, condition="True"), jobset(suspend=True), WAITING),
        ("never reconciled", job(suspend=False, condition=None), jobset(suspend=True), WAITING),
        ("no JobSet yet", job(suspend=False, condition="True"), None, WAITING),
        ("held, no JobSet", job(suspend=True, condition="True"), None, None),
        ("never opened", job(suspend=True, condition=None), None, None),
        (
            "hold not reconciled",
            job(suspend=True, condition="False"),
            jobset(suspend=False),
            WAITING,
        ),
        (
            "finished",
            job(suspend=False, condition="False", finished=True),
            jobset(suspend=True),
            None,
        ),
    ],
)
def test_what_is_not_a_refusal(
    story: str, trainjob: dict[str, Any], found: dict[str, Any] | None, expected: object
) -> None:
    assert decide_carried(trainjob, found) == expected, story


def test_reconciled_open_with_the_jobset_suspended_is_not_opened_with_trainers_newest_reason() -> (
    None
):
    told = [
        failure("an older refusal", "2026-12-07T01:00:00.000001Z"),
        failure(REFUSED, "2026-12-07T01:00:05.000001Z"),
        failure("another TrainJob's, of the same name", "2026-12-07T01:00:09Z", uid="other"),
    ]
    decided = decide_carried(job(suspend=False, condition="False"), jobset(suspend=True), told)
    assert isinstance(decided, Uncarried)
    assert decided.told
    assert decided.reason == (
        "TrainJob j is not opened: Trainer reconciled it open but its JobSet j is still "
        f"suspended, so nothing runs: {REFUSED}"
    )


def test_without_trainers_event_it_is_not_opened_all_the_same() -> None:
    decided = decide_carried(job(suspend=False, condition="False"), None)
    assert isinstance(decided, Uncarried)
    assert not decided.told
    assert "its JobSet j is missing" in decided.reason
    assert decided.reason.endswith(NO_REASON)


def test_reconciled_hold_with_the_jobset_running_is_not_held_with_trainers_reason() -> None:
    told = [failure(REFUSED, "2026-12-07T01:00:05.000001Z")]
    decided = decide_carried(job(suspend=True, condition="True"), jobset(suspend=False), told)
    assert isinstance(decided, Uncarried)
    assert decided.held
    assert decided.told
    assert decided.reason == (
        "TrainJob j is not held: Trainer reconciled the hold but its JobSet j is not "
        f"suspended, so what it runs goes on: {REFUSED}"
    )


def test_an_opening_not_carried_is_not_taken_for_a_hold() -> None:
    decided = decide_carried(job(suspend=False, condition="False"), jobset(suspend=True))
    assert isinstance(decided, Uncarried)
    assert not decided.held


def test_the_uncarried_event_is_named_once_per_opening_or_hold() -> None:
    first = job(suspend=False, condition="False")
    again = {**first, "metadata": {**first["metadata"], "resourceVersion": "9"}}
    later = {**first, "metadata": {**first["metadata"], "generation": 5}}
    assert events.uncarried_event_name(first) == events.uncarried_event_name(again)
    assert events.uncarried_event_name(first) != events.uncarried_event_name(later)
    assert events.uncarried_event_name(first).startswith("j.")
