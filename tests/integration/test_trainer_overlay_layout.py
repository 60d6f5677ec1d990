"""Trainer's standard install (issue 42, part 2, layout (b)): its `manifests/overlays/manager`
includes JobSet's release and sets `namespace: kubeflow-system` over it, so JobSet runs as
`system:serviceaccount:kubeflow-system:jobset-controller-manager`. On a control plane of this
module's own in that layout (tests/cluster/identities.py), with the shipped policies at their
default parameters, a managed job runs: A is raised at the opening and JobSet's creation of
its child Job goes through, with no request of an upstream controller refused. With the
parameters of before 35b4747 (JobSet trusted in jobset-system alone) it fails: the path guard
refuses that child Job.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client, config

from dispatch_k8s.core.rules import wire
from tests.cluster.harness import ControlPlane
from tests.cluster.identities import USERS
from tests.cluster.wait import wait_until
from tests.support import policies
from tests.support.cluster_under_test import EXISTING_CLUSTER_ENV
from tests.support.lifecycle import DEADLINE, Kubelet, run_step, start_args
from tests.support.shipped import install_runtime

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

LAYOUT: Final = "trainer-overlay"
JOBSET_USER: Final = USERS[LAYOUT]["jobset"]


@pytest.fixture(scope="module")
def overlay_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of the module's own, its controllers in layout (b)."""
    if os.environ.get(EXISTING_CLUSTER_ENV):
        pytest.skip("starts a local control plane in Trainer's overlay layout")
    with ControlPlane(tmp_path_factory.mktemp("overlay-plane"), layout=LAYOUT) as plane:
        yield plane


@pytest.fixture(scope="module")
def overlay_api(overlay_plane: ControlPlane) -> Iterator[client.ApiClient]:
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(overlay_plane.kubeconfig)
    )
    with contextlib.closing(api):
        yield api


def _namespace(api: client.ApiClient, name: str) -> str:
    core = client.CoreV1Api(api)
    core.create_namespace(policies.namespace_body(name, "all"))
    wait_until(
        lambda: (
            core.list_namespaced_service_account(name, field_selector="metadata.name=default").items
            or None
        ),
        what=f"ServiceAccount {name}/default",
        timeout=DEADLINE,
    )
    return name


def _opened(kubeconfig: Path, namespace: str, runtime: str, job_id: str) -> str:
    """Start a managed TrainJob and open it, as a pipeline does; its name."""
    started = run_step("start", *start_args(namespace, runtime, job_id), kubeconfig=kubeconfig)
    assert started.code == 0, started.error
    name = str(started.result["name"])
    opened = run_step("unsuspend", "--namespace", namespace, "--name", name, kubeconfig=kubeconfig)
    assert opened.code == 0, opened.error
    assert opened.result["admission"] == 1
    return name


def _job_writes(plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    """JobSet's creations of Jobs in `namespace`, as the audit log has them."""
    return [
        event
        for event in plane.audit_events(JOBSET_USER)
        if event["verb"] == "create"
        and event["objectRef"]["resource"] == "jobs"
        and event["objectRef"].get("namespace") == namespace
    ]


def test_a_managed_job_runs_with_jobset_in_kubeflow_system(
    overlay_plane: ControlPlane, overlay_api: client.ApiClient
) -> None:
    assert overlay_plane.controller_users["jobset"] == JOBSET_USER
    runtime = install_runtime(overlay_api)
    policies.install(overlay_api, runtime, controllers=None)  # the shipped parameters
    namespace = _namespace(overlay_api, "overlay-layout")
    name = _opened(overlay_plane.kubeconfig, namespace, runtime, "overlay-1")

    # JobSet (as kubeflow-system's ServiceAccount) made the child Job, the Job controller its
    # pod, which carries the raised A.
    kubelet = Kubelet(overlay_api, namespace)
    pod = kubelet.wait_for_pod(name, restart=0, admission=1)
    assert pod["metadata"]["annotations"][wire.ADMISSION_ANNOTATION] == "1"
    execution = kubelet.execute(pod)  # the real prologue, on what reached the pod
    assert (execution.admission, execution.restart, execution.r) == (1, 0, 1)
    made = _job_writes(overlay_plane, namespace)
    assert [e["responseStatus"]["code"] for e in made] == [201], made
    refused = overlay_plane.refusals(namespace)
    assert not refused, [
        (e["user"]["username"], e["requestURI"], e["responseStatus"]) for e in refused
    ]
    anywhere = overlay_plane.refused_by_rbac()
    assert not anywhere, [(e["user"]["username"], e["requestURI"]) for e in anywhere]
