"""One watched collection kept in memory, item by item, as its stream tells it.

Each object is kept as soon as it is told, listed or watched, so a list of a thousand
objects never stands in memory at once: the objects a list did not tell are dropped when it
completes (SYNCED). The gate's Workloads and managed TrainJobs are kept here
(controller/main.py); the auditor keeps its own kinds in controller/store.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from dispatch_k8s.controller.streams import LISTED, LISTING, SYNCED, Event
from dispatch_k8s.core.rules import shapes

Key = tuple[str, str]  # (namespace, name)
Kept = TypeVar("Kept")  # how an object is kept: as told, or packed (controller/packing.py)


def key_of(obj: dict[str, Any]) -> Key:
    """Where `obj` is kept."""
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


class Mirror(Generic[Kept]):
    """A collection over one or more namespaces' streams, each object as `keep` makes it."""

    def __init__(self, keep: Callable[[dict[str, Any]], Kept]) -> None:
        self._keep = keep
        self._kept: dict[Key, Kept] = {}
        self._lock = threading.Lock()

    def follow(self, events: Iterator[Event], namespace: str | None) -> Iterator[dict[str, Any]]:
        """Keep what `namespace`'s stream (None: every namespace) tells; yield each object told.

        Every object listed, added or modified is yielded as kept, without managedFields.
        """
        listed: set[Key] = set()
        for kind, obj in events:
            if kind == LISTING:  # a list begins again, perhaps after one that failed half-way
                listed = set()
            elif kind == SYNCED:
                with self._lock:
                    gone = [k for k in self._kept if namespace in (None, k[0]) and k not in listed]
                    for key in gone:
                        del self._kept[key]
                listed = set()
            elif kind in (LISTED, "ADDED", "MODIFIED"):
                told = shapes.without_managed_fields(obj)
                key = key_of(told)
                kept = self._keep(told)
                with self._lock:
                    self._kept[key] = kept
                if kind == LISTED:
                    listed.add(key)
                yield told
            elif kind == "DELETED":
                with self._lock:
                    self._kept.pop(key_of(obj), None)

    def get(self, key: Key) -> Kept | None:
        """The object kept at `key`, if any."""
        with self._lock:
            return self._kept.get(key)

    def values(self) -> list[Kept]:
        """Every object kept, at this moment."""
        with self._lock:
            return list(self._kept.values())
