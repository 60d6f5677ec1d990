"""The controller's work queue: each key once, one worker at a time, changes never lost."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from dispatch_k8s.controller.queue import RETRY, WorkQueue


def test_a_key_added_twice_is_handed_out_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert [queue.get(), queue.get()] == ["a", "b"]
    assert len(queue) == 0


def test_a_key_added_while_held_is_handed_out_again_only_once_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get() == "a"
    queue.add("a")  # a change while a worker gates it
    assert len(queue) == 0, "not to a second worker at the same time"
    queue.done("a")
    assert queue.get() == "a"


def test_a_delayed_key_comes_when_due_and_close_ends_every_wait() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("later", 0.05)
    assert queue.get() == "later"
    got: list[str | None] = []
    waiter = threading.Thread(target=lambda: got.append(queue.get()))
    waiter.start()
    queue.close()
    waiter.join(timeout=5)
    assert got == [None]


def test_a_failing_key_backs_off_doubling_from_the_first_up_to_the_cap() -> None:
    queue: WorkQueue[str] = WorkQueue(first_backoff=0.5, max_backoff=30.0)
    delays = [queue.retry("a") for _ in range(9)]
    assert delays[0] == 0.5
    assert all(b == min(30.0, 2 * a) for a, b in itertools.pairwise(delays))
    assert delays[-1] == 30.0
    assert queue.retry("b") == 0.5, "each key has its own backoff"
    queue.forget("a")
    assert queue.retry("a") == 0.5, "a success starts it again from the first"


@pytest.mark.parametrize("again", [None, 0.0, 2.0])
def test_a_pass_that_did_not_fail_forgets_its_failures(again: float | None) -> None:
    queue: WorkQueue[str] = WorkQueue(first_backoff=0.5)
    queue.retry("a")
    queue.retry("a")
    queue.settle("a", again)
    assert queue.retry("a") == 0.5


def test_a_failure_comes_back_after_its_backoff_and_a_wait_after_its_seconds() -> None:
    queue: WorkQueue[str] = WorkQueue(first_backoff=0.05)
    began = time.monotonic()
    queue.settle("failed", RETRY)
    queue.settle("waits", 0.15)
    queue.settle("told", None)
    assert queue.get() == "failed"
    assert queue.get() == "waits"
    assert time.monotonic() - began >= 0.15
    assert len(queue) == 0, "None: back only on its next change"
