"""Fixtures of the lifecycle tests: the shared ones (tests/support/fixtures.py), a kubelet, and
helpers only this suite uses."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.cluster.harness import ControlPlane
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.fixtures import custom, kueue, member, step, torch_runtime
from tests.support.lifecycle import DEADLINE, TRAINER, Kubelet
from tests.support.policies import Policies


@pytest.fixture
def kubelet(api_client: client.ApiClient, namespace: str) -> Kubelet:
    """Plays the kubelet in the test's namespace."""
    return Kubelet(api_client, namespace)


@pytest.fixture
def plane(control_plane: Cluster) -> ControlPlane:
    """The local control plane, whose audit log tells who sent what."""
    if control_plane.plane is None:
        pytest.skip("reads the local control plane's audit log")
    return control_plane.plane


def with_policies(*installed: Policies) -> pytest.MarkDecorator:
    """Run a test once per install: the steps must work the same with any of them."""
    params = [pytest.param(which, marks=pytest.mark.policies(which)) for which in installed]
    return pytest.mark.parametrize("installed", params)


def wait_suspended(custom: client.CustomObjectsApi, namespace: str, name: str) -> None:
    """Wait until the TrainJob is suspended (by Kueue, after an eviction)."""

    def suspended() -> bool | None:
        job = custom.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
        assert isinstance(job, dict)
        return job["spec"].get("suspend") is True or None

    wait_until(suspended, what=f"TrainJob {name} to be suspended", timeout=DEADLINE)


__all__ = ["custom", "kueue", "member", "step", "torch_runtime"]
