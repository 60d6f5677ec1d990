"""Fixtures of tests that run pods on the real node: the node runtime, training images and
the step image imported into the node (used by tests/node and tests/pipelines)."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.cluster import engine
from tests.cluster.node import Node
from tests.conftest import Cluster
from tests.support.executions import NODE_RUNTIME, TRAINER, node_runtime


@pytest.fixture(scope="session")
def real_node_runtime(api_client: client.ApiClient) -> str:
    """The node runtime, installed once."""
    try:
        client.CustomObjectsApi(api_client).create_cluster_custom_object(
            *TRAINER, "clustertrainingruntimes", node_runtime()
        )
    except client.ApiException as e:
        if e.status != 409:
            raise
    return NODE_RUNTIME


def _local_node(control_plane: Cluster) -> Node:
    if control_plane.plane is None or control_plane.plane.node is None:
        pytest.skip("imports images into the local node's containerd")
    return control_plane.plane.node


@pytest.fixture(scope="session")
def training_images(control_plane: Cluster, debian_image: str) -> dict[str, str]:
    """The node's training images beyond busybox: Debian, and one without a shell."""
    engine.ensure_no_shell_image()
    _local_node(control_plane).import_images([debian_image, engine.NO_SHELL])
    return {"debian": debian_image, "no-shell": engine.NO_SHELL}


@pytest.fixture(scope="session")
def step_image_on_node(step_image: str, control_plane: Cluster) -> str:
    """The step image, built as users build it, imported into the node's containerd."""
    _local_node(control_plane).import_images([step_image])
    return step_image
