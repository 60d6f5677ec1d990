"""kube-scheduler preempting a running trainer pod on the real node, the policies installed: the
scheduler deletes its victim as system:kube-scheduler, which the pod guard's pod-delete lets
through (a refused preemption leaves the higher-priority pod pending for good). The victim's
Job counts its failure, JobSet restarts the execution, and J, so R, goes up."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import pytest
from kubernetes import client

from tests.cluster.engine import BUSYBOX
from tests.cluster.node import NODE_NAME, TOLERATION
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.executions import (
    DEADLINE,
    SHOW,
    TRAINER,
    expected,
    node_runtime,
    pods,
    printed,
    start_flags,
)
from tests.support.lifecycle import Step, as_dict, run_stage

pytestmark = [pytest.mark.node, pytest.mark.cluster]
# One unit of a made-up extended resource on the node: a pod that asks for it fits only where
# no other such pod runs, whatever the machine's CPU and memory (both tests' pods ask for it).
SLOT: Final = "dispatch-test.example/slot"
SLOT_PATH: Final = "/status/capacity/" + SLOT.replace("/", "~1")
ASKS: Final = {"requests": {SLOT: "1"}, "limits": {SLOT: "1"}}
REFUSAL: Final = "dispatch-k8s guard"
# Runs until stopped, and fails when stopped, as a trainer killed mid-run does: one that exits
# 0 on SIGTERM (tests.support.executions.RUNS) would make its preempted pod Succeeded, the Job
# complete and the JobSet done, no restart to look at.
STOPPED_FAILS: Final = SHOW + 'trap "exit 143" TERM; while :; do sleep 1; done'


@pytest.fixture
def one_slot(api_client: client.ApiClient) -> Iterator[None]:
    """The node advertises one slot (the documented way: its status, which the kubelet keeps)."""
    core = client.CoreV1Api(api_client)
    patch = [{"op": "add", "path": SLOT_PATH, "value": "1"}]
    core.patch_node_status(NODE_NAME, patch)
    yield
    core.patch_node_status(NODE_NAME, [{"op": "remove", "path": SLOT_PATH}])


@pytest.fixture
def slot_runtime(api_client: client.ApiClient, namespace: str, one_slot: None) -> Iterator[str]:
    """The node runtime, its trainer taking the node's one slot; no priority (0)."""
    runtime = node_runtime()
    runtime["metadata"] = {"name": f"{namespace}-slot"}
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        for container in job["template"]["spec"]["template"]["spec"]["containers"]:
            container["resources"] = ASKS
    custom = client.CustomObjectsApi(api_client)
    custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
    yield str(runtime["metadata"]["name"])
    custom.delete_cluster_custom_object(
        *TRAINER, "clustertrainingruntimes", runtime["metadata"]["name"]
    )


@pytest.fixture
def high_priority(api_client: client.ApiClient, namespace: str) -> Iterator[str]:
    """A PriorityClass above the trainer pods' (none: 0), which may preempt them."""
    scheduling = client.SchedulingV1Api(api_client)
    name = f"{namespace}-high"
    body = client.V1PriorityClass(
        metadata=client.V1ObjectMeta(name=name),
        value=1000,
        preemption_policy="PreemptLowerPriority",
    )
    scheduling.create_priority_class(body)
    yield name
    scheduling.delete_priority_class(name)


def _preemptor(name: str, priority: str) -> client.V1Pod:
    """A short pod of `priority` that needs the slot: once it ends, the slot is free again."""
    container = client.V1Container(
        name="preemptor",
        image=BUSYBOX,
        image_pull_policy="Never",
        command=["/bin/sh", "-c", "sleep 3"],
        resources=client.V1ResourceRequirements(**ASKS),
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            priority_class_name=priority,
            restart_policy="Never",
            host_network=True,
            tolerations=[client.V1Toleration(**TOLERATION)],
            termination_grace_period_seconds=1,
            containers=[container],
        ),
    )


def test_the_scheduler_preempts_a_trainer_pod_and_the_next_execution_has_a_higher_r(
    step: Step,
    namespace: str,
    slot_runtime: str,
    high_priority: str,
    api_client: client.ApiClient,
    control_plane: Cluster,
) -> None:
    assert control_plane.plane is not None  # the node suite runs only on the local cluster
    scheduler_log = control_plane.plane.logs["kube-scheduler"]
    seen = scheduler_log.stat().st_size
    core = client.CoreV1Api(api_client)
    started = step("start", *start_flags(namespace, slot_runtime, train=STOPPED_FAILS))
    assert started.code == 0, started.error
    name = started.result["name"]
    assert run_stage(step, "unsuspend", "--namespace", namespace, "--name", name).code == 0
    first = printed(core, namespace, name, restart=0, admission=1)
    assert (first.epoch, first.attempt) == expected(1, 0)

    core.create_namespaced_pod(namespace, _preemptor("preemptor", high_priority))

    def preempted() -> dict[str, Any] | None:
        victim = next(
            (p for p in pods(core, namespace, name) if p["metadata"]["name"] == first.pod), None
        )
        if victim is not None and not victim["metadata"].get("deletionTimestamp"):
            return None
        preemptor = as_dict(core.read_namespaced_pod("preemptor", namespace))
        return preemptor if preemptor["spec"].get("nodeName") == NODE_NAME else None

    wait_until(preempted, what=f"the scheduler to preempt {first.pod}", timeout=DEADLINE)
    with scheduler_log.open(encoding="utf-8", errors="replace") as log:
        log.seek(seen)
        refused = [line for line in log if REFUSAL in line]
    assert not refused, refused

    # The Job counts the failure (backoffLimit 0, no podFailurePolicy ignoring a disruption):
    # JobSet restarts the execution once the preemptor has ended and freed the slot.
    second = printed(core, namespace, name, restart=1, admission=1)
    assert (second.epoch, second.attempt) == expected(1, 1)
    assert second.epoch > first.epoch
