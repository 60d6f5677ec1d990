"""The shipped controller Deployment's pod on the real node as it ships: the image, command,
args, env, securityContext, probes, resources and volumes of dist/, as the shipped
ServiceAccount, gating every namespace. Only node_controller.shipped_on_the_node changes it,
where the node forces it; the pod that ran is compared with the one the shipped template makes,
and any other difference fails."""

from __future__ import annotations

import json
import re
from typing import Any, Final

import pytest
from kubernetes import client

from tests.cluster import kube
from tests.cluster.engines import loopback_api_env
from tests.cluster.node import TOLERATION
from tests.cluster.process import LOOPBACK
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.controller_identity import metrics_reader
from tests.support.executions import DEADLINE, api_port
from tests.support.lifecycle import as_dict
from tests.support.node_controller import (
    INSTANCE_KEY,
    Listeners,
    lease_holder,
    pod_of,
    replica_states,
    shipped_deployment,
    shipped_on_the_node,
)
from tests.support.replicas import secure_get
from tests.support.step_identity import StepIdentity

pytestmark = [pytest.mark.node, pytest.mark.cluster, pytest.mark.images]
INSTANCE: Final = "as-shipped"
# The ServiceAccount admission plugin names the token volume with a random suffix.
TOKEN_VOLUME: Final = re.compile(r"kube-api-access-[a-z0-9]{5}")


def differences(shipped: Any, ran: Any, path: str = "") -> dict[str, tuple[Any, Any]]:
    """Each path where the two differ: (shipped, ran); lists of equal length item by item."""
    if isinstance(shipped, dict) and isinstance(ran, dict):
        found: dict[str, tuple[Any, Any]] = {}
        for key in sorted(set(shipped) | set(ran)):
            found |= differences(shipped.get(key), ran.get(key), f"{path}.{key}".lstrip("."))
        return found
    if isinstance(shipped, list) and isinstance(ran, list) and len(shipped) == len(ran):
        found = {}
        for index, (one, other) in enumerate(zip(shipped, ran, strict=True)):
            found |= differences(one, other, f"{path}[{index}]")
        return found
    return {} if shipped == ran else {path: (shipped, ran)}


def comparable(spec: dict[str, Any]) -> dict[str, Any]:
    """The pod spec with the token volume's random suffix taken out."""
    return dict(json.loads(TOKEN_VOLUME.sub("kube-api-access", json.dumps(spec))))


def pod_spec_differences(
    api: client.ApiClient, namespace: str, ran: dict[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """How the pod that ran differs from the pod the shipped template makes in `namespace`,
    both as the API server defaulted and admitted them (the shipped one dry-run)."""
    shipped = kube.dry_run(api, pod_of(shipped_deployment(), "as-shipped"), namespace=namespace)
    return differences(comparable(shipped["spec"]), comparable(ran["spec"]))


def test_the_shipped_controller_pod_runs_as_shipped_leads_and_serves_metrics_over_tls(
    controller_identity: StepIdentity,
    control_plane: Cluster,
    api_client: client.ApiClient,
    namespace: str,
    step_image_on_node: str,
) -> None:
    shipped = shipped_deployment()
    (container,) = shipped["spec"]["template"]["spec"]["containers"]
    assert container["image"] == step_image_on_node, "the image the Deployment names"
    listeners, api = Listeners.free(), api_port(control_plane.kubeconfig)
    deployment = shipped_on_the_node(
        shipped, instance=INSTANCE, listeners=listeners, api=api, namespace=namespace
    )
    core = client.CoreV1Api(api_client)
    selector = f"{INSTANCE_KEY}={INSTANCE}"

    def scheduled_pod(ready: bool) -> dict[str, Any] | None:
        for pod in as_dict(core.list_namespaced_pod(namespace, label_selector=selector))["items"]:
            conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or []}
            if pod["spec"].get("nodeName") and (not ready or conditions.get("Ready") == "True"):
                return dict(pod)
        return None

    kube.apply(api_client, deployment, namespace=namespace)
    try:
        pod = wait_until(lambda: scheduled_pod(False), what="the pod scheduled", timeout=DEADLINE)
        found = pod_spec_differences(api_client, namespace, pod)
        assert {path: ran for path, (_, ran) in found.items()} == {
            "hostNetwork": True,
            "nodeName": pod["spec"]["nodeName"],
            "tolerations": [TOLERATION, *(found["tolerations"][0] or [])],
            "containers[0].args[0]": f"--address={LOOPBACK}:{listeners.probes}",
            "containers[0].args[1]": f"--metrics-address={LOOPBACK}:{listeners.metrics}",
            "containers[0].env": [*found["containers[0].env"][0], *loopback_api_env(api)],
            "containers[0].ports[0].containerPort": listeners.probes,
            "containers[0].ports[0].hostPort": listeners.probes,
            "containers[0].ports[1].containerPort": listeners.metrics,
            "containers[0].ports[1].hostPort": listeners.metrics,
            "containers[0].livenessProbe.httpGet.host": LOOPBACK,
            "containers[0].readinessProbe.httpGet.host": LOOPBACK,
        }, f"only what the node forces differs from the shipped pod: {sorted(found)}"
        try:
            pod = wait_until(lambda: scheduled_pod(True), what="the pod Ready", timeout=DEADLINE)
        except AssertionError as e:
            raise AssertionError(f"{e}: {replica_states(core, namespace)}") from None
        name = pod["metadata"]["name"]
        assert (
            wait_until(
                lambda: lease_holder(api_client, namespace), what="a leader", timeout=DEADLINE
            )
            == name
        )
        with metrics_reader(api_client, namespace) as token:

            def scraped() -> bytes | None:
                status, body, _ = secure_get(listeners.metrics, "/metrics", token)
                return body if status == 200 else None

            # A 403 while the binding reaches the authorizer is remembered for a minute.
            body = wait_until(scraped, what="the reader's scrape over TLS", timeout=90)
        assert b"dispatch_admission_leader 1.0" in body
    finally:
        kube.delete(api_client, deployment, namespace=namespace)
        wait_until(
            lambda: not core.list_namespaced_pod(namespace, label_selector=selector).items or None,
            what="the shipped pod gone: it gates every namespace",
            timeout=DEADLINE,
        )
