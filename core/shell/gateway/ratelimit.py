"""A client-side rate limit, as client-go's token bucket: so many requests a second, with bursts.

The controller's threads share one bucket, so however many Workloads and TrainJobs fail and
retry at once, the API server sees at most the configured rate from this process; API
Priority and Fairness still has the last word on the server's side.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """`qps` tokens a second, at most `burst` saved up; each request takes one, or waits."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        waited: Callable[[float], None] = lambda _: None,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs qps > 0 and burst >= 1, not {qps}, {burst}")
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._waited = waited  # told every take's wait, 0 included: a metric's observation
        self._lock = threading.Lock()
        self._tokens = self._burst
        self._last = clock()

    def take(self) -> float:
        """Take a token, waiting for it if none is saved up; the seconds waited.

        A token is reserved before the wait (the count may go below zero), as
        golang.org/x/time/rate's Reserve does: waiters are served in turn, none starves.
        """
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            self._tokens -= 1
            wait = -self._tokens / self._qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        self._waited(wait)
        return wait
