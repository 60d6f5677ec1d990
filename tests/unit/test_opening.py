"""An opening that no raise covers, and records no raise wrote, from the TrainJob alone
(core/rules/opening.py)."""

from __future__ import annotations

import json
from typing import Any, Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch_k8s.core.rules.audit import FindingKind
from dispatch_k8s.core.rules.decisions import ResourceVersion
from dispatch_k8s.core.rules.opening import decide_unearned_records, decide_unraised_opening
from dispatch_k8s.core.rules.trainjob import Raise, with_admission
from dispatch_k8s.core.rules.wire import (
    ADMISSION_FLOOR_ANNOTATION,
    HIGHEST_RESTART_ANNOTATION,
    JOBSET_UID_ANNOTATION,
    LAST_EXECUTION_ANNOTATION,
    OPEN_UNTIL_GENERATION_ANNOTATION,
    RAISED_FOR_ANNOTATION,
)
from tests.unit.audit_factories import UID, trainjob_dict

UNTIL = OPEN_UNTIL_GENERATION_ANNOTATION


def trainjob(*, suspend: Any, generation: Any, open_until: Any = None) -> dict[str, Any]:
    annotations = {} if open_until is None else {UNTIL: open_until}
    spec = {} if suspend is None else {"suspend": suspend}
    return {
        "metadata": {"name": "train-1", "generation": generation, "annotations": annotations},
        "spec": spec,
    }


# (what happened, suspend, generation, open-until-generation, flagged)
STORIES = [
    ("created suspended, never opened", True, 1, None, False),
    ("opened by dispatch-unsuspend (raise and open in one update)", False, 2, "2", False),
    ("raised by the admission check, Kueue opens at once", False, 3, "3", False),
    ("raised by the admission check, Kueue patches its pod sets then opens", False, 4, "3", False),
    ("opened by the raise-on-open policy", False, 5, "5", False),
    ("held after the raise's opening", True, 3, "2", False),
    ("held, then released by hand", False, 4, "2", True),
    ("raised while suspended, evicted, opened again without a raise", False, 6, "3", True),
    ("opened by hand, never raised", False, 2, None, True),
    ("suspend unset (Trainer's default false) and never raised", None, 2, None, True),
    ("held and released by hand long after", False, 40, "2", True),
    ("Kueue opened on the raise, then activeDeadlineSeconds set", False, 5, "3", True),
    ("created with the record forged far ahead, opened by hand", False, 2, "999999", True),
    ("left suspended by the raise, its record one ahead, then opened", False, 4, "5", False),
]


@pytest.mark.parametrize(
    ("suspend", "generation", "open_until", "flagged"),
    [story[1:] for story in STORIES],
    ids=[story[0] for story in STORIES],
)
def test_an_open_job_is_covered_only_by_the_last_raise_s_record(
    suspend: Any, generation: int, open_until: str | None, flagged: bool
) -> None:
    finding = decide_unraised_opening(
        trainjob(suspend=suspend, generation=generation, open_until=open_until)
    )
    assert (finding is not None) is flagged
    if finding is not None:
        assert finding.kind is FindingKind.UNRAISED_OPENING
        assert str(finding.kind) == "unraised-opening"
        where = "TrainJob train-1 is open (spec.suspend is not true) at metadata.generation"
        assert f"{where} {generation}," in finding.reason
        assert "without a raise of A" in finding.reason


def test_a_record_ahead_of_any_raise_names_itself_written_by_hand() -> None:
    finding = decide_unraised_opening(trainjob(suspend=False, generation=2, open_until="999999"))
    assert finding is not None
    assert f"{UNTIL} 999999 is past any generation a raise of A records (at most 3" in (
        finding.reason
    )


def test_the_reason_names_the_record_and_what_it_covers() -> None:
    finding = decide_unraised_opening(trainjob(suspend=False, generation=4, open_until="2"))
    assert finding is not None
    assert f"past {UNTIL} 2" in finding.reason
    assert "from generation 2 at the latest, so up to 3" in finding.reason


@pytest.mark.parametrize(
    ("record", "told"),
    [
        (None, "is missing"),
        ("", "is '', not a generation"),
        ("-1", "is '-1', not a generation"),
        ("2.0", "is '2.0', not a generation"),
        ("1" * 19, f"is '{'1' * 19}', not a generation"),
        (2, "is 2, not a generation"),
    ],
    ids=["missing", "empty", "negative", "decimal point", "too long", "not a string"],
)
def test_a_record_that_cannot_be_read_covers_no_opening(record: Any, told: str) -> None:
    job = trainjob(suspend=False, generation=2)
    if record is not None:
        job["metadata"]["annotations"][UNTIL] = record
    finding = decide_unraised_opening(job)
    assert finding is not None
    assert f"{UNTIL} {told}" in finding.reason


@pytest.mark.parametrize(
    "generation", [None, "3", True, 3.0], ids=["missing", "string", "bool", "float"]
)
def test_no_generation_to_compare_is_no_finding(generation: Any) -> None:
    assert decide_unraised_opening(trainjob(suspend=False, generation=generation)) is None


@pytest.mark.parametrize("shape", [{}, {"metadata": None, "spec": None}, {"spec": []}])
def test_any_shape_is_read_without_an_error(shape: dict[str, Any]) -> None:
    assert decide_unraised_opening(shape) is None


@given(generation=st.integers(1, 10**12), until=st.integers(0, 10**12), suspend=st.booleans())
def test_flagged_exactly_when_open_past_the_record_plus_one(
    generation: int, until: int, suspend: bool
) -> None:
    job = trainjob(suspend=suspend, generation=generation, open_until=str(until))
    flagged = decide_unraised_opening(job) is not None
    # A raise never records more than one generation ahead: one further was written by hand.
    assert flagged == (not suspend and (generation > until + 1 or until > generation + 1))


def started(**annotations: Any) -> dict[str, Any]:
    """A suspended TrainJob as start makes it (A and its floor 0), with `annotations` over it."""
    job = trainjob_dict(admission="0", floor="0", generation=1, open_until=None)
    job["spec"]["suspend"] = True
    job["metadata"]["annotations"].update(annotations)
    return job


def raised(job: dict[str, Any], *, suspend: bool | None = None) -> dict[str, Any]:
    """`job` after a raise of A to 1, as dispatch-unsuspend (open) or Kueue's check writes it."""
    decision = Raise(
        admission=1,
        resource_version=ResourceVersion("1"),
        jobset_uid=None,
        restart=0,
        highest_restart=0,
        generation=2,
    )
    written = with_admission(job, decision, suspend=suspend)
    written["metadata"]["generation"] = 2  # the API server's, for the patch's change
    return written


def test_start_s_job_and_a_raised_job_hold_no_unearned_record() -> None:
    assert decide_unearned_records(started()) is None
    assert decide_unearned_records(raised(started())) is None, "raised, left suspended"
    held = raised(started(), suspend=False)
    held["spec"]["suspend"] = True
    held["metadata"]["generation"] = 3
    held["metadata"]["annotations"][LAST_EXECUTION_ANNOTATION] = RECORD
    assert decide_unearned_records(held) is None, "raised, ran, held"
    # What the audit writes at first sight, raised or not, is no finding.
    seen = started(**{HIGHEST_RESTART_ANNOTATION: "0", JOBSET_UID_ANNOTATION: UID})
    assert decide_unearned_records(seen) is None


RECORD: Final = json.dumps({"pod": "forged", "r": 1, "slot": "pinned/0/0"})


@pytest.mark.parametrize(
    ("forged", "told"),
    [
        ({ADMISSION_FLOOR_ANNOTATION: "1"}, f"holds {ADMISSION_FLOOR_ANNOTATION} 1,"),
        ({RAISED_FOR_ANNOTATION: "uid 2026-12-06T00:00:00Z"}, f"holds {RAISED_FOR_ANNOTATION},"),
        ({LAST_EXECUTION_ANNOTATION: RECORD}, f"holds {LAST_EXECUTION_ANNOTATION},"),
        ({UNTIL: "999999"}, f"{UNTIL} 999999 is past any generation a raise of A records"),
    ],
    ids=["floor", "raised-for", "last-execution", "open-until-generation"],
)
def test_a_record_forged_at_creation_is_unearned(forged: dict[str, str], told: str) -> None:
    finding = decide_unearned_records(started(**forged))
    assert finding is not None
    assert finding.kind is FindingKind.UNEARNED_RECORD
    assert told in finding.reason
    assert "TrainJob train-1 " in finding.reason


def test_an_a_forged_in_the_patch_at_creation_is_unearned() -> None:
    job = trainjob_dict(admission="1", floor="0", generation=1, open_until=None)
    job["spec"]["suspend"] = True
    finding = decide_unearned_records(job)
    assert finding is not None
    assert "holds A 1 in its runtime patch, but no " in finding.reason


def test_an_open_job_is_left_to_the_opening_s_rule() -> None:
    job = started(**{ADMISSION_FLOOR_ANNOTATION: "1"})
    job["spec"]["suspend"] = False
    assert decide_unearned_records(job) is None
    assert decide_unraised_opening(job) is not None


@given(generation=st.integers(1, 10**12), until=st.integers(0, 10**12))
def test_a_suspended_job_s_record_is_unearned_exactly_when_past_the_next_generation(
    generation: int, until: int
) -> None:
    job = started(**{UNTIL: str(until), ADMISSION_FLOOR_ANNOTATION: "3"})
    job["metadata"]["generation"] = generation
    assert (decide_unearned_records(job) is not None) == (until > generation + 1)
