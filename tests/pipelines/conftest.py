"""Fixtures of the pipeline tests: the engines' CRDs, the shipped identity and queues."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.conftest import Cluster
from tests.pipelines import crds
from tests.pipelines.identity import StepIdentity, install_identity
from tests.pipelines.queues import Queues, install_queues
from tests.shipped import install_runtime


@pytest.fixture(scope="session")
def pipeline_crds(api_client: client.ApiClient) -> list[str]:
    """Argo's and Tekton's CRDs, installed once from their Go modules."""
    return crds.install(api_client)


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
