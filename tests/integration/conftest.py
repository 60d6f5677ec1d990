"""Fixtures of the lifecycle tests: the shipped runtime, a kubelet, Kueue queues."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until
from tests.conftest import Cluster
from tests.integration.team import team_member
from tests.support.kueue_objects import KueueSetup
from tests.support.lifecycle import DEADLINE, Kubelet, StepRun, admit_and_approve, run_step
from tests.support.policies import Policies
from tests.support.requests import request_flags

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
def member(
    api_client: client.ApiClient, namespace: str, control_plane: Cluster, tmp_path: Path
) -> Iterator[client.ApiClient]:
    """The team member's API client in the test's namespace (tests/integration/team.py)."""
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


def with_policies(*installed: Policies) -> pytest.MarkDecorator:
    """Run a test once per install: the steps must work the same with any of them."""
    params = [pytest.param(which, marks=pytest.mark.policies(which)) for which in installed]
    return pytest.mark.parametrize("installed", params)


def start_queued(
    step: Step, namespace: str, runtime: str, kueue: KueueSetup, job_id: str
) -> StepRun:
    """Start a one-CPU TrainJob in the Kueue setup's LocalQueue."""
    started = step("start", *start_args(namespace, runtime, job_id, **kueue.queued_request()))
    assert started.code == 0, started.error
    return started


def blocked_admission(
    step: Step, namespace: str, runtime: str, kueue: KueueSetup, *, timeout: int
) -> tuple[StepRun, list[str]]:
    """A job admitted holding the queue's one CPU, and `admit --wait` flags for a second job
    that waits behind it (up to `timeout` s): free the quota with kueue.set_active(blocker)."""
    kueue.install(cpu="1")
    blocker = start_queued(step, namespace, runtime, kueue, "holds-the-quota")
    admit_and_approve(step, namespace, blocker.result["name"], kueue.check)
    waiting = start_queued(step, namespace, runtime, kueue, "waits")
    admit = [
        *("--namespace", namespace, "--name", waiting.result["name"], "--check", kueue.check),
        *("--wait", "--timeout", str(timeout)),
    ]
    return blocker, admit


def wait_suspended(custom: client.CustomObjectsApi, namespace: str, name: str) -> None:
    """Wait until the TrainJob is suspended (by Kueue, after an eviction)."""

    def suspended() -> bool | None:
        job = custom.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
        assert isinstance(job, dict)
        return job["spec"].get("suspend") is True or None

    wait_until(suspended, what=f"TrainJob {name} to be suspended", timeout=DEADLINE)


def start_args(namespace: str, runtime: str, job_id: str, **extra: str) -> list[str]:
    """Flags of a start request in the test's namespace (there is no kubelet to run it)."""
    flags = [f"--namespace={namespace}", f"--runtime-name={runtime}"]
    return [*flags, *request_flags(job_id, args=False, extra=extra)]
