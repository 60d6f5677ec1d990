"""Fixtures of the lifecycle tests: the shipped runtime, a kubelet, Kueue queues."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from core import wire
from tests.conftest import Cluster
from tests.integration.lifecycle import Kubelet, StepRun, run_step
from tests.kueue_objects import KueueSetup
from tests.requests import request_flags

REPO: Final = Path(__file__).resolve().parents[2]
RUNTIMES: Final = REPO / "pipelines" / "runtimes"
TRAINER: Final = (wire.TRAINER_GROUP, wire.TRAINER_VERSION)


@pytest.fixture(scope="session")
def torch_runtime(api_client: client.ApiClient) -> str:
    """The shipped dispatch-ready torch ClusterTrainingRuntime, installed once."""
    runtime = yaml.safe_load((RUNTIMES / "torch-distributed.yaml").read_text())
    try:
        client.CustomObjectsApi(api_client).create_cluster_custom_object(
            *TRAINER, "clustertrainingruntimes", runtime
        )
    except ApiException as e:
        if e.status != 409:
            raise
    return str(runtime["metadata"]["name"])


@pytest.fixture
def kubelet(api_client: client.ApiClient, namespace: str) -> Kubelet:
    """Plays the kubelet in the test's namespace."""
    return Kubelet(api_client, namespace)


Step = Callable[..., StepRun]


@pytest.fixture
def step(control_plane: Cluster) -> Step:
    """Run a step against the cluster under test: step("unsuspend", "--name", …)."""

    def run(name: str, *args: str) -> StepRun:
        return run_step(name, *args, kubeconfig=control_plane.kubeconfig)

    return run


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


def start_args(namespace: str, runtime: str, job_id: str, **extra: str) -> list[str]:
    """Flags of a start request in the test's namespace (there is no kubelet to run it)."""
    flags = [f"--namespace={namespace}", f"--runtime-name={runtime}"]
    return [*flags, *request_flags(job_id, args=False, extra=extra)]
