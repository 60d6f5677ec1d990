"""`dispatch-admission-controller` with the real Kueue: one raise per reservation, then the
approval; another team's TrainJob approved with nothing raised; leadership, restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dispatch_k8s.core import wire
from tests.conftest import Cluster
from tests.integration.conftest import Step, start_queued
from tests.integration.controller import replicas
from tests.integration.lifecycle import DEADLINE, TRAINER, Kubelet, read_trainjob, run_stage
from tests.kueue_objects import KUEUE, KueueSetup, condition
from tests.wait import wait_until

pytestmark = pytest.mark.integration


def other_teams_trainjob(
    custom: client.CustomObjectsApi, namespace: str, runtime: str, kueue: KueueSetup
) -> str:
    """A queued TrainJob that dispatch-start did not make (no managed-by label, no patch)."""
    body = {
        "apiVersion": "/".join(TRAINER),
        "kind": "TrainJob",
        "metadata": {"name": "other-team", "labels": {wire.QUEUE_LABEL: kueue.local_queue}},
        "spec": {
            "runtimeRef": {"name": runtime},
            "suspend": True,
            "trainer": {
                "image": "registry.invalid/other:1",
                "command": ["true"],
                "numNodes": 1,
                "resourcesPerNode": {"requests": {"cpu": "1"}},
            },
        },
    }
    custom.create_namespaced_custom_object(*TRAINER, namespace, "trainjobs", body)
    return "other-team"


def workload_of(custom: client.CustomObjectsApi, namespace: str, trainjob: str) -> dict[str, Any]:
    """The Workload a TrainJob's Kueue integration made, once there is one."""

    def found() -> dict[str, Any] | None:
        listed = custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")
        assert isinstance(listed, dict)
        for item in listed["items"]:
            owners = item["metadata"].get("ownerReferences") or []
            if any(owner["name"] == trainjob for owner in owners):
                return dict(item)
        return None

    return wait_until(found, what=f"the Workload of {trainjob}", timeout=DEADLINE)


def admitted(custom: client.CustomObjectsApi, namespace: str, trainjob: str) -> dict[str, Any]:
    """The TrainJob's Workload once Kueue has admitted it."""

    def done() -> dict[str, Any] | None:
        current = workload_of(custom, namespace, trainjob)
        return current if condition(current, "Admitted") == "True" else None

    return wait_until(done, what=f"Kueue to admit {trainjob}", timeout=DEADLINE)


def check_message(workload: dict[str, Any], check: str) -> str:
    states = workload["status"].get("admissionChecks") or []
    return str(next(s for s in states if s["name"] == check).get("message"))


def test_it_raises_once_approves_and_admits_another_teams_trainjob_as_it_is(
    control_plane: Cluster,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    kueue.install(cpu="2")
    ours = start_queued(step, namespace, torch_runtime, kueue, "ours").result["name"]
    theirs = other_teams_trainjob(custom, namespace, torch_runtime, kueue)
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "only") as (only,):
        pod = kubelet.wait_for_pod(ours, restart=0, admission=1)
        assert kubelet.execute(pod).r == 1
        mine = admitted(custom, namespace, ours)
        assert check_message(mine, kueue.check) == "dispatch: admission count raised to 1"
        other = admitted(custom, namespace, theirs)
        assert "without raising an admission count" in check_message(other, kueue.check)
        assert "TrainJob other-team is not a dispatch-managed TrainJob" in check_message(
            other, kueue.check
        )
        annotations = read_trainjob(custom, namespace, theirs)["metadata"].get("annotations")
        assert not any(key.startswith(wire.DOMAIN) for key in annotations or {})
        job = read_trainjob(custom, namespace, ours)
        assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "1"
        assert only.metric("dispatch_admission_raises_total") == 1
        assert only.metric("dispatch_admission_approvals_total", 'kind="dispatch"') == 1
        assert only.metric("dispatch_admission_approvals_total", 'kind="other"') == 1
        assert only.metric("dispatch_admission_reserved_to_approved_seconds_count") == 2
        assert only.get("/healthz") == (200, "ok\n")
        check = custom.get_cluster_custom_object(*KUEUE, "admissionchecks", kueue.check)
        assert isinstance(check, dict)
        active = next(c for c in check["status"]["conditions"] if c["type"] == "Active")
        assert (active["status"], active["reason"]) == ("True", "Active")
        assert "dispatch-admission-controller" in active["message"]
        assert only.stop() == 0
    assert any(r["message"] == "released the leader Lease" for r in only.records())


def test_a_reservation_raised_for_before_a_restart_is_approved_without_a_second_raise(
    control_plane: Cluster,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """As a controller killed between its raise and its approval: the raise is on record."""
    kueue.install(cpu="1")
    name = start_queued(step, namespace, torch_runtime, kueue, "raised").result["name"]
    raised = run_stage(
        step, "admit", "--namespace", namespace, "--name", name, "--check", kueue.check, "--wait"
    )
    assert (raised.code, raised.result.get("admission")) == (0, 1), raised.error
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "after") as (after,):
        pod = kubelet.wait_for_pod(name, restart=0, admission=1)
        assert kubelet.execute(pod).r == 1
        assert after.metric("dispatch_admission_raises_total") == 0
        assert after.metric("dispatch_admission_approvals_total", 'kind="dispatch"') == 1
    job = read_trainjob(custom, namespace, name)
    assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "1"
