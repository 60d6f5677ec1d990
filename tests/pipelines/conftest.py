"""Fixtures of the pipeline tests: the engines' CRDs, the engines themselves on the local
cluster, the shipped identity and queues."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.conftest import Cluster
from tests.images import engine
from tests.images.conftest import debian_image, docker_engine, step_image
from tests.integration.conftest import custom, kueue, step
from tests.node.fixtures import real_node_runtime, step_image_on_node
from tests.pipelines import cli, crds
from tests.pipelines.controller_identity import controller_identity
from tests.pipelines.identity import StepIdentity, install_identity
from tests.pipelines.queues import Queues, install_queues
from tests.shipped import install_runtime


@pytest.fixture(scope="session")
def pipeline_crds(api_client: client.ApiClient) -> list[str]:
    """Argo's and Tekton's CRDs, installed once from their Go modules."""
    return crds.install(api_client)


@pytest.fixture(scope="session")
def engines(control_plane: Cluster, pipeline_crds: list[str]) -> float:
    """Argo Workflows' and Tekton's controllers running (tests/cluster/engines.py); the
    seconds their start took (0 when already running)."""
    if control_plane.plane is None:
        pytest.skip("the engines are started on the local control plane")
    return control_plane.plane.start_engines()


@pytest.fixture(scope="session")
def exit_code_image(control_plane: Cluster, docker_engine: None) -> str:
    """The stand-in step image whose steps exit with the code --name names, on the node."""
    engine.ensure_exit_code_image(list(cli.console_scripts()))
    assert control_plane.plane is not None
    assert control_plane.plane.node is not None
    control_plane.plane.node.import_images([engine.EXIT_CODES])
    return engine.EXIT_CODES


@pytest.fixture(scope="session")
def torch_runtime(api_client: client.ApiClient) -> str:
    """The shipped dispatch-ready torch ClusterTrainingRuntime."""
    return install_runtime(api_client)


@pytest.fixture
def steps_identity(
    api_client: client.ApiClient, namespace: str, control_plane: Cluster, tmp_path: Path
) -> Iterator[StepIdentity]:
    """pipelines/rbac/steps.yaml in the test's namespace, with a token kubeconfig."""
    identity = install_identity(
        api_client, namespace, admin_kubeconfig=control_plane.kubeconfig, work=tmp_path
    )
    yield identity
    identity.remove()


@pytest.fixture
def queues(api_client: client.ApiClient, namespace: str) -> Iterator[Queues]:
    """pipelines/kueue/ for the test's namespace, the check marked Active."""
    installed = install_queues(api_client, namespace)
    yield installed
    installed.remove()


# The image and real-node suites' fixtures the engines' runs use.
__all__ = [
    "controller_identity",
    "custom",
    "debian_image",
    "docker_engine",
    "kueue",
    "real_node_runtime",
    "step",
    "step_image",
    "step_image_on_node",
]
