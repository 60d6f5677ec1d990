"""How the auditor maps what it watches to the TrainJob to audit, and how it backs off."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch_k8s.controller import streams
from dispatch_k8s.controller.auditor import (
    STREAMS,
    jobset_key,
    snapshot_key,
)
from dispatch_k8s.controller.store import own_key
from dispatch_k8s.core.rules.wire import JOBSET_NAME_KEY


def obj(**metadata: Any) -> dict[str, Any]:
    return {"metadata": metadata}


def test_a_trainjob_and_its_jobset_share_the_key() -> None:
    assert own_key(obj(namespace="team-a", name="train-1")) == ("team-a", "train-1")


def test_a_job_or_pod_maps_to_its_jobset_s_trainjob_by_label() -> None:
    pod = obj(
        namespace="team-a", name="train-1-node-0-0-x7k2p", labels={JOBSET_NAME_KEY: "train-1"}
    )
    assert jobset_key(pod) == ("team-a", "train-1")


@pytest.mark.parametrize(
    "shape",
    [
        {},
        {"metadata": None},
        obj(name="x"),
        obj(namespace="team-a"),
        obj(namespace="", name="x"),
        obj(namespace=1, name="x"),
        obj(namespace="team-a", name="x", labels={JOBSET_NAME_KEY: ""}),
        obj(namespace="team-a", name="x", labels=None),
    ],
    ids=[
        "empty",
        "no metadata",
        "no namespace",
        "no name",
        "empty namespace",
        "number",
        "empty label",
        "no labels",
    ],
)
def test_an_object_without_the_names_maps_to_nothing(shape: dict[str, Any]) -> None:
    assert jobset_key(shape) is None
    if shape.get("metadata") and shape["metadata"].get("name") is None:
        assert own_key(shape) is None


def test_only_trainjobs_and_ledger_records_are_selected_by_a_label() -> None:
    """Every Job and pod is watched: one whose JobSet label was removed is still claimed."""
    selectors = {stream.kind: stream.label_selector for stream in STREAMS}
    assert selectors == {
        "trainjobs": "app.kubernetes.io/managed-by=dispatch-k8s",
        "jobsets": "",
        "jobs": "",
        "pods": "",
        "snapshots": "",
        "records": "dispatch.phpboyscout.uk/ledger",
    }


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("train-1-runtime-snapshot", ("team-a", "train-1")),
        ("train-1-runtime-snapshot-runtime-snapshot", ("team-a", "train-1-runtime-snapshot")),
        ("-runtime-snapshot", None),
        ("train-1-runtime-snapshot-2", None),
        ("dispatch-ledger-train-1", None),
        ("kube-root-ca.crt", None),
    ],
)
def test_a_config_map_maps_to_a_trainjob_only_as_its_runtime_snapshot(
    name: str, key: tuple[str, str] | None
) -> None:
    """Trainer names the copy `<trainjob>-runtime-snapshot` and labels it with nothing: the name
    is all there is to go by, and every other ConfigMap is told and dropped."""
    assert snapshot_key(obj(namespace="team-a", name=name)) == key
    (snapshots,) = [stream for stream in STREAMS if stream.kind == "snapshots"]
    assert not snapshots.keeps_unkeyed
    assert all(stream.keeps_unkeyed for stream in STREAMS if stream is not snapshots)


def test_whole_lists_tells_each_list_at_once_and_a_list_begun_again_afresh() -> None:
    def item(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}}

    events = [
        (streams.LISTING, {}),
        (streams.LISTED, item("a")),  # a list cut half-way: begun again
        (streams.LISTING, {}),
        (streams.LISTED, item("a")),
        (streams.LISTED, item("b")),
        (streams.SYNCED, {}),
        ("MODIFIED", item("b")),
        (streams.LISTING, {}),
        (streams.SYNCED, {}),
    ]
    assert list(streams.whole_lists(iter(events))) == [
        (streams.LISTED, {"items": [item("a"), item("b")]}),
        ("MODIFIED", item("b")),
        (streams.LISTED, {"items": []}),
    ]
