"""Kueue mode over a job's lifetime: a watch cut mid-wait is a transient failure, an approval
needs the raise made for its very reservation, and shapes the gates cannot keep are refused."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until
from tests.support import render
from tests.support.cluster_under_test import Cluster
from tests.support.environment import host_env
from tests.support.kueue_objects import KUEUE, KueueSetup, condition
from tests.support.lifecycle import (
    BIN,
    DEADLINE,
    TRAINER,
    Kubelet,
    Step,
    admit_and_approve,
    admit_wait,
    blocked_admission,
    run_step,
    start_args,
    start_queued,
)
from tests.support.proxy import proxied
from tests.support.requests import trainjob_body

pytestmark = pytest.mark.integration
WATCH_SETTLES: Final = 4.0  # seconds after connecting: a step starts and reads in about 1.5


def test_a_watch_cut_mid_wait_is_exit_75_and_a_rerun_admits(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    control_plane: Cluster,
    tmp_path: Path,
) -> None:
    blocker, admit = blocked_admission(step, namespace, torch_runtime, kueue, timeout=120)
    with proxied(control_plane.kubeconfig, tmp_path) as (proxy, kubeconfig):
        admitting = subprocess.Popen(
            [str(BIN / "dispatch-admit"), "--kubeconfig", str(kubeconfig), *admit],
            env=host_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # The step reads, lists, then watches on one kept-alive connection; the reads take
        # well under the settling time on this machine, so the cut lands in the watch.
        wait_until(lambda: proxy.connections() == 1 or None, what="admit to connect", timeout=60)
        settled = time.monotonic() + WATCH_SETTLES
        wait_until(lambda: time.monotonic() > settled or None, what="admit to watch")
        assert admitting.poll() is None, "admit is still waiting"
        proxy.cut()
        _, stderr = admitting.communicate(timeout=60)
    assert admitting.returncode == 75, stderr
    assert "connection lost" in stderr
    assert "Traceback" not in stderr

    kueue.set_active(blocker.result["uid"], active=False)  # the quota frees up
    rerun = run_step("admit", *admit, kubeconfig=control_plane.kubeconfig)
    assert rerun.code == 0, rerun.error
    assert rerun.result["admission"] == 1


def test_approve_by_hand_without_a_raise_is_refused(
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    kueue.install(cpu="1")
    started = start_queued(step, namespace, torch_runtime, kueue, "unraised")

    def reserved() -> dict[str, object] | None:
        workload = kueue.workload_of(started.result["uid"])
        if not workload or condition(workload, "QuotaReserved") != "True":
            return None
        # Kueue's job controller writes PodsReady some 70 ms after the reservation: read
        # before it, the resourceVersion handed to approve is stale and approve rightly says
        # so (exit 3) instead of refusing the approval this test is about.
        return workload if condition(workload, "PodsReady") is not None else None

    workload = wait_until(reserved, what="a reservation", timeout=DEADLINE)
    meta = workload["metadata"]
    assert isinstance(meta, dict)
    approve = [
        *("--namespace", namespace, "--check", kueue.check, "--workload", meta["name"]),
        *("--workload-resource-version", meta["resourceVersion"], "--admission", "0"),
    ]
    refused = step("approve", *approve)
    assert refused.code == 6
    assert "A was not raised for this reservation" in refused.error
    again = kueue.workload_of(started.result["uid"])
    assert again is not None
    states = {c["name"]: c["state"] for c in again["status"]["admissionChecks"]}
    assert states[kueue.check] == "Pending", "nothing was approved"


def test_a_multikueue_trainjob_is_refused_by_admit(
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    kueue.install(cpu="1")
    body = trainjob_body(
        "multi",
        runtime=torch_runtime,
        namespace=namespace,
        queue=kueue.local_queue,
        resources_per_node={"requests": {"cpu": "1"}},
    )
    body["spec"]["managedBy"] = wire.MULTIKUEUE_MANAGER  # as Kueue sets it (immutable after)
    custom.create_namespaced_custom_object(*TRAINER, namespace, "trainjobs", body)
    admit = ["--namespace", namespace, "--name", body["metadata"]["name"], "--check", kueue.check]
    refused = step("admit", *admit, "--wait", "--timeout", "600")
    assert refused.code == 6
    assert "managed by MultiKueue" in refused.error
    assert "not supported yet" in refused.error


def test_a_check_added_to_the_queue_of_an_admitted_job_is_waited_out_not_refused(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    kueue.install(cpu="1")
    queue = (*KUEUE, "clusterqueues", f"{namespace}-cq")
    strategy = {"admissionChecksStrategy": {"admissionChecks": [{"name": kueue.check}]}}
    custom.patch_cluster_custom_object(*queue, {"spec": {"admissionChecksStrategy": None}})
    started = start_queued(step, namespace, torch_runtime, kueue, "checked-later")
    name = started.result["name"]
    # Admitted with no check: the API server raises A on Kueue's opening (raise-on-open).
    kubelet.wait_for_pod(name, restart=0, admission=1)
    custom.patch_cluster_custom_object(*queue, {"spec": strategy})

    def listed() -> bool | None:
        workload = kueue.workload_of(started.result["uid"])
        checks = (workload or {}).get("status", {}).get("admissionChecks") or []
        return any(c["name"] == kueue.check for c in checks) or None

    wait_until(
        listed, what="Kueue to list the new check on the admitted Workload", timeout=DEADLINE
    )
    waited = step("admit", *admit_wait(namespace, name, kueue.check, timeout=5))
    assert waited.code == 75, waited.error
    assert "admitted before admission check" in waited.error


def test_approve_while_kueue_is_down_is_exit_75_and_a_rerun_approves(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    control_plane: Cluster,
) -> None:
    if control_plane.plane is None:
        pytest.skip("stops a controller of the local control plane")
    kueue.install(cpu="1")
    started = start_queued(step, namespace, torch_runtime, kueue, "kueue-down")
    name = started.result["name"]
    admitted = run_step(
        "admit",
        *admit_wait(namespace, name, kueue.check, timeout=120),
        kubeconfig=control_plane.kubeconfig,
    )
    assert admitted.code == 0, admitted.error
    approve = [
        *("--namespace", namespace, "--check", kueue.check),
        *("--workload", admitted.result["workload"]),
        *("--workload-resource-version", admitted.result["workloadResourceVersion"]),
        *("--admission", str(admitted.result["admission"])),
    ]
    with control_plane.plane.stopped("kueue"):
        # Kueue's workloads/status webhook fails closed while Kueue is down.
        down = step("approve", *approve)
        assert down.code == 75, down.error
        assert "Traceback" not in down.stderr
    again = step("approve", *approve)
    assert again.code == 0, again.error
    kubelet.wait_for_pod(name, restart=0, admission=1)  # Kueue admits and opens it


def test_a_deleted_trainjob_started_again_is_refused_and_a_new_submission_starts(
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    """Deleting the TrainJob deletes its JobSet and Workload (and Kueue's
    objectRetentionPolicies may delete a finished one), but not the ledger: the same identity
    started again would begin at A = 0 and repeat its epochs, so it is refused; a new N starts."""
    kueue.install(cpu="1")
    first = start_queued(step, namespace, torch_runtime, kueue, "again")
    name = first.result["name"]
    admit_and_approve(step, namespace, name, kueue.check)
    custom.delete_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)

    def gone() -> bool | None:
        try:
            custom.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
        except client.ApiException as e:
            return True if e.status == 404 else None
        return None

    wait_until(gone, what=f"TrainJob {name} to be deleted", timeout=DEADLINE)
    flags = start_args(namespace, torch_runtime, "again", **kueue.queued_request())
    again = step("start", *flags)
    assert again.code == 6, again.error
    assert "new submission number N" in again.error
    assert gone(), "nothing created"
    renewed = step("start", *[f.replace("--submission=7", "--submission=8") for f in flags])
    assert (renewed.code, renewed.result["outcome"]) == (0, "created"), renewed.error
    admitted = admit_and_approve(step, namespace, renewed.result["name"], kueue.check)
    assert admitted.result["admission"] == 1
    assert int(renewed.result["epochPrefix"]) > int(first.result["epochPrefix"])


def test_a_workload_kueue_replaces_after_a_runtime_patch_is_gated_afresh(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    """Another manager's runtime patch changes the pods Kueue reserved quota for: Kueue deletes
    the Workload and makes a new one (same name, new UID). The approval of the old reservation
    goes round (3 or 4, never a refusal), and the new one gets its own raise."""
    kueue.install(cpu="1")
    started = start_queued(step, namespace, torch_runtime, kueue, "replaced")
    name, uid = started.result["name"], started.result["uid"]
    target = ["--namespace", namespace, "--check", kueue.check]
    admitted = step("admit", *admit_wait(namespace, name, kueue.check, timeout=DEADLINE))
    assert admitted.code == 0, admitted.error
    first = kueue.workload_of(uid)
    assert first is not None
    tolerations = [{"key": "example.com/spot", "operator": "Exists"}]
    patch = {
        "manager": "example.com/placement",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {"template": {"spec": {"tolerations": tolerations}}}
                            },
                        }
                    ]
                }
            }
        },
    }
    # A list body is sent as a JSON patch: append to the patches, keep ours as it is.
    append = [{"op": "add", "path": "/spec/runtimePatches/-", "value": patch}]
    custom.patch_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", name, append, _content_type="application/json-patch+json"
    )

    def replaced() -> dict[str, Any] | None:
        workload = kueue.workload_of(uid)
        if workload is None or workload["metadata"]["uid"] == first["metadata"]["uid"]:
            return None
        return workload

    second = wait_until(replaced, what="Kueue to replace the Workload", timeout=DEADLINE)
    assert second["metadata"]["name"] == first["metadata"]["name"]
    stale = step(
        "approve",
        *target,
        *("--workload", admitted.result["workload"]),
        *("--workload-resource-version", admitted.result["workloadResourceVersion"]),
        *("--admission", str(admitted.result["admission"])),
    )
    assert stale.code in (3, 4), stale.error  # the loops go round on both
    again = admit_and_approve(step, namespace, name, kueue.check)
    assert again.code == 0, again.error
    pod = kubelet.wait_for_pod(name, restart=0, admission=2)
    assert kubelet.execute(pod).epoch > 0
    job = custom.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
    assert isinstance(job, dict)
    raised_for = job["metadata"]["annotations"][wire.RAISED_FOR_ANNOTATION]
    assert raised_for.startswith(f"{second['metadata']['uid']} ")


def test_the_gates_loop_goes_round_until_the_job_has_finished(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    control_plane: Cluster,
    tmp_path: Path,
) -> None:
    """bin/dispatch-kueue-gates (the step image's loop that the Argo and Tekton Kueue
    pipelines run), run as their pods would, the kubelet played: it goes round on admit's 75
    (no reservation in wait-seconds), gates an admission, a re-admission after an eviction,
    and ends with 0 once the TrainJob is Complete. The steps it runs are those beside it, with
    the cluster its --kubeconfig names."""
    kueue.install(cpu="1")
    started = start_queued(step, namespace, torch_runtime, kueue, "gated")
    name, uid = started.result["name"], started.result["uid"]
    loop = [
        str(BIN / render.GATES),
        f"--namespace={namespace}",
        f"--name={name}",
        f"--check={kueue.check}",
        "--wait-seconds=3",
        f"--kubeconfig={control_plane.kubeconfig}",
    ]
    # Neither the steps on PATH nor a kubeconfig in the env: it runs those installed beside it
    # and hands them the --kubeconfig it was given.
    env = {"PATH": "/usr/bin:/bin"}
    log = tmp_path / "gates.log"

    def went_round() -> bool | None:
        return True if '"exit_code": 75' in log.read_text() else None

    with (
        log.open("w") as sink,
        subprocess.Popen(loop, env=env, stdout=subprocess.DEVNULL, stderr=sink) as gates,
    ):
        first = kubelet.wait_for_pod(name, restart=0, admission=1)
        # Admitted: the next admit sees nothing to gate in its 3 s and the loop goes round.
        wait_until(went_round, what="the loop to go round on 75", timeout=DEADLINE)
        kueue.set_active(uid, active=False)  # evicted: Kueue suspends it, the pods go
        wait_until(lambda: not kubelet.pods(name) or None, what="the pods to go", timeout=DEADLINE)
        kueue.set_active(uid, active=True)
        second = kubelet.wait_for_pod(name, restart=0, admission=2)
        assert second["metadata"]["uid"] != first["metadata"]["uid"]
        assert gates.poll() is None, "the loop waits for the next admission"
        kubelet.set_phase(second, "Succeeded")  # the job's one pod ends well: Complete
        gates.wait(timeout=DEADLINE)
    stderr = log.read_text()
    assert gates.returncode == 0, stderr
    assert '"message": "nothing more to gate"' in stderr
    assert "Traceback" not in stderr
