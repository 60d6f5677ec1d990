"""The project's mechanism on a real node: the kubelet resolves A and J through the Downward
API, the real prologue runs as PID 1 of a real container, and what the training command
itself printed is read back from its log (pods/log)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.engine import BUSYBOX
from tests.cluster.wait import wait_until
from tests.support.executions import (
    DEADLINE,
    IDENTITY,
    TRAIN,
    TRAINER,
    expected,
    node_runtime,
    pods,
    printed,
    start_flags,
)
from tests.support.lifecycle import Step, read_trainjob, run_stage, wait_for_drained_jobset
from tests.support.requests import trainjob_body

pytestmark = [pytest.mark.node, pytest.mark.cluster]


def test_open_a_real_failure_and_a_release_print_r_1_2_3(
    step: Step, namespace: str, real_node_runtime: str, api_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(api_client)
    started = step("start", *start_flags(namespace, real_node_runtime))
    assert started.code == 0, started.error
    name = started.result["name"]
    target = ["--namespace", namespace, "--name", name]
    assert run_stage(step, "unsuspend", *target).code == 0

    first = printed(core, namespace, name, restart=0, admission=1)
    assert (first.epoch, first.attempt) == expected(1, 0)
    # The container exits 1 for real: the Job fails and the real JobSet restarts it, J = 1.
    second = printed(core, namespace, name, restart=1, admission=1)
    assert (second.epoch, second.attempt) == expected(1, 1)

    assert run_stage(step, "hold", *target).code == 0
    wait_for_drained_jobset(api_client, namespace, name)
    custom = client.CustomObjectsApi(api_client)
    released = run_stage(step, "unsuspend", *target)
    assert (released.code, released.result.get("admission")) == (0, 2), released.error
    third = printed(core, namespace, name, restart=1, admission=2)
    assert (third.epoch, third.attempt) == expected(2, 1)
    assert first.epoch < second.epoch < third.epoch
    assert (
        read_trainjob(custom, namespace, name)["metadata"]["annotations"][
            wire.ADMISSION_FLOOR_ANNOTATION
        ]
        == "2"
    )


@pytest.fixture
def restarting_runtime(api_client: client.ApiClient, namespace: str) -> Iterator[str]:
    """The node runtime with the trainer container restarted in place (start refuses it)."""
    runtime = node_runtime()
    runtime["metadata"] = {"name": f"{namespace}-in-place"}
    trainer = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    trainer["template"]["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    trainer["template"]["spec"]["backoffLimit"] = 6  # so the Job outlives the restarts
    custom = client.CustomObjectsApi(api_client)
    custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
    yield str(runtime["metadata"]["name"])
    custom.delete_cluster_custom_object(
        *TRAINER, "clustertrainingruntimes", runtime["metadata"]["name"]
    )


def test_a_container_restarted_in_place_is_flagged_by_the_audit(
    step: Step, namespace: str, restarting_runtime: str, api_client: client.ApiClient
) -> None:
    refused = step("start", *start_flags(namespace, restarting_runtime))
    assert refused.code == 6, "start refuses the runtime"
    body = trainjob_body(  # around start's checks
        IDENTITY.job_id,
        runtime=restarting_runtime,
        namespace=namespace,
        generation=IDENTITY.generation,
        submission=IDENTITY.submission,
        attempt=IDENTITY.attempt,
        image=BUSYBOX,
        command=["/bin/sh", "-c", TRAIN],
    )
    custom = client.CustomObjectsApi(api_client)
    custom.create_namespaced_custom_object(*TRAINER, namespace, "trainjobs", body)
    name = body["metadata"]["name"]
    target = ["--namespace", namespace, "--name", name]
    assert run_stage(step, "unsuspend", *target).code == 0
    core = client.CoreV1Api(api_client)

    def restarted() -> bool | None:  # the first run exits 1: the kubelet restarts it in place
        for pod in pods(core, namespace, name):
            for status in pod.get("status", {}).get("containerStatuses") or []:
                if status.get("name") == wire.TRAINER_CONTAINER and status.get("restartCount"):
                    return True
        return None

    wait_until(restarted, what="the kubelet to restart the container in place", timeout=DEADLINE)
    audited = run_stage(step, "audit", *target)
    assert audited.code == 7
    assert re.search(
        r"container node was restarted in place \d+ times?: each restart", audited.error
    )
