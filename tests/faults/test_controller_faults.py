"""The API server restarted under a running dispatch-admission-controller: the leader loses
its Lease while the server is gone, leads again once it is back, and gates the next job."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from dispatch_k8s.core import wire
from tests.cluster.harness import ControlPlane
from tests.integration.conftest import Step, start_queued
from tests.integration.controller import admitted, replicas
from tests.integration.lifecycle import TRAINER, read_trainjob
from tests.kueue_objects import KueueSetup
from tests.wait import wait_until

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

        def said(message: str) -> bool | None:
            return any(r["message"] == message for r in only.records()) or None

        with plane.stopped("kube-apiserver"):
            wait_until(lambda: said("lost the leader Lease"), what="the lease to lapse", timeout=60)
            assert only.process.poll() is None, "it keeps running without the API server"
            assert only.get("/healthz")[0] == 200
        custom.delete_namespaced_custom_object(*TRAINER, namespace, "trainjobs", before)
        after = start_queued(step, namespace, torch_runtime, kueue, "after").result["name"]
        admitted(custom, namespace, after)
        job = read_trainjob(custom, namespace, after)
        assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "1"
        leading = [r for r in only.records() if r["message"] == "leading"]
        assert len(leading) == 2, "it led, lost the Lease, and leads again"
        assert only.leading()
