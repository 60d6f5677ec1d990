"""List, then watch, then list again every resync: one collection as a stream of events.

Level-triggered, as client-go's informers: whatever a watch missed (it was cut, its window
expired: 410 Gone), the next list shows, and the consumer looks at everything again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, Final

from loguru import logger

from dispatch_k8s.core.rules.errors import DispatchError, Expired
from dispatch_k8s.core.shell.gateway import Gateway, Resource

RELIST_BACKOFF: Final = 2.0  # seconds after a failed list or watch
LISTING: Final = "LISTING"  # a list begins: the items after it are the whole collection
LISTED: Final = "LISTED"  # one item of the list
SYNCED: Final = "SYNCED"  # the list is complete; the watch's events follow
Event = tuple[str, dict[str, Any]]


def list_and_watch(
    gateway: Gateway,
    resource: Resource,
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
            yield LISTING, {}
            rest: dict[str, Any] = {}
            for item in gateway.list_items(
                resource, namespace, label_selector=label_selector, rest=rest
            ):
                yield LISTED, item
            yield SYNCED, {}
            version = rest["metadata"]["resourceVersion"]
            while not ended.is_set():
                for kind, obj in gateway.watch_all(
                    resource,
                    namespace,
                    version=version,
                    timeout=resync_seconds,
                    label_selector=label_selector,
                ):
                    if ended.is_set():
                        return
                    told = obj.get("metadata", {}).get("resourceVersion")
                    version = told if isinstance(told, str) and told else version
                    yield kind, obj
                if relist:
                    break  # the server ended the watch at the resync: list again
        except Expired:
            continue
        except DispatchError as e:
            logger.bind(resource=resource.plural, error=str(e)).warning("list/watch failed")
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
