"""The ledger decision of `start`: claim, create, record, and refuse a spent identity."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch_k8s.core.rules import ledger, wire
from dispatch_k8s.core.rules.decisions import Refusal
from tests.support.requests import trainjob_body

NAMESPACE = "team-a"
UID = "5f0c1a2e-0000-4000-8000-000000000001"
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def wanted(job_id: str = "train-42", **fields: Any) -> dict[str, Any]:
    return trainjob_body(
        job_id, runtime="dispatch-torch-distributed", namespace=NAMESPACE, **fields
    )


def as_read(body: Mapping[str, Any], uid: str = UID) -> dict[str, Any]:
    """An object as the API server answers it: with a UID and a resourceVersion."""
    read = copy.deepcopy(dict(body))
    read["metadata"].update(uid=uid, resourceVersion="4711")
    return read


def claim(of: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return as_read(ledger.build_claim(of or wanted()), uid="claim-uid")


def created(of: Mapping[str, Any] | None = None, uid: str = UID) -> dict[str, Any]:
    return as_read(ledger.build_created(of or wanted(), uid), uid="record-uid")


def trainjob(of: Mapping[str, Any] | None = None, uid: str = UID) -> dict[str, Any]:
    return as_read(of or wanted(), uid=uid)


def forged(record: dict[str, Any], **data: Any) -> dict[str, Any]:
    record["data"] = {**record["data"], **data}
    return record


def decide(
    claim: Mapping[str, Any] | None = None,
    created: Mapping[str, Any] | None = None,
    trainjob: Mapping[str, Any] | None = None,
) -> ledger.CreateRecord | ledger.CreateTrainJob | ledger.Done | Refusal:
    return ledger.decide_start(wanted(), claim=claim, created=created, trainjob=trainjob)


# --- what to do next ----------------------------------------------------------------------

NEXT = [
    pytest.param({}, ledger.build_claim(wanted()), id="nothing-yet:claim-first"),
    pytest.param({"claim": claim()}, ledger.CreateTrainJob(), id="claimed:create-the-trainjob"),
    pytest.param(
        {"claim": claim(), "trainjob": trainjob()},
        ledger.build_created(wanted(), UID),
        id="trainjob-made:record-it",
    ),
    pytest.param(
        {"trainjob": trainjob()},
        ledger.build_created(wanted(), UID),
        id="trainjob-of-a-start-before-the-ledger:record-it",
    ),
    pytest.param(
        {"claim": claim(), "created": created(), "trainjob": trainjob()},
        ledger.Done(trainjob()),
        id="recorded-and-there:done",
    ),
    pytest.param(
        {"created": created(), "trainjob": trainjob()},
        ledger.Done(trainjob()),
        id="recorded-without-a-claim-and-there:done",
    ),
]


@pytest.mark.parametrize(("read", "expected"), NEXT)
def test_the_next_create(read: dict[str, Any], expected: object) -> None:
    decision = decide(**read)
    if isinstance(expected, dict):
        assert decision == ledger.CreateRecord(expected)
    else:
        assert decision == expected


# --- refusals -----------------------------------------------------------------------------

REFUSED = [
    pytest.param(
        {"claim": claim(), "created": created()},
        ["was started before", UID, ledger.created_name(wanted()), "new submission number N"],
        id="recorded-trainjob-gone",
    ),
    pytest.param(
        {"created": created()},
        ["was started before", "is gone"],
        id="recorded-trainjob-and-claim-gone",
    ),
    pytest.param(
        {"claim": claim(), "created": created(uid="other-uid"), "trainjob": trainjob()},
        ["made again outside start", "other-uid", UID],
        id="trainjob-of-another-uid",
    ),
    pytest.param(
        {"claim": claim(), "trainjob": trainjob(wanted("someone-else", name="train-42-x"))},
        ["exists with another identity or request"],
        id="another-identity-on-the-name",
    ),
    pytest.param(
        {"claim": claim(wanted(attempt=2))},
        ["for another request", ledger.claim_name(wanted()), "attempt 2", "new submission"],
        id="claimed-by-another-attempt",
    ),
    pytest.param(
        {"claim": claim(wanted(name="another-name"))},
        ["for another request", "TrainJob another-name"],
        id="claimed-for-another-name",
    ),
    pytest.param(
        {"claim": claim(), "created": created(wanted(image="registry.example/other:2"))},
        ["for another request", ledger.created_name(wanted())],
        id="recorded-for-another-request",
    ),
    pytest.param(
        {"claim": forged(claim(), **{"job-id": "forged"})},
        ["for another request"],
        id="claim-of-another-identity",
    ),
    pytest.param(
        {"claim": {**claim(), "data": "not a mapping"}},
        ["for another request", "TrainJob None"],
        id="claim-malformed",
    ),
    pytest.param(
        {"claim": claim(wanted(attempt=2)), "trainjob": trainjob()},
        ["for another request"],
        id="trainjob-there-but-identity-claimed-by-another-request",
    ),
]


@pytest.mark.parametrize(("read", "said"), REFUSED)
def test_refused(read: dict[str, Any], said: list[str]) -> None:
    decision = decide(**read)
    assert isinstance(decision, Refusal), decision
    for words in said:
        assert words in decision.reason
    assert "\n" not in decision.reason


# --- the records --------------------------------------------------------------------------


def test_records_are_immutable_labelled_unowned_and_name_what_they_keep() -> None:
    job = wanted()
    for record, kind in ((claim(job), wire.LEDGER_CLAIM), (created(job), wire.LEDGER_CREATED)):
        assert record["immutable"] is True
        assert record["metadata"]["labels"] == {
            wire.MANAGED_BY_LABEL: wire.MANAGED_BY,
            wire.LEDGER_LABEL: kind,
        }
        assert "ownerReferences" not in record["metadata"]
        assert record["metadata"]["namespace"] == NAMESPACE
        data = record["data"]
        annotations = job["metadata"]["annotations"]
        assert (data["job-id"], data["generation"], data["submission"]) == ("train-42", "1", "1")
        assert data["request-digest"] == annotations[wire.REQUEST_DIGEST_ANNOTATION]
        assert data["trainjob"] == job["metadata"]["name"]
    assert created(job)["data"][ledger.TRAINJOB_UID_KEY] == UID
    assert ledger.TRAINJOB_UID_KEY not in claim(job)["data"]


@given(
    job_id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", fullmatch=True),
    generation=st.integers(1, 9_000),
    submission=st.integers(1, 999_999),
    attempt=st.integers(0, 10**9),
)
def test_one_name_per_identity_dns_safe_whatever_the_attempt_or_trainjob_name(
    job_id: str, generation: int, submission: int, attempt: int
) -> None:
    job = wanted(job_id, generation=generation, submission=submission, attempt=attempt)
    name = ledger.claim_name(job)
    assert DNS1123_LABEL.fullmatch(name)
    assert len(name) <= 63
    assert DNS1123_LABEL.fullmatch(ledger.created_name(job))
    assert len(ledger.created_name(job)) <= 63
    again = wanted(
        job_id, generation=generation, submission=submission, attempt=attempt + 1, name="other"
    )
    assert ledger.claim_name(again) == name
    next_n = wanted(job_id, generation=generation, submission=submission - 1, attempt=attempt)
    assert ledger.claim_name(next_n) != name


# --- whole starts, from every state another start can leave --------------------------------


def run_start(state: dict[str, dict[str, Any] | None]) -> tuple[list[str], object]:
    """Decide and create until done or refused, as `dispatch-start` does; what it created."""
    made: list[str] = []
    for _ in range(4):
        decision = ledger.decide_start(wanted(), **state)
        if isinstance(decision, ledger.CreateTrainJob):
            state["trainjob"] = trainjob()
            made.append("trainjob")
        elif isinstance(decision, ledger.CreateRecord):
            kind = decision.body["metadata"]["labels"][wire.LEDGER_LABEL]
            key = "claim" if kind == wire.LEDGER_CLAIM else "created"
            state[key] = as_read(decision.body)
            made.append(key)
        else:
            return made, decision
    raise AssertionError("more than three creates")


PREFIXES = [
    pytest.param([], ["claim", "trainjob", "created"], id="fresh"),
    pytest.param(["claim"], ["trainjob", "created"], id="cut-off-after-the-claim"),
    pytest.param(["claim", "trainjob"], ["created"], id="cut-off-after-the-trainjob"),
    pytest.param(["claim", "trainjob", "created"], [], id="all-done"),
]


@pytest.mark.parametrize(("done", "left"), PREFIXES)
def test_a_start_run_again_after_any_prefix_of_creates_finishes_it(
    done: list[str], left: list[str]
) -> None:
    everything = {"claim": claim(), "trainjob": trainjob(), "created": created()}
    state: dict[str, dict[str, Any] | None] = {
        key: everything[key] if key in done else None for key in everything
    }
    made, decision = run_start(state)
    assert made == left
    assert isinstance(decision, ledger.Done)


def test_once_recorded_a_deleted_trainjob_is_refused_for_good() -> None:
    state: dict[str, dict[str, Any] | None] = {"claim": None, "trainjob": None, "created": None}
    assert run_start(state)[0] == ["claim", "trainjob", "created"]
    state["trainjob"] = None  # deleted
    made, decision = run_start(state)
    assert made == []
    assert isinstance(decision, Refusal)


# --- the audit: a TrainJob that is not the one start recorded for its identity ------------


def test_the_audit_finds_a_trainjob_made_again_under_another_uid() -> None:
    again = trainjob(uid="5f0c1a2e-0000-4000-8000-000000000002")
    assert ledger.recorded_name(again) == ledger.created_name(wanted())
    finding = ledger.decide_remade(again, created())
    assert finding is not None
    assert finding.kind == "remade"
    assert "5f0c1a2e-0000-4000-8000-000000000002" in finding.reason
    assert UID in finding.reason
    assert ledger.decide_remade(trainjob(), created()) is None, "start's own TrainJob"
    assert ledger.decide_remade(again, None) is None, "no record: nothing to compare"


@pytest.mark.parametrize(
    "annotation",
    [wire.JOB_ID_ANNOTATION, wire.GENERATION_ANNOTATION, wire.SUBMISSION_ANNOTATION],
)
def test_a_trainjob_without_an_identity_has_no_record_to_look_for(annotation: str) -> None:
    body = wanted()
    del body["metadata"]["annotations"][annotation]
    assert ledger.recorded_name(body) is None
