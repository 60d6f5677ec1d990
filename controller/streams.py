"""List, then watch, then list again every resync: one collection as a stream of events.

Level-triggered, as client-go's informers: whatever a watch missed (it was cut, its window
expired: 410 Gone), the next list shows, and the consumer looks at everything again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, Final

from loguru import logger

from dispatch_k8s.core.rules.errors import DispatchError
from dispatch_k8s.core.shell.gateway import Gateway
from dispatch_k8s.core.shell.gateway.kinds import Kind
from dispatch_k8s.core.shell.gateway.watching import LISTED, LISTING, SYNCED, Event, list_then_watch

__all__ = ["LISTED", "LISTING", "SYNCED", "Event", "list_and_watch", "whole_lists"]
RELIST_BACKOFF: Final = 2.0  # seconds after a failed list or watch


def list_and_watch(
    gateway: Gateway,
    kind: Kind,
    namespace: str | None,
    *,
    ended: threading.Event,
    resync_seconds: float,
    label_selector: str = "",
    relist: bool = True,
) -> Iterator[Event]:
    """LISTING, a LISTED per item, SYNCED, then the watch's events, once per resync.

    With `relist` false the collection is listed once, and again only when the watch cannot
    go on from the last version it told (410 Gone, a failure): a watch the server ends at the
    resync is begun again from there, as client-go's reflector does, so a consumer that keeps
    what it was told (controller/store.py) reads no collection again while nothing is lost.
    A list that fails half-way is begun again (another LISTING); a failed list or watch is
    retried after RELIST_BACKOFF. The stream ends once `ended` is set.
    """
    while not ended.is_set():
        try:
            for event in list_then_watch(
                gateway,
                kind,
                namespace,
                watch_seconds=lambda: 0.0 if ended.is_set() else resync_seconds,
                label_selector=label_selector,
                relist=relist,
            ):
                if ended.is_set():
                    return
                yield event
        except DispatchError as e:
            logger.bind(resource=kind.plural, error=str(e)).warning("list/watch failed")
            ended.wait(RELIST_BACKOFF)


def whole_lists(events: Iterator[Event]) -> Iterator[Event]:
    """The same stream with each list told at once: ("LISTED", {"items": [...]})."""
    items: list[dict[str, Any]] = []
    for kind, obj in events:
        if kind == LISTING:
            items = []
        elif kind == LISTED:
            items.append(obj)
        elif kind == SYNCED:
            yield LISTED, {"items": items}
            items = []
        else:
            yield kind, obj
