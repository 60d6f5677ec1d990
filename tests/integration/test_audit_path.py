"""The audit sees the whole path from the TrainJob to the pod, on the real control plane.

Each edit here is one a team member with the built-in `edit` role (or the steps'
ServiceAccount) can make to the objects between the TrainJob and the container: a child Job's
template, another runtime-patch entry, a pod's labels, a Job's owner references. Where no
policy refuses it (these run where none is installed), the audit flags it (issue 23).
Also `dispatch-audit --all`: every managed TrainJob of a namespace in one run (issue 24).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.environment import host_env
from tests.support.lifecycle import (
    BIN,
    DEADLINE,
    TRAINER,
    Kubelet,
    Step,
    add_foreign_admission_entry,
    as_dict,
    copy_of,
    rank_made_again,
    read_jobset,
    read_trainjob,
    run_stage,
    start_args,
)

pytestmark = [pytest.mark.integration, pytest.mark.policies("none")]


def started(step: Step, namespace: str, runtime: str, job_id: str) -> str:
    result = step("start", *start_args(namespace, runtime, job_id))
    assert result.code == 0, result.error
    return str(result.result["name"])


def opened(step: Step, kubelet: Kubelet, namespace: str, runtime: str, job_id: str) -> str:
    name = started(step, namespace, runtime, job_id)
    assert run_stage(step, "unsuspend", "--namespace", namespace, "--name", name).code == 0
    kubelet.wait_for_pod(name, restart=0, admission=1)
    return name


def trainer_jobs(api: client.ApiClient, namespace: str, name: str) -> list[dict[str, Any]]:
    """The TrainJob's trainer child Jobs, once JobSet has made them."""

    def made() -> list[dict[str, Any]] | None:
        listed = as_dict(
            client.BatchV1Api(api).list_namespaced_job(
                namespace, label_selector=f"{wire.JOBSET_NAME_KEY}={name}"
            )
        )
        jobs = [
            job
            for job in listed["items"]
            if job["metadata"]["labels"].get(wire.ANCESTOR_LABEL) == wire.ANCESTOR_TRAINER
        ]
        return jobs or None

    return wait_until(made, what=f"the trainer Jobs of {name}", timeout=DEADLINE)


def audited(step: Step, namespace: str, name: str) -> str:
    """The audit's error line, which must be a flag (exit 7)."""
    result = run_stage(step, "audit", "--namespace", namespace, "--name", name)
    assert result.code == 7, (result.code, result.error)
    return result.error


def test_j_set_on_a_suspended_child_jobs_template_is_flagged_before_it_runs(
    step: Step, namespace: str, torch_runtime: str, api_client: client.ApiClient
) -> None:
    name = started(step, namespace, torch_runtime, "job-j")
    (job, *_) = trainer_jobs(api_client, namespace, name)
    edit = {"spec": {"template": {"metadata": {"labels": {wire.RESTART_ATTEMPT_KEY: "500"}}}}}
    client.BatchV1Api(api_client).patch_namespaced_job(job["metadata"]["name"], namespace, edit)
    error = audited(step, namespace, name)
    assert f"Job {job['metadata']['name']} pod template label" in error
    assert "is 500, not the Job's own 0" in error


def test_a_pod_taken_out_of_the_label_selector_is_still_audited(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    name = opened(step, kubelet, namespace, torch_runtime, "hidden")
    pod = kubelet.wait_for_pod(name, restart=0, admission=1)
    pod_name = pod["metadata"]["name"]
    core = client.CoreV1Api(api_client)
    core.patch_namespaced_pod(
        pod_name, namespace, {"metadata": {"labels": {wire.JOBSET_NAME_KEY: None}}}
    )
    core.patch_namespaced_pod(
        pod_name, namespace, {"metadata": {"annotations": {wire.ADMISSION_ANNOTATION: "9"}}}
    )
    error = audited(step, namespace, name)
    assert f"pod {pod_name} runs with A = 9" in error
    annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
    assert annotations[wire.FOREIGN_ANNOTATION] == wire.FOREIGN


def test_a_second_runtime_patch_entry_setting_a_is_flagged(
    step: Step, namespace: str, torch_runtime: str, custom: client.CustomObjectsApi
) -> None:
    name = started(step, namespace, torch_runtime, "second-entry")
    add_foreign_admission_entry(custom, namespace, name, admission="700")
    error = audited(step, namespace, name)
    assert "(manager someone.example/tweaks) sets pod template metadata annotation" in error


def test_a_child_job_whose_owner_references_were_removed_is_flagged(
    step: Step, namespace: str, torch_runtime: str, api_client: client.ApiClient
) -> None:
    name = started(step, namespace, torch_runtime, "orphan")
    (job, *_) = trainer_jobs(api_client, namespace, name)
    job_name = job["metadata"]["name"]
    batch = client.BatchV1Api(api_client)
    batch.patch_namespaced_job(
        job_name,
        namespace,
        [{"op": "remove", "path": "/metadata/ownerReferences"}],
    )
    batch.patch_namespaced_job(
        job_name, namespace, {"metadata": {"labels": {wire.JOBSET_NAME_KEY: None}}}
    )
    error = audited(step, namespace, name)
    assert f"Job {job_name} runs the trainer but no JobSet owns it" in error


def audit_all(control_plane: Cluster, namespace: str) -> tuple[int, list[dict[str, Any]]]:
    """`dispatch-audit --all`: its exit code and its result lines, one per TrainJob."""
    done = subprocess.run(
        [
            str(BIN / "dispatch-audit"),
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--namespace",
            namespace,
            "--all",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=host_env(),
    )
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()]


def test_audit_all_flags_the_reset_job_and_records_the_others(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
    custom: client.CustomObjectsApi,
    control_plane: Cluster,
) -> None:
    clean = opened(step, kubelet, namespace, torch_runtime, "all-clean")
    reset = opened(step, kubelet, namespace, torch_runtime, "all-reset")
    never_opened = started(step, namespace, torch_runtime, "all-held")
    pod = kubelet.wait_for_pod(reset, restart=0, admission=1)
    client.CoreV1Api(api_client).patch_namespaced_pod(
        pod["metadata"]["name"],
        namespace,
        {"metadata": {"annotations": {wire.ADMISSION_ANNOTATION: None}}},
    )

    code, lines = audit_all(control_plane, namespace)
    assert code == 7
    by_name = {line["name"]: line for line in lines}
    assert set(by_name) == {clean, reset, never_opened}, "one line per managed TrainJob"
    assert by_name[reset]["findings"] >= 1
    assert (by_name[clean]["findings"], by_name[clean]["recorded"]) == (0, True)
    assert by_name[never_opened]["findings"] == 0
    flags = {
        name: read_trainjob(custom, namespace, name)["metadata"]["annotations"].get(
            wire.FOREIGN_ANNOTATION
        )
        for name in by_name
    }
    assert flags == {clean: None, reset: wire.FOREIGN, never_opened: None}
    recorded = read_trainjob(custom, namespace, clean)["metadata"]["annotations"]
    assert '"r":1' in recorded[wire.LAST_EXECUTION_ANNOTATION], "the clean job's execution"

    code, lines = audit_all(control_plane, namespace)
    assert code == 7, "the flag stays until a person clears it"
    assert {line["name"]: line["recorded"] for line in lines}[clean] is False, "nothing new"


def test_audit_all_sees_a_copy_of_a_job_under_another_name(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    control_plane: Cluster,
) -> None:
    """A running job copied from `kubectl get -o yaml` under a name listed after it runs the
    original's trainer token: `--all` compares the copy's pods with the original's records, as
    `--name` of the original does, not with the last listed's alone (issue 43, part 4)."""
    original = opened(step, kubelet, namespace, torch_runtime, "copied")
    assert audit_all(control_plane, namespace)[0] == 0, "records the original's JobSet"
    live = read_trainjob(custom, namespace, original)
    copy_name = f"zz-{original}"  # listed after the original: Claims once kept the last only
    custom.create_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", copy_of(live, copy_name)
    )
    kubelet.wait_for_pod(copy_name, restart=0, admission=1)
    copy_uid = read_jobset(custom, namespace, copy_name)["metadata"]["uid"]

    code, lines = audit_all(control_plane, namespace)
    assert code == 7
    findings = {line["name"]: line["findings"] for line in lines}
    assert findings[original] >= 1, "the original sees the copy's pods"
    assert findings[copy_name] >= 1, "the copy is its identity made again (the ledger)"
    cause = read_trainjob(custom, namespace, original)["metadata"]["annotations"]
    assert f"JobSet UID {copy_uid} is not the recorded" in cause[wire.FOREIGN_CAUSE_ANNOTATION]


def test_a_rank_scaled_away_and_back_is_flagged_whichever_slot(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    """Issue 43, part 2: a two-rank job's trainer Job scaled 2 -> 1 -> 2 makes rank 1 again
    under the same A and J; the audit recorded every slot, so rank 1 is found, not only the
    lowest slot; the Job's spec while scaled is not its JobSet template's."""
    result = step("start", *start_args(namespace, torch_runtime, "scaled", num_nodes="2"))
    assert result.code == 0, result.error
    name = str(result.result["name"])
    assert run_stage(step, "unsuspend", "--namespace", namespace, "--name", name).code == 0
    wait_until(
        lambda: len(kubelet.pods(name, restart=0)) == 2 or None,
        what=f"both ranks of {name}",
        timeout=DEADLINE,
    )
    assert run_stage(step, "audit", "--namespace", namespace, "--name", name).code == 0
    record = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
    assert '"node/0/0":' in record[wire.LAST_EXECUTION_ANNOTATION]
    assert '"node/0/1":' in record[wire.LAST_EXECUTION_ANNOTATION]
    client.BatchV1Api(api_client).patch_namespaced_job(
        f"{name}-node-0", namespace, {"spec": {"backoffLimit": 2}}
    )
    assert f"Job {name}-node-0 spec.backoffLimit is 2, not 0" in audited(step, namespace, name)
    client.BatchV1Api(api_client).patch_namespaced_job(
        f"{name}-node-0", namespace, {"spec": {"backoffLimit": 0}}
    )
    first, again = rank_made_again(api_client, kubelet, name)
    error = audited(step, namespace, name)
    assert (
        f"pod {again['metadata']['name']} began an execution with R = 1 in slot node/0/1" in error
    )
    assert f"pod UID {first['metadata']['uid']} already had" in error
