"""The term's supervised threads (controller/threads.py): a thread that dies, or ends before
its term does, sets `died`; one that ends with its term does not."""

from __future__ import annotations

import threading

from dispatch_k8s.controller.threads import Supervisor


def crashes() -> None:
    raise KeyError("metadata")  # an event of a shape no one expected


def test_a_thread_that_dies_of_an_exception_sets_died() -> None:
    supervisor = Supervisor(threading.Event())
    supervisor.spawn("watch", crashes).join(timeout=5)
    assert supervisor.died.is_set()


def test_a_thread_that_returns_while_its_term_runs_sets_died() -> None:
    supervisor = Supervisor(threading.Event())
    supervisor.spawn("watch", lambda: None).join(timeout=5)
    assert supervisor.died.is_set()


def test_a_thread_that_ends_with_its_term_does_not() -> None:
    ended = threading.Event()

    def until_ended() -> None:
        ended.wait()

    supervisor = Supervisor(ended)
    thread = supervisor.spawn("watch", until_ended)
    ended.set()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert not supervisor.died.is_set()
