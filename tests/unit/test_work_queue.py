"""The controller's work queue: each key once, one worker at a time, changes never lost."""

from __future__ import annotations

import threading

from dispatch_k8s.controller.queue import WorkQueue


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
