from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch_k8s.core.rules.identity import (
    INT64_MAX,
    Counts,
    Identity,
    IdentityError,
    attempt_token,
    epoch,
    largest_epoch,
    next_admission,
    parse_counter,
)

MAX_G = 9_223_371  # the largest G for which every N (up to 999,999) still fits int64


def identity(**overrides: object) -> Identity:
    fields: dict[str, object] = {"job_id": "job", "generation": 3, "submission": 7, "attempt": 2}
    fields.update(overrides)
    return Identity(**fields)  # type: ignore[arg-type]


def test_first_execution_epoch_and_attempt() -> None:
    counts = Counts(admission=1, restart=0)
    assert counts.r == 1
    assert epoch(identity(), counts) == 3_000_007_000_001
    assert attempt_token(identity(), counts) == "job.7.2.1.0"


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("7", 7), ("999999", 999_999)],
    ids=["zero", "small", "largest"],
)
def test_parse_counter_accepts_canonical_decimals(text: str, value: int) -> None:
    assert parse_counter(text, name="A") == value


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "01",
        "00",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1\n",
        "0x1",
        "1e3",
        "1.0",
        "1000000",
        "\u0661",
        "\uff11",
        "1_0",
    ],
    ids=[
        "unset",
        "empty",
        "leading-zero",
        "double-zero",
        "negative",
        "plus",
        "space-before",
        "space-after",
        "newline",
        "hex",
        "exponent",
        "fraction",
        "seven-digits",
        "arabic-indic-digit",
        "fullwidth-digit",
        "underscore",
    ],
)
def test_parse_counter_refuses_everything_else(text: str | None) -> None:
    with pytest.raises(IdentityError, match=r"^A "):
        parse_counter(text, name="A")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"submission": 1_000_000}, "below 10\\^6"),
        ({"generation": 0, "submission": 0}, "at least 1"),
        ({"generation": MAX_G + 1, "submission": 999_999}, "signed 64-bit"),
        ({"job_id": ""}, "job ID"),
        ({"job_id": "a b"}, "job ID"),
        ({"job_id": ".hidden"}, "job ID"),
        ({"attempt": -1}, "negative"),
    ],
    ids=[
        "n-too-large",
        "prefix-zero",
        "epoch-overflows",
        "empty-job-id",
        "space-in-job-id",
        "job-id-leading-dot",
        "negative-attempt",
    ],
)
def test_identity_bounds_are_checked_up_front(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(IdentityError, match=message):
        identity(**overrides)


def test_int64_bound_is_exact() -> None:
    # 9223372 x 10^12 + 36853 x 10^6 + 999999 = 9223372036853999999 <= 2^63-1; one more N overflows.
    assert largest_epoch(identity(generation=MAX_G, submission=999_999)) <= INT64_MAX
    assert largest_epoch(identity(generation=MAX_G + 1, submission=36_853)) <= INT64_MAX
    with pytest.raises(IdentityError, match="signed 64-bit"):
        identity(generation=MAX_G + 1, submission=36_854)


def test_r_at_the_bound_is_refused() -> None:
    with pytest.raises(IdentityError, match="below 10\\^6"):
        epoch(identity(), Counts(admission=999_999, restart=1))


def test_raise_rule_takes_the_larger_of_patch_and_floor() -> None:
    assert next_admission(in_patch=2, floor=5, highest_restart=0, restart=0) == 6
    assert next_admission(in_patch=5, floor=2, highest_restart=3, restart=3) == 6
    with pytest.raises(IdentityError, match="bound"):
        next_admission(in_patch=999_999, floor=0, highest_restart=0, restart=0)


def test_raise_after_a_reset_of_j_makes_up_for_the_lost_restarts() -> None:
    # Issue 14's job: A=2, J=3 (R=5); the JobSet is replaced, J=0: the next R must exceed 5.
    admission = next_admission(in_patch=2, floor=2, highest_restart=3, restart=0)
    assert admission + 0 == 6


@given(a=st.integers(0, 999_998), floor=st.integers(0, 999_998))
def test_raise_always_passes_both(a: int, floor: int) -> None:
    assert next_admission(in_patch=a, floor=floor, highest_restart=0, restart=0) > max(a, floor)


@dataclass
class Lifecycle:
    """A job's counters as the cluster holds them, and every execution it has had."""

    admission: int = 0  # A in the patch (= the floor: only raises write A)
    restart: int = 0  # J of the current JobSet
    jobset: int = 0  # which JobSet: a reset replaces it
    highest: int = 0  # the highest J recorded on the TrainJob
    running: bool = False
    executions: list[tuple[int, int, int]] = field(default_factory=list)  # (R, J, JobSet)

    def begin(self) -> None:
        self.executions.append((self.admission + self.restart, self.restart, self.jobset))


@given(st.lists(st.sampled_from(["raise", "restart", "reset", "audit"]), max_size=40))
def test_each_raise_gives_an_r_above_every_r_recorded_before(events: list[str]) -> None:
    job = Lifecycle()
    for event in ["raise", *events]:
        if event == "raise":  # a hold and a release, or a Kueue re-admission
            before = list(job.executions)
            recorded = job.highest
            job.admission = next_admission(
                in_patch=job.admission,
                floor=job.admission,
                highest_restart=job.highest,
                restart=job.restart,
            )
            job.highest = max(job.highest, job.restart)
            job.running = True
            job.begin()
            r = job.admission + job.restart
            for earlier, j, jobset in before:
                if jobset == job.jobset or j <= recorded:
                    assert earlier < r, f"R={r} after {events}: not above R={earlier}"
        elif event == "restart" and job.running:  # JobSet restarts: J + 1, same A
            job.restart += 1
            job.begin()
        elif event == "reset":  # the JobSet is replaced: J starts again at 0 (flagged)
            job.jobset, job.restart = job.jobset + 1, 0
            if job.running:
                job.begin()
        elif event == "audit":
            job.highest = max(job.highest, job.restart)


@given(
    g=st.integers(0, MAX_G),
    n=st.integers(0, 999_999),
    r1=st.integers(1, 999_998),
    step=st.integers(1, 1000),
)
def test_epoch_is_ordered_by_r_and_decimal_shaped(g: int, n: int, r1: int, step: int) -> None:
    if g == 0 and n == 0:
        n = 1
    ident = identity(generation=g, submission=n)
    r2 = min(r1 + step, 999_999)
    first, later = (
        epoch(ident, Counts(admission=r1, restart=0)),
        epoch(ident, Counts(admission=0, restart=r2)),
    )
    assert later > first
    assert str(first) == f"{g * 10**6 + n}{r1:06d}"
    assert first <= INT64_MAX


@given(
    a1=st.integers(0, 999), j1=st.integers(0, 999), a2=st.integers(0, 999), j2=st.integers(0, 999)
)
def test_attempt_tokens_differ_when_counts_differ(a1: int, j1: int, a2: int, j2: int) -> None:
    ident = identity()
    same = (a1, j1) == (a2, j2)
    tokens_equal = attempt_token(ident, Counts(admission=a1, restart=j1)) == attempt_token(
        ident, Counts(admission=a2, restart=j2)
    )
    assert tokens_equal == same
