"""Waiting on the cluster: list, then watch from the list's resourceVersion; or poll a read.

Both watches use the list-then-watch: `dispatch-admit --wait` (until its deadline) and the
controller's streams (resynced, until its term ends, controller/streams.py). A state that
no watch tells (a JobSet's Jobs draining) is polled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

from dispatch_k8s.core.rules.errors import Expired, Transient
from dispatch_k8s.core.shell.gateway.client import Gateway
from dispatch_k8s.core.shell.gateway.kinds import Kind

LISTING: Final = "LISTING"  # a list begins: the items after it are the whole collection
LISTED: Final = "LISTED"  # one item of the list
SYNCED: Final = "SYNCED"  # the list is complete; the watch's events follow
POLL_INTERVAL: Final = 1.0  # seconds between reads while a step waits out a passing state
Event = tuple[str, dict[str, Any]]
T = TypeVar("T")


def list_then_watch(
    gateway: Gateway,
    kind: Kind,
    namespace: str | None,
    *,
    watch_seconds: Callable[[], float],
    label_selector: str = "",
    relist: bool = False,
) -> Iterator[Event]:
    """LISTING, a LISTED per item, SYNCED, then the watch's events as (type, object).

    Each watch lasts `watch_seconds()`; the stream ends once that is 0 or less. With
    `relist`, a watch the server ends is followed by a new list; without, the next watch
    goes on from the last version told, as client-go's reflector does, so nothing is read
    twice and nothing is lost. A version too old to watch from (410 Gone) is listed again;
    any other failure is raised.
    """
    while True:
        yield LISTING, {}
        rest: dict[str, Any] = {}
        for item in gateway.list_items(kind, namespace, label_selector=label_selector, rest=rest):
            yield LISTED, item
        yield SYNCED, {}
        version = rest["metadata"]["resourceVersion"]
        try:
            while (seconds := watch_seconds()) > 0:
                for event_type, obj in gateway.watch(
                    kind, namespace, version=version, timeout=seconds, label_selector=label_selector
                ):
                    told = obj.get("metadata", {}).get("resourceVersion")
                    version = told if isinstance(told, str) and told else version
                    yield event_type, obj
                if relist:
                    break
            else:
                return
        except Expired:
            continue


def objects(events: Iterator[Event]) -> Iterator[dict[str, Any]]:
    """Every version of the collection's objects, as listed, added and modified."""
    return (obj for kind, obj in events if kind in (LISTED, "ADDED", "MODIFIED"))


def poll(
    read: Callable[[], T],
    done: Callable[[T], bool],
    *,
    timeout: float,
    what: str,
    interval: float = POLL_INTERVAL,
) -> T:
    """Read until `done` holds, every `interval`; Transient once `timeout` has passed."""
    deadline = time.monotonic() + timeout
    while not done(value := read()):
        if time.monotonic() + interval > deadline:
            raise Transient(f"still waiting for {what} after {timeout:g}s")
        time.sleep(interval)
    return value
