"""A work queue of keys, as client-go's: each key once, and by one worker at a time.

A key added while a worker holds it is handed out again once that worker is done, so the
last change is always looked at, but never by two workers at once (one reservation at a
time per Workload). A key whose pass failed (a conflict, an API server that could not
serve) comes back after its own backoff, doubled with each failure in a row, as client-go's
per-item exponential rate limiter: one failing key neither spins nor holds up the others.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Hashable
from enum import Enum
from typing import Final, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
FIRST_BACKOFF: Final = 0.005  # seconds: client-go's per-item default; a conflict is retried at once
MAX_BACKOFF: Final = 300.0


class Failed(Enum):
    """A pass that failed: its key comes back after the key's own backoff."""

    RETRY = "retry"


RETRY: Final = Failed.RETRY
Again = float | Failed | None  # seconds to wait out, a failure, or None: on the next change


class WorkQueue(Generic[K]):
    """Keys to look at, deduplicated; `add_after` a state to wait out, `retry` a failure."""

    def __init__(
        self, *, first_backoff: float = FIRST_BACKOFF, max_backoff: float = MAX_BACKOFF
    ) -> None:
        self._first_backoff = first_backoff
        self._max_backoff = max_backoff
        self._failures: dict[K, int] = {}
        self._ready: deque[K] = deque()
        self._queued: set[K] = set()
        self._held: set[K] = set()
        self._again: set[K] = set()  # added while held: handed out once done
        self._later: list[tuple[float, int, K]] = []
        self._count = 0
        self._changed = threading.Condition()
        self._closed = False

    def add(self, key: K) -> None:
        """Look at `key` (once, however often it is added before a worker takes it)."""
        with self._changed:
            self._enqueue(key)

    def _enqueue(self, key: K) -> None:
        """With the lock held: ready for a worker, or again once its worker is done."""
        if key in self._held:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._ready.append(key)
            self._changed.notify()

    def add_after(self, key: K, seconds: float) -> None:
        """Look at `key` again in `seconds`."""
        with self._changed:
            self._count += 1
            heapq.heappush(self._later, (time.monotonic() + seconds, self._count, key))
            self._changed.notify()

    def retry(self, key: K) -> float:
        """Look at `key` again after its backoff, one failure longer; the delay."""
        with self._changed:
            failures = self._failures[key] = self._failures.get(key, 0) + 1
        delay = float(min(self._max_backoff, self._first_backoff * 2 ** (failures - 1)))
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """`key`'s pass succeeded: its next failure starts again from the first backoff."""
        with self._changed:
            self._failures.pop(key, None)

    def settle(self, key: K, again: Again) -> None:
        """After a worker's pass over `key` (and `done`): when it comes back, if at all."""
        if again is RETRY:
            self.retry(key)
            return
        self.forget(key)
        if isinstance(again, float):
            self.add_after(key, again)

    def get(self) -> K | None:
        """The next key, held until `done`; None once the queue is closed."""
        with self._changed:
            while not self._closed:
                due = self._due_wait()
                if self._ready:
                    key = self._ready.popleft()
                    self._queued.discard(key)
                    self._held.add(key)
                    return key
                self._changed.wait(due)
            return None

    def _due_wait(self) -> float | None:
        """Move delayed keys that are due to ready; how long until the next one is due."""
        now = time.monotonic()
        while self._later and self._later[0][0] <= now:
            _, _, key = heapq.heappop(self._later)
            self._enqueue(key)
        return self._later[0][0] - now if self._later else None

    def done(self, key: K) -> None:
        """The worker is done with `key`; if it was added meanwhile, it is handed out again."""
        with self._changed:
            self._held.discard(key)
            if key in self._again:
                self._again.discard(key)
                self._enqueue(key)

    def __len__(self) -> int:
        with self._changed:
            return len(self._ready)

    def close(self) -> None:
        """Hand out no more keys: every `get` returns None."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
