"""Fixtures several suites share: the shipped runtime, the steps as console scripts, a team
member, Kueue objects, the Docker engine and the step image, the real node's runtime and images,
the steps' shipped identity. A suite's conftest imports the ones it uses."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.cluster import engine
from tests.cluster.node import Node
from tests.support.cluster_under_test import Cluster
from tests.support.executions import NODE_RUNTIME, TRAINER, node_runtime
from tests.support.kueue_objects import KueueSetup
from tests.support.lifecycle import Step, StepRun, run_step
from tests.support.shipped import default_image, install_runtime
from tests.support.step_identity import StepIdentity, install_identity
from tests.support.team import team_member


@pytest.fixture(scope="session")
def torch_runtime(api_client: client.ApiClient) -> str:
    """The shipped dispatch-ready torch ClusterTrainingRuntime, installed once."""
    return install_runtime(api_client)


@pytest.fixture
def step(control_plane: Cluster) -> Step:
    """Run a step against the cluster under test: step("unsuspend", "--name", …)."""

    def run(name: str, *args: str) -> StepRun:
        return run_step(name, *args, kubeconfig=control_plane.kubeconfig)

    return run


@pytest.fixture
def member(
    api_client: client.ApiClient, namespace: str, control_plane: Cluster, tmp_path: Path
) -> Iterator[client.ApiClient]:
    """The team member's API client in the test's namespace (tests/support/team.py)."""
    api = team_member(
        api_client, namespace, admin_kubeconfig=control_plane.kubeconfig, work=tmp_path
    )
    with contextlib.closing(api):
        yield api


@pytest.fixture
def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    """Custom objects of the cluster under test."""
    return client.CustomObjectsApi(api_client)


@pytest.fixture
def kueue(custom: client.CustomObjectsApi, namespace: str) -> Iterator[KueueSetup]:
    """Kueue objects for the test's namespace (install them with .install); removed after."""
    setup = KueueSetup(custom, namespace)
    yield setup
    setup.delete()


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


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[None]:
    """A running Docker engine: started here unless one answers, and then stopped
    again, with its mounts, when the run ends: the host is left as the run found it."""
    started = not engine.engine_ready()
    engine.ensure_engine()
    yield
    if started:
        engine.stop_ours()


@pytest.fixture(scope="session")
def debian_image(docker_engine: None) -> str:
    """Debian bookworm with Python 3.11, made with debootstrap: the stand-in base."""
    engine.ensure_debian_base()
    return engine.DEBIAN_BASE


@pytest.fixture(scope="session")
def step_image(debian_image: str) -> str:
    """The step image, built by images/build.sh exactly as users build it, on the local base."""
    tag = engine.build_step_image()
    assert tag == default_image(), f"build.sh printed {tag!r} on stdout, and nothing else"
    return tag


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
