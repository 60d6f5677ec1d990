"""The shipped admission controller as it runs on this machine's one node.

The node has no pod network, so each replica uses the host network: two replicas cannot
share a port, so the shipped Deployment becomes one one-replica Deployment per replica, each
on its own loopback port, with its probes sent to 127.0.0.1 (the pod IP of a host-network
pod is the node's own address, which nothing here may send to). The namespace cannot
enforce Pod Security restricted, which forbids the host network.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Final

from kubernetes import client

from tests.cluster import kube
from tests.support.controller_identity import CONTROLLER, DEPLOYMENT, RBAC
from tests.support.executions import on_the_node
from tests.support.shipped import documents

SELECTOR: Final = "app.kubernetes.io/name=dispatch-admission-controller"


def replica_on_the_node(
    shipped: dict[str, Any],
    suffix: str,
    *,
    port: int,
    api: int,
    image: str,
    namespaces: Sequence[str] = (),
) -> dict[str, Any]:
    """One replica of the shipped Deployment, on the host network at 127.0.0.1:`port`."""
    deployment = copy.deepcopy(shipped)
    deployment["metadata"]["name"] += f"-{suffix}"
    spec = deployment["spec"]
    spec["replicas"] = 1
    for labels in (spec["selector"]["matchLabels"], spec["template"]["metadata"]["labels"]):
        labels["app.kubernetes.io/instance"] = suffix
    pod = spec["template"]["spec"] = on_the_node(spec["template"]["spec"], api)
    (container,) = pod["containers"]
    container["image"] = image
    container["args"] = [
        f"--address=127.0.0.1:{port}",
        *(f"--namespaces={namespace}" for namespace in namespaces),
    ]
    container["ports"] = [{"name": "http", "containerPort": port}]
    for probe in ("livenessProbe", "readinessProbe"):
        container[probe]["httpGet"]["host"] = "127.0.0.1"
    return deployment


def shipped_deployment() -> dict[str, Any]:
    """The Deployment of pipelines/controller/."""
    (deployment,) = [d for d in documents(DEPLOYMENT) if d["kind"] == "Deployment"]
    return deployment


def install(api: client.ApiClient, *, image: str, api_port: int, ports: Sequence[int]) -> str:
    """pipelines/controller/ on the node, one replica per port, gating every namespace; the
    namespace it is in."""
    (namespace,) = documents(CONTROLLER / "00-namespace.yaml")
    namespace = copy.deepcopy(namespace)
    labels = namespace["metadata"]["labels"]
    for key in [key for key in labels if key.startswith("pod-security.kubernetes.io/")]:
        del labels[key]
    name = str(namespace["metadata"]["name"])
    kube.apply(api, namespace, namespace=None)
    for document in documents(RBAC):
        kube.apply(api, document, namespace=name)
    for index, port in enumerate(ports):
        replica = replica_on_the_node(
            shipped_deployment(), "ab"[index], port=port, api=api_port, image=image
        )
        kube.apply(api, replica, namespace=name)
    return name
