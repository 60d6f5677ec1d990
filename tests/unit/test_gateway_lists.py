"""Request paths and list bodies: names quoted, a list decoded one item at a time exactly as
whole."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch_k8s.core.shell.gateway import kinds
from dispatch_k8s.core.shell.gateway.bodies import iter_list_items
from dispatch_k8s.core.shell.gateway.kinds import Kind

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def streamed(text: str) -> tuple[list[Any], dict[str, Any]]:
    rest: dict[str, Any] = {}
    return list(iter_list_items(text, rest)), rest


@given(
    items=st.lists(JSON_VALUES, max_size=6),
    others=st.dictionaries(st.text().filter(lambda key: key != "items"), JSON_VALUES, max_size=3),
    first=st.booleans(),
    indent=st.sampled_from([None, 0, 2]),
)
def test_any_list_body_streams_as_it_decodes_whole(
    items: list[Any], others: dict[str, Any], first: bool, indent: int | None
) -> None:
    body = {"items": items, **others} if first else {**others, "items": items}
    assert streamed(json.dumps(body, indent=indent)) == (items, others)


def test_a_pod_list_page_as_the_api_server_writes_it() -> None:
    text = (
        '{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":'
        '"eyJ2In0"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}\n'
    )
    items, rest = streamed(text)
    assert [item["metadata"]["name"] for item in items] == ["a", "b"]
    assert rest == {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "42", "continue": "eyJ2In0"},
    }


@pytest.mark.parametrize(
    "text",
    ["", "[]", '{"items": [1, 2}', '{"items": [1] "x": 2}', "{1: 2}", '{"items": [1],}'],
    ids=["empty", "an array", "unclosed", "no comma", "number key", "trailing comma"],
)
def test_a_body_that_is_not_a_json_object_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011  # json's own errors say where
        streamed(text)


@pytest.mark.parametrize(
    ("namespace", "name", "path"),
    [
        ("team-a", "train-1", "/apis/g/v1/namespaces/team-a/trainjobs/train-1"),
        ("team-a", None, "/apis/g/v1/namespaces/team-a/trainjobs"),
        (None, "rt", "/apis/g/v1/trainjobs/rt"),
        ("a/b", "x?y=1#z", "/apis/g/v1/namespaces/a%2Fb/trainjobs/x%3Fy%3D1%23z"),
    ],
    ids=["object", "collection", "cluster-scoped", "quoted"],
)
def test_paths_quote_namespace_and_name_so_a_name_never_names_another_object(
    namespace: str | None, name: str | None, path: str
) -> None:
    assert Kind("TrainJob", "g", "v1", "trainjobs").path(namespace, name) == path


def test_core_paths_have_no_group() -> None:
    assert Kind("Pod", "", "v1", "pods").path("team-a") == "/api/v1/namespaces/team-a/pods"


def test_a_cluster_scoped_kind_has_no_namespace_in_its_path_even_when_given_one() -> None:
    check = Kind("AdmissionCheck", "g", "v1", "admissionchecks", namespaced=False)
    assert check.path("team-a", "c", subresource="status") == "/apis/g/v1/admissionchecks/c/status"


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        (kinds.TRAINJOB.path("team", "job"), "trainjobs"),
        (kinds.TRAINJOB.path("team"), "trainjobs"),
        (kinds.WORKLOAD.path(), "workloads"),
        (kinds.WORKLOAD.path("team", "w", subresource="status"), "workloads/status"),
        (kinds.EVENT.path("team") + "?fieldSelector=x", "events"),
        (kinds.CLUSTER_TRAINING_RUNTIME.path(name="torch"), "clustertrainingruntimes"),
        ("/api/v1/namespaces/team", "namespaces"),
    ],
)
def test_a_requests_resource_label_names_no_namespace_and_no_object(
    path: str, resource: str
) -> None:
    assert kinds.resource_of(path) == resource
