"""The step image as a Kubernetes Job on the real node, as the shipped ServiceAccount with the
shipped RBAC: the step pod reaches the API server on 127.0.0.1 only, raises A, and the
training pod it opens prints R = 1.

The Job's DISPATCH_NAMESPACE is taken out, so the step finds its namespace as kubectl does
in a pod: from the ServiceAccount's mounted namespace file (else it would act on `default`,
where the TrainJob is not, and fail)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kubernetes import client

from tests.cluster import kube
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.executions import (
    DEADLINE,
    api_port,
    expected,
    on_the_node,
    printed,
    start_flags,
)
from tests.support.lifecycle import Step, as_dict
from tests.support.render import JOBS
from tests.support.shipped import documents
from tests.support.step_identity import SERVICE_ACCOUNT, StepIdentity

pytestmark = [pytest.mark.node, pytest.mark.cluster, pytest.mark.images]


def test_the_shipped_unsuspend_job_opens_a_trainjob_that_prints_r_1(
    step: Step,
    namespace: str,
    real_node_runtime: str,
    step_image_on_node: str,
    steps_identity: StepIdentity,
    control_plane: Cluster,
    api_client: client.ApiClient,
) -> None:
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    started = step("start", *start_flags(namespace, real_node_runtime))
    assert started.code == 0, started.error
    name = started.result["name"]

    (shipped,) = documents(JOBS / "unsuspend.yaml")
    job = copy.deepcopy(shipped)
    pod = job["spec"]["template"]["spec"] = on_the_node(
        shipped["spec"]["template"]["spec"], api_port(control_plane.kubeconfig)
    )
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    (container,) = pod["containers"]
    assert container["image"] == step_image_on_node
    next(e for e in container["env"] if e["name"] == "DISPATCH_NAME")["value"] = name
    container["env"] = [e for e in container["env"] if e["name"] != "DISPATCH_NAMESPACE"]
    assert namespace != "default"
    job_name = kube.apply(api_client, job, namespace=namespace)["metadata"]["name"]

    def finished() -> dict[str, Any] | None:
        status = as_dict(batch.read_namespaced_job(job_name, namespace)).get("status") or {}
        return status if status.get("succeeded") or status.get("failed") else None

    done = wait_until(finished, what=f"Job {job_name} to finish", timeout=DEADLINE)
    listed = as_dict(core.list_namespaced_pod(namespace, label_selector=f"job-name={job_name}"))
    (step_pod,) = listed["items"]
    log = str(core.read_namespaced_pod_log(step_pod["metadata"]["name"], namespace))
    assert done.get("succeeded") == 1, log
    assert "Traceback" not in log
    result = next(json.loads(line) for line in log.splitlines() if '"admission"' in line)
    assert result["admission"] == 1
    first = printed(core, namespace, name, restart=0, admission=1)
    assert (first.epoch, first.attempt) == expected(1, 0)
