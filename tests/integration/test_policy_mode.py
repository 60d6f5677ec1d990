"""Kueue's policy mode with the real Kueue: a ClusterQueue with no AdmissionCheck, the
MutatingAdmissionPolicy raising A as Kueue opens each TrainJob, and the admission controller
as the auditor only (--no-gate): it tells each raise, and deactivates the Workload of a job
flagged foreign, whose opening the guard refuses, rather than let Kueue retry it for ever."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import events, wire
from tests.cluster.wait import wait_until
from tests.integration.conftest import wait_suspended
from tests.support.cluster_under_test import Cluster
from tests.support.kueue_objects import KueueSetup, condition
from tests.support.lifecycle import (
    DEADLINE,
    TRAINER,
    Kubelet,
    Step,
    read_trainjob,
    start_args,
    start_queued,
)
from tests.support.replicas import replicas

pytestmark = pytest.mark.integration
# The auditor only; a short resync, so a refused opening (no change of the TrainJob) is seen.
POLICY_MODE: Final = ("--no-gate", "--resync-seconds", "3")


def test_a_queued_job_that_requests_nothing_is_started_and_raised_on_open(
    step: Step, kubelet: Kubelet, namespace: str, torch_runtime: str, kueue: KueueSetup
) -> None:
    kueue.install(cpu="1", with_check=False)
    args = start_args(namespace, torch_runtime, "empty", queue=kueue.local_queue)
    refused = step("start", *args)
    assert (refused.code, "--kueue-mode policy" in refused.error) == (6, True)
    started = step("start", *args, "--kueue-mode", "policy")
    assert started.code == 0, started.error
    pod = kubelet.wait_for_pod(started.result["name"], restart=0, admission=1)
    assert kubelet.execute(pod).r == 1


def _raised(api: client.ApiClient, namespace: str, name: str) -> list[str]:
    listed = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason={events.RAISED}"
    )
    return sorted(e.message or "" for e in listed.items)


def test_the_auditor_tells_each_raise_and_deactivates_a_foreign_jobs_workload(
    control_plane: Cluster,
    api_client: client.ApiClient,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    kueue.install(cpu="1", with_check=False)
    started = start_queued(step, namespace, torch_runtime, kueue, "policy-mode")
    name, uid = started.result["name"], started.result["uid"]
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "only", extra=POLICY_MODE):
        kubelet.wait_for_pod(name, restart=0, admission=1)
        kueue.set_active(uid, active=False)
        wait_suspended(custom, namespace, name)
        kueue.set_active(uid, active=True)
        kubelet.wait_for_pod(name, restart=0, admission=2)

        # The first raise may come before the auditor's first list; the second is watched.
        second = "A raised to 2: the next execution starts with R = A + J = 2 + 0 = 2"
        wait_until(
            lambda: second in _raised(api_client, namespace, name) or None,
            what="the second raise told",
            timeout=DEADLINE,
        )
        assert _raised(api_client, namespace, name).count(second) == 1

        # Flagged while it runs: left to run. Then preempted (deactivated, as a person or a
        # higher priority would) and let back: Kueue admits it, and its opening is refused.
        flag = {wire.FOREIGN_ANNOTATION: "true", wire.FOREIGN_CAUSE_ANNOTATION: "test"}
        custom.patch_namespaced_custom_object(
            *TRAINER, namespace, "trainjobs", name, {"metadata": {"annotations": flag}}
        )
        kueue.set_active(uid, active=False)
        wait_suspended(custom, namespace, name)
        kueue.set_active(uid, active=True)

        def deactivated() -> dict[str, Any] | None:
            found = kueue.workload_of(uid)
            return found if found and found["spec"].get("active") is False else None

        workload = wait_until(deactivated, what="the auditor to deactivate it", timeout=DEADLINE)
        because = workload["metadata"]["annotations"][wire.DEACTIVATED_ANNOTATION]
        assert f"TrainJob {name} is flagged foreign" in because
        wait_until(
            lambda: condition(kueue.workload_of(uid) or {}, "QuotaReserved") != "True" or None,
            what="Kueue to release the quota",
            timeout=DEADLINE,
        )
    job = read_trainjob(custom, namespace, name)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "2", "no raise"
    refused = client.CoreV1Api(api_client).list_namespaced_event(
        namespace, field_selector=f"reason={events.REFUSED}"
    )
    kinds = {e.involved_object.kind for e in refused.items if "deactivated" in (e.message or "")}
    assert kinds == {"Workload", "TrainJob"}
