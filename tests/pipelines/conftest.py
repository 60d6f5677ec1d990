"""Fixtures of the pipeline tests: the engines' CRDs, the engines themselves on the local
cluster, the shipped queues, and the shared ones (tests/support/fixtures.py)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.cluster import crds, engine
from tests.cluster.harness import ControlPlane
from tests.pipelines.queues import Queues, install_queues
from tests.support import cli
from tests.support.cluster_under_test import EXISTING_CLUSTER_ENV, Cluster
from tests.support.controller_identity import controller_identity
from tests.support.fixtures import (
    custom,
    debian_image,
    docker_engine,
    kueue,
    real_node_runtime,
    step,
    step_image,
    step_image_on_node,
    steps_identity,
    torch_runtime,
)


@dataclass(frozen=True, slots=True)
class FreshPlane:
    """A local control plane of one test module's own: its admin kubeconfig, a client, and the
    plane itself (to stop and start a component)."""

    kubeconfig: Path
    api: client.ApiClient
    plane: ControlPlane


@contextlib.contextmanager
def _plane(run_dir: Path) -> Iterator[FreshPlane]:
    if os.environ.get(EXISTING_CLUSTER_ENV):
        pytest.skip("installed and removed on a local control plane of its own")
    with ControlPlane(run_dir) as plane:
        api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(plane.kubeconfig)
        )
        with contextlib.closing(api):
            yield FreshPlane(plane.kubeconfig, api, plane)


@pytest.fixture(scope="module")
def fresh_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FreshPlane]:
    """A local control plane started for the module alone (no node: nothing there runs pods).
    The installs tested on it create objects with the names the session's fixtures give theirs
    (the policies, the torch runtime, dispatch-system), and their uninstalls delete them."""
    with _plane(tmp_path_factory.mktemp("install-plane")) as plane:
        yield plane


@pytest.fixture
def own_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FreshPlane]:
    """As fresh_plane, for one test alone: an install whose policies must act, on an API
    server where none was installed and removed before (kubernetes/kubernetes#133827: after
    that, a binding re-made with its ConfigMap finds no parameters, docs/install.md)."""
    with _plane(tmp_path_factory.mktemp("install-plane")) as plane:
        yield plane


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


@pytest.fixture
def queues(api_client: client.ApiClient, namespace: str) -> Iterator[Queues]:
    """pipelines/kueue/ for the test's namespace, the check marked Active."""
    installed = install_queues(api_client, namespace)
    yield installed
    installed.remove()


# The shared fixtures the engines' runs use.
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
    "steps_identity",
    "torch_runtime",
]
