"""Events as objects: a raise's Event has one name per reservation, a valid Event name."""

from __future__ import annotations

import re
from typing import Final

from hypothesis import given
from hypothesis import strategies as st

from dispatch_k8s.core.rules import events

NOW: Final = "2026-12-03T10:00:00Z"
# Kubernetes' DNS-1123 subdomain, which every Event name must be.
SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# TrainJob names are DNS-1035 labels.
LABELS: Final = st.from_regex(r"\A[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")
RECORDS: Final = st.text(min_size=1, max_size=120)
JOB: Final = {"metadata": {"name": "train-1", "namespace": "team-a", "uid": "u-1"}}


def _event(name: str | None) -> dict[str, object]:
    return events.build_event(
        JOB, event_type="Normal", reason=events.RAISED, message="m", step="s", now=NOW, name=name
    )


def test_an_unnamed_event_is_named_by_the_api_server() -> None:
    assert _event(None)["metadata"] == {"generateName": "train-1.", "namespace": "team-a"}


def test_a_named_event_carries_its_name_and_no_generated_one() -> None:
    assert _event("train-1.abc")["metadata"] == {"name": "train-1.abc", "namespace": "team-a"}


@given(LABELS, RECORDS)
def test_a_raise_event_name_is_a_valid_event_name_of_its_trainjob(job: str, record: str) -> None:
    name = events.raise_event_name(job, record)
    assert SUBDOMAIN.fullmatch(name), name
    assert len(name) <= 253
    assert name.startswith(f"{job}.")


@given(LABELS, RECORDS, RECORDS)
def test_each_reservation_has_its_own_raise_event_name_and_always_the_same(
    job: str, record: str, other: str
) -> None:
    assert events.raise_event_name(job, record) == events.raise_event_name(job, record)
    if other != record:
        assert events.raise_event_name(job, other) != events.raise_event_name(job, record)
