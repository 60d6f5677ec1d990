"""The audit checks what actually ran: an execution rerun by recreating a child Job, and a
live JobSet holding a setting the runtime rules refuse (here a TTL, on a TrainJob made
without dispatch-start's checks)."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until
from tests.support.lifecycle import DEADLINE, TRAINER, Kubelet, Step, StepRun, run_stage, start_args
from tests.support.requests import trainjob_body
from tests.support.shipped import TORCH_RUNTIME, documents

pytestmark = pytest.mark.integration


# Where the path guard is installed nobody but JobSet and the garbage collector may delete the
# child Job (keep-job, test_policies_path.py): the rerun is what the audit must still catch on
# a cluster without the policies.
@pytest.mark.policies("none")
def test_a_child_job_deleted_by_hand_reruns_the_execution_and_is_flagged(
    step: Step, kubelet: Kubelet, namespace: str, torch_runtime: str, api_client: client.ApiClient
) -> None:
    started = step("start", *start_args(namespace, torch_runtime, "rerun"))
    assert started.code == 0, started.error
    name = started.result["name"]
    target = ["--namespace", namespace, "--name", name]
    assert run_stage(step, "unsuspend", *target).code == 0
    first = kubelet.wait_for_pod(name, restart=0, admission=1)
    assert run_stage(step, "audit", *target).code == 0, "records the execution"

    client.BatchV1Api(api_client).delete_namespaced_job(
        f"{name}-node-0", namespace, propagation_policy="Background"
    )

    def rerun() -> dict[str, object] | None:  # JobSet recreates the Job: same A, same J
        pod = kubelet.wait_for_pod(name, restart=0, admission=1)
        return pod if pod["metadata"]["uid"] != first["metadata"]["uid"] else None

    wait_until(rerun, what="JobSet to recreate the deleted Job", timeout=DEADLINE)
    audited = run_stage(step, "audit", *target)
    assert audited.code == 7
    assert "began an execution with R = 1" in audited.error


@pytest.fixture
def runtime_with_ttl(custom: client.CustomObjectsApi, namespace: str) -> Iterator[str]:
    """The shipped torch runtime with a JobSet TTL, which start refuses."""
    runtime = copy.deepcopy(documents(TORCH_RUNTIME)[0])
    runtime["metadata"] = {"name": f"{namespace}-ttl"}
    runtime["spec"]["template"]["spec"]["ttlSecondsAfterFinished"] = 30
    custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
    yield str(runtime["metadata"]["name"])
    custom.delete_cluster_custom_object(
        *TRAINER, "clustertrainingruntimes", runtime["metadata"]["name"]
    )


def test_a_jobset_ttl_the_rules_refuse_is_flagged_on_the_live_jobset(
    step: Step, namespace: str, runtime_with_ttl: str, custom: client.CustomObjectsApi
) -> None:
    refused = step("start", *start_args(namespace, runtime_with_ttl, "ttl"))
    assert refused.code == 6
    assert "spec.template.spec.ttlSecondsAfterFinished: must be unset" in refused.error
    body = trainjob_body("ttl", runtime=runtime_with_ttl, namespace=namespace)
    custom.create_namespaced_custom_object(*TRAINER, namespace, "trainjobs", body)
    name = body["metadata"]["name"]
    target = ["--namespace", namespace, "--name", name]

    def audited_with_jobset() -> StepRun | None:
        run = run_stage(step, "audit", *target)
        return run if run.code == 7 else None

    audited = wait_until(
        audited_with_jobset, what=f"the audit of {name}'s JobSet", timeout=DEADLINE
    )
    assert f"JobSet {name} spec.ttlSecondsAfterFinished: must be unset" in audited.error
    annotations = custom.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
    assert isinstance(annotations, dict)
    assert annotations["metadata"]["annotations"][wire.FOREIGN_ANNOTATION] == "true"


# Where the path guard is installed it refuses this edit (job-spec, test_policies_path.py): the
# audit must still flag it on a cluster without the policies.
@pytest.mark.policies("none")
def test_a_child_job_edited_by_hand_is_flagged(
    step: Step, kubelet: Kubelet, namespace: str, torch_runtime: str, api_client: client.ApiClient
) -> None:
    started = step("start", *start_args(namespace, torch_runtime, "edited-job"))
    assert started.code == 0, started.error
    name = started.result["name"]
    target = ["--namespace", namespace, "--name", name]
    assert run_stage(step, "unsuspend", *target).code == 0
    kubelet.wait_for_pod(name, restart=0, admission=1)
    client.BatchV1Api(api_client).patch_namespaced_job(
        f"{name}-node-0", namespace, {"spec": {"backoffLimit": 2}}
    )
    audited = run_stage(step, "audit", *target)
    assert audited.code == 7
    assert f"Job {name}-node-0 spec.backoffLimit: must be 0, not 2" in audited.error
