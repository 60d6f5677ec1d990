"""Where no policy prevents a reset, the audit flags each one; a clean job audits clean.

Each reset here (a JobSet deleted by hand, a lowered A) is refused by pipelines/policies/
(tests/integration/test_policies.py); these run where none is installed.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until
from tests.support.lifecycle import (
    DEADLINE,
    JOBSET,
    TRAINER,
    Kubelet,
    Step,
    content,
    read_jobset,
    read_trainjob,
    run_stage,
    start_args,
)

pytestmark = [pytest.mark.integration, pytest.mark.policies("none")]


def running_job(step: Step, kubelet: Kubelet, namespace: str, runtime: str, job_id: str) -> str:
    """A started and opened TrainJob whose first pod exists; the raise recorded the JobSet UID."""
    started = step("start", *start_args(namespace, runtime, job_id))
    assert started.code == 0, started.error
    name: str = started.result["name"]
    opened = run_stage(step, "unsuspend", "--namespace", namespace, "--name", name)
    assert opened.code == 0, opened.error
    kubelet.wait_for_pod(name, restart=0, admission=1)
    return name


def test_clean_job_audits_clean_and_writes_nothing(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
) -> None:
    name = running_job(step, kubelet, namespace, torch_runtime, "clean")
    first = step("audit", "--namespace", namespace, "--name", name)
    assert first.code == 0, first.error
    assert (first.result["findings"], first.result["recorded"]) == (0, True)
    annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
    assert '"r":1' in annotations[wire.LAST_EXECUTION_ANNOTATION], "the running execution"
    before = content(read_trainjob(custom, namespace, name))
    audited = step("audit", "--namespace", namespace, "--name", name)
    assert audited.code == 0, audited.error
    assert (audited.result["findings"], audited.result["recorded"]) == (0, False)
    assert content(read_trainjob(custom, namespace, name)) == before


def test_rebuilt_jobset_is_reported_with_the_exact_message(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
) -> None:
    name = running_job(step, kubelet, namespace, torch_runtime, "rebuilt")
    old_uid = read_jobset(custom, namespace, name)["metadata"]["uid"]
    custom.delete_namespaced_custom_object(
        *JOBSET, namespace, "jobsets", name, propagation_policy="Foreground"
    )

    def rebuilt() -> str | None:  # the real Trainer recreates the missing JobSet: J resets
        try:
            uid = str(read_jobset(custom, namespace, name)["metadata"]["uid"])
        except client.ApiException:
            return None
        return uid if uid != old_uid else None

    new_uid = wait_until(rebuilt, what=f"Trainer to rebuild JobSet {name}", timeout=DEADLINE)
    audited = step("audit", "--namespace", namespace, "--name", name)
    assert audited.code == 7
    expected = f"JobSet UID {new_uid} is not the recorded {old_uid}: J may have been reset"
    assert expected in audited.error
    annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
    assert annotations[wire.FOREIGN_ANNOTATION] == "true"
    assert expected in annotations[wire.FOREIGN_CAUSE_ANNOTATION]
    assert annotations[wire.JOBSET_UID_ANNOTATION] == old_uid, "the recorded UID stays"


def test_patch_rewritten_lower_is_reported(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
) -> None:
    name = running_job(step, kubelet, namespace, torch_runtime, "lowered")
    assert run_stage(step, "hold", "--namespace", namespace, "--name", name).code == 0
    spec_before = read_trainjob(custom, namespace, name)["spec"]["trainer"]
    wait_until(
        lambda: _lower_patch(custom, namespace, name),
        what="a lowered runtime patch to be accepted",
        timeout=DEADLINE,
    )
    audited = step("audit", "--namespace", namespace, "--name", name)
    assert audited.code == 7
    assert "is 0, below the admission floor 1" in audited.error
    after = read_trainjob(custom, namespace, name)
    assert after["metadata"]["annotations"][wire.FOREIGN_ANNOTATION] == "true"
    assert after["spec"]["trainer"] == spec_before, "the audit never edits the spec"


def _lower_patch(custom: client.CustomObjectsApi, namespace: str, name: str) -> bool | None:
    """Rewrite A in the patch to 0, as a careless writer would; None to try again."""
    job = read_trainjob(custom, namespace, name)
    for patch in job["spec"]["runtimePatches"]:
        if patch["manager"] == wire.PATCH_MANAGER:
            pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
            pod["template"]["spec"]["template"]["metadata"]["annotations"][
                wire.ADMISSION_ANNOTATION
            ] = "0"
    try:
        custom.replace_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name, job)
    except client.ApiException as e:
        # 409: Trainer wrote status meanwhile; denial: the JobSet is still draining the hold.
        if e.status == 409 or "still active" in str(e.body):
            return None
        raise
    return True


def test_pod_without_admission_annotation_is_reported(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
) -> None:
    name = running_job(step, kubelet, namespace, torch_runtime, "stripped")
    pod = kubelet.wait_for_pod(name, restart=0, admission=1)
    pod_name = pod["metadata"]["name"]
    client.CoreV1Api(api_client).patch_namespaced_pod(
        pod_name, namespace, {"metadata": {"annotations": {wire.ADMISSION_ANNOTATION: None}}}
    )
    audited = step("audit", "--namespace", namespace, "--name", name)
    assert audited.code == 7
    assert pod_name in audited.error
