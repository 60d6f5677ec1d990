"""The gate's caches: each object kept as its stream tells it, a list never held whole."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dispatch_k8s.controller import streams
from dispatch_k8s.controller.mirror import Mirror


def item(namespace: str, name: str, version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "resourceVersion": version,
            "managedFields": [{"manager": "kubectl"}],
        }
    }


def names(mirror: Mirror[dict[str, Any]]) -> list[str]:
    return sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in mirror.values())


def test_each_listed_object_is_kept_before_the_next_is_read() -> None:
    mirror: Mirror[dict[str, Any]] = Mirror(lambda obj: obj)
    seen_when_told: list[list[str]] = []

    def stream() -> Iterator[streams.Event]:
        yield streams.LISTING, {}
        yield streams.LISTED, item("team-a", "a")
        seen_when_told.append(names(mirror))
        yield streams.LISTED, item("team-a", "b")
        seen_when_told.append(names(mirror))
        yield streams.SYNCED, {}

    told = [o["metadata"]["name"] for o in mirror.follow(stream(), "team-a")]
    assert told == ["a", "b"]
    assert seen_when_told == [["team-a/a"], ["team-a/a", "team-a/b"]]


def test_what_a_completed_list_did_not_tell_is_dropped_in_its_namespace_only() -> None:
    mirror: Mirror[dict[str, Any]] = Mirror(lambda obj: obj)
    list(mirror.follow(iter([(streams.LISTED, item("team-b", "x"))]), "team-b"))
    first = [(streams.LISTING, {}), (streams.LISTED, item("team-a", "old")), (streams.SYNCED, {})]
    list(mirror.follow(iter(first), "team-a"))
    again = [
        (streams.LISTING, {}),
        (streams.LISTED, item("team-a", "old")),  # a list cut half-way: begun again
        (streams.LISTING, {}),
        (streams.LISTED, item("team-a", "new")),
        (streams.SYNCED, {}),
    ]
    list(mirror.follow(iter(again), "team-a"))
    assert names(mirror) == ["team-a/new", "team-b/x"]


def test_a_list_of_every_namespace_drops_what_it_did_not_tell_anywhere() -> None:
    mirror: Mirror[dict[str, Any]] = Mirror(lambda obj: obj)
    events = [
        (streams.LISTED, item("team-a", "a")),
        (streams.LISTED, item("team-b", "b")),
        (streams.LISTING, {}),
        (streams.LISTED, item("team-b", "b")),
        (streams.SYNCED, {}),
    ]
    list(mirror.follow(iter(events), None))
    assert names(mirror) == ["team-b/b"]


def test_watch_events_keep_the_latest_and_forget_the_deleted() -> None:
    mirror: Mirror[dict[str, Any]] = Mirror(lambda obj: obj)
    events = [
        (streams.LISTING, {}),
        (streams.LISTED, item("team-a", "a")),
        (streams.LISTED, item("team-a", "b")),
        (streams.SYNCED, {}),
        ("MODIFIED", item("team-a", "a", version="2")),
        ("ADDED", item("team-a", "c")),
        ("DELETED", item("team-a", "b")),
        ("BOOKMARK", item("team-a", "a", version="3")),
    ]
    told = list(mirror.follow(iter(events), "team-a"))
    assert [o["metadata"]["name"] for o in told] == ["a", "b", "a", "c"]
    assert all("managedFields" not in o["metadata"] for o in told)
    assert names(mirror) == ["team-a/a", "team-a/c"]
    kept = mirror.get(("team-a", "a"))
    assert kept is not None
    assert kept["metadata"]["resourceVersion"] == "2"
    assert mirror.get(("team-a", "b")) is None


def test_objects_are_kept_as_keep_makes_them() -> None:
    mirror: Mirror[str] = Mirror(lambda obj: obj["metadata"]["resourceVersion"])
    list(mirror.follow(iter([("ADDED", item("team-a", "a", version="7"))]), "team-a"))
    assert mirror.get(("team-a", "a")) == "7"
