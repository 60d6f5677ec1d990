"""Fixtures of the real-node suite: a runtime whose pods run on the node, and their logs."""

from __future__ import annotations

import copy
from typing import Any, Final

import pytest
from kubernetes import client

from core import wire
from tests.cluster.node import TOLERATION
from tests.conftest import Cluster
from tests.images.conftest import debian_image, docker_engine, step_image
from tests.integration.conftest import custom, kueue, step
from tests.shipped import TORCH_RUNTIME, documents

TRAINER: Final = (wire.TRAINER_GROUP, wire.TRAINER_VERSION)
NODE_RUNTIME: Final = "dispatch-torch-real-node"
GRACE_SECONDS: Final = 5  # terminationGracePeriodSeconds of the node runtime's pods


def node_runtime() -> dict[str, Any]:
    """The shipped torch runtime, its pods on the real node: host network (the node has no pod
    network), the node's toleration, a short grace, and the log tail as termination message."""
    runtime = copy.deepcopy(documents(TORCH_RUNTIME)[0])
    runtime["metadata"] = {"name": NODE_RUNTIME}
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]["spec"]
        pod["hostNetwork"] = True
        pod["tolerations"] = [TOLERATION]
        pod["terminationGracePeriodSeconds"] = GRACE_SECONDS
        for container in pod["containers"]:
            container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return runtime


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


@pytest.fixture(scope="session")
def step_image_on_node(step_image: str, control_plane: Cluster) -> str:
    """The step image, built as users build it, imported into the node's containerd."""
    if control_plane.plane is None or control_plane.plane.node is None:
        pytest.skip("imports an image into the local node's containerd")
    control_plane.plane.node.import_images([step_image])
    return step_image


# The integration and image suites' fixtures, shared.
__all__ = ["custom", "debian_image", "docker_engine", "kueue", "step", "step_image"]
