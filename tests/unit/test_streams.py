"""controller/streams.py: a stream that keeps watching lists again only when it must."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from dispatch_k8s.controller import streams
from dispatch_k8s.core.rules.errors import Expired
from dispatch_k8s.core.shell.gateway import kinds
from dispatch_k8s.core.shell.gateway.kinds import Kind


class Gateway:
    """Lists one pod; each watch tells one event or, once, that its version is too old."""

    def __init__(self, watches: list[list[tuple[str, dict[str, Any]]] | None]) -> None:
        self.watches = watches
        self.lists = 0
        self.watched_from: list[str] = []

    def list_items(
        self,
        resource: Kind,
        namespace: str | None,
        *,
        label_selector: str,
        rest: dict[str, Any],
    ) -> Iterator[dict[str, Any]]:
        self.lists += 1
        rest["metadata"] = {"resourceVersion": f"list-{self.lists}"}
        yield {"metadata": {"name": "p", "resourceVersion": f"list-{self.lists}"}}

    def watch(
        self, resource: Kind, namespace: str | None, *, version: str, **_: Any
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        self.watched_from.append(version)
        events = self.watches.pop(0)
        if events is None:
            raise Expired("too old")
        yield from events


def event_types(gateway: Gateway, *, relist: bool, count: int) -> list[str]:
    ended = threading.Event()
    told = streams.list_and_watch(
        gateway,  # type: ignore[arg-type]
        kinds.POD,
        None,
        ended=ended,
        resync_seconds=60,
        relist=relist,
    )
    return [kind for kind, _ in (next(told) for _ in range(count))]


def modified(version: str) -> tuple[str, dict[str, Any]]:
    return "MODIFIED", {"metadata": {"name": "p", "resourceVersion": version}}


def test_without_relist_a_watch_the_server_ended_goes_on_from_the_last_version() -> None:
    bookmark = ("BOOKMARK", {"metadata": {"resourceVersion": "7"}})
    gateway = Gateway([[modified("5"), bookmark], [], [modified("9")], None, [modified("12")]])
    told = event_types(gateway, relist=False, count=10)
    assert told == [
        *(streams.LISTING, streams.LISTED, streams.SYNCED, "MODIFIED", "BOOKMARK"),
        "MODIFIED",
        *(streams.LISTING, streams.LISTED, streams.SYNCED, "MODIFIED"),
    ]
    assert gateway.watched_from == ["list-1", "7", "7", "9", "list-2"]
    assert gateway.lists == 2, "listed again only after 410 Gone"


def test_with_relist_every_watch_the_server_ended_is_followed_by_a_list() -> None:
    gateway = Gateway([[modified("5")], [modified("9")]])
    told = event_types(gateway, relist=True, count=8)
    assert told == [
        *(streams.LISTING, streams.LISTED, streams.SYNCED, "MODIFIED"),
        *(streams.LISTING, streams.LISTED, streams.SYNCED, "MODIFIED"),
    ]
    assert gateway.watched_from == ["list-1", "list-2"]
