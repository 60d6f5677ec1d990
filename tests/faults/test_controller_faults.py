"""The API server restarted under a running dispatch-admission-controller: the leader loses
its Lease while the server is gone and exits (75) for its kubelet to start it again; started
again once the server is back, it leads and gates the next job."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.rules.errors import Fenced
from tests.cluster.harness import ControlPlane
from tests.cluster.wait import wait_until
from tests.support.kueue_objects import KueueSetup
from tests.support.lifecycle import TRAINER, Step, read_trainjob, start_queued
from tests.support.replicas import admitted, replicas

pytestmark = pytest.mark.faults


def test_the_api_server_restarted_under_the_controller_then_the_next_job_is_gated(
    plane: ControlPlane,
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    kueue.install(cpu="1")
    with replicas(plane.kubeconfig, namespace, tmp_path, "only") as (only,):
        before = start_queued(step, namespace, torch_runtime, kueue, "before").result["name"]
        admitted(custom, namespace, before)
        with plane.stopped("kube-apiserver"):
            wait_until(
                lambda: only.process.poll(), what="the replica to give up its term", timeout=60
            )
        assert only.process.returncode == Fenced.exit_code, (
            "it exits, transient, once it no longer leads"
        )
        assert any(r["message"] == "lost the leader Lease" for r in only.records())
    custom.delete_namespaced_custom_object(*TRAINER, namespace, "trainjobs", before)
    # The kubelet starts the same pod's container again: the same identity, a new process.
    again_logs = tmp_path / "started-again"
    again_logs.mkdir()
    with replicas(plane.kubeconfig, namespace, again_logs, "only") as (again,):
        after = start_queued(step, namespace, torch_runtime, kueue, "after").result["name"]
        admitted(custom, namespace, after)
        job = read_trainjob(custom, namespace, after)
        assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "1"
        assert again.leading()
