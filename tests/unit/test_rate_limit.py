"""The controller's client-side rate limit: a burst at once, then so many a second."""

from __future__ import annotations

import pytest

from dispatch_k8s.core.shell.gateway.ratelimit import TokenBucket


class FakeTime:
    """A clock that moves only when a waiter sleeps."""

    def __init__(self) -> None:
        self.now = 100.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def bucket(qps: float, burst: int, time: FakeTime) -> TokenBucket:
    return TokenBucket(qps, burst, clock=time.clock, sleep=time.sleep)


def test_a_burst_goes_at_once_and_the_rest_at_the_rate() -> None:
    time = FakeTime()
    limit = bucket(10.0, 3, time)
    assert [limit.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [round(limit.take(), 6) for _ in range(3)] == [0.1, 0.1, 0.1]
    assert time.now == pytest.approx(100.3)


def test_a_quiet_spell_saves_up_tokens_to_the_burst_and_no_more() -> None:
    time = FakeTime()
    limit = bucket(10.0, 2, time)
    limit.take()
    limit.take()
    time.now += 60.0  # a minute quiet: 600 tokens' worth, but only 2 are kept
    assert [limit.take() for _ in range(2)] == [0.0, 0.0]
    assert limit.take() == pytest.approx(0.1)


def test_every_take_tells_its_wait() -> None:
    time = FakeTime()
    told: list[float] = []
    limit = TokenBucket(10.0, 1, clock=time.clock, sleep=time.sleep, waited=told.append)
    limit.take()
    limit.take()
    assert [round(wait, 6) for wait in told] == [0.0, 0.1]


def test_waiters_reserve_in_turn_each_a_rate_step_later() -> None:
    """Tokens are reserved before the wait: three takers at one instant wait 0.1, 0.2, 0.3."""
    time = FakeTime()
    limit = TokenBucket(10.0, 1, clock=time.clock, sleep=lambda _: None)
    assert limit.take() == 0.0
    assert [round(limit.take(), 6) for _ in range(3)] == [0.1, 0.2, 0.3]


@pytest.mark.parametrize(("qps", "burst"), [(0.0, 1), (-1.0, 5), (5.0, 0)])
def test_a_bucket_that_could_never_give_a_token_is_refused(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="qps > 0 and burst >= 1"):
        TokenBucket(qps, burst)
