"""The shipped controller Deployment on the real node, as the shipped ServiceAccount: two
replicas of the step image, one leading; the leader's pod killed, the other takes over."""

from __future__ import annotations

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster import kube
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.executions import DEADLINE, api_port
from tests.support.kueue_objects import KueueSetup
from tests.support.lifecycle import Step, as_dict, read_trainjob, start_queued
from tests.support.node_controller import (
    Listeners,
    lease_holder,
    replica_states,
    shipped_deployment,
    shipped_on_the_node,
)
from tests.support.replicas import admitted
from tests.support.step_identity import StepIdentity

pytestmark = [pytest.mark.node, pytest.mark.cluster, pytest.mark.images]


def test_two_replicas_gate_the_queue_and_the_other_takes_over_from_a_killed_leader(
    controller_identity: StepIdentity,
    control_plane: Cluster,
    api_client: client.ApiClient,
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    step_image_on_node: str,
) -> None:
    kueue.install(cpu="8")
    shipped = shipped_deployment()
    (container,) = shipped["spec"]["template"]["spec"]["containers"]
    assert container["image"] == step_image_on_node, "the image the Deployment names"
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    names = []
    for instance in "ab":
        # --namespaces: the replicas are not awaited at the end (the namespace's deletion is
        # not), so they gate this test's namespace only and no later test's.
        deployment = shipped_on_the_node(
            shipped,
            instance=instance,
            listeners=Listeners.free(),
            api=api_port(control_plane.kubeconfig),
            namespace=namespace,
            args=[f"--namespaces={namespace}"],
        )
        names.append(kube.apply(api_client, deployment, namespace=namespace)["metadata"]["name"])

    def available() -> bool | None:
        ready = [
            as_dict(apps.read_namespaced_deployment(name, namespace))["status"].get(
                "availableReplicas"
            )
            for name in names
        ]
        return ready == [1, 1] or None

    try:
        wait_until(available, what="both replicas Ready on the node", timeout=DEADLINE)
    except AssertionError as e:
        raise AssertionError(f"{e}: {replica_states(core, namespace)}") from None
    first = [
        start_queued(step, namespace, torch_runtime, kueue, f"first-{i}").result["name"]
        for i in range(3)
    ]
    for name in first:
        admitted(custom, namespace, name)
    leader = wait_until(
        lambda: lease_holder(api_client, namespace), what="a leader", timeout=DEADLINE
    )
    pods = as_dict(core.list_namespaced_pod(namespace))["items"]
    assert leader in {pod["metadata"]["name"] for pod in pods}, "the leader is a pod's name"
    core.delete_namespaced_pod(leader, namespace, grace_period_seconds=0)  # SIGKILL
    after = [
        start_queued(step, namespace, torch_runtime, kueue, f"after-{i}").result["name"]
        for i in range(3)
    ]
    for name in after:
        admitted(custom, namespace, name)
    assert lease_holder(api_client, namespace) not in (None, leader)
    for name in first + after:
        annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
        assert annotations[wire.ADMISSION_FLOOR_ANNOTATION] == "1", name
