"""The shipped admission controller as it runs on this machine's one node.

The node has no pod network, so each replica uses the host network: two replicas cannot
share a port, so the shipped Deployment becomes one one-replica Deployment per replica, each
on loopback ports of its own, with its probes sent to 127.0.0.1 (the pod IP of a host-network
pod is the node's own address, which nothing here may send to). The namespace cannot
enforce Pod Security restricted, which forbids the host network. `shipped_on_the_node` is the
one place the shipped Deployment is changed; tests/node/test_shipped_controller_on_node.py
compares the pod that ran with the shipped one and fails on any difference it does not make.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kubernetes import client

from release import dist
from release.dist import DIST
from tests.cluster import kube
from tests.cluster.engines import loopback_api_env
from tests.cluster.node import TOLERATION
from tests.cluster.process import LOOPBACK, free_ports
from tests.support import tools
from tests.support.controller_identity import CONTROLLER, RBAC, SERVICE_ACCOUNT
from tests.support.executions import on_the_node
from tests.support.lifecycle import as_dict
from tests.support.shipped import documents

SELECTOR: Final = "app.kubernetes.io/name=dispatch-admission-controller"
INSTANCE_KEY: Final = "app.kubernetes.io/instance"
BUNDLE: Final = DIST / "install-kueue.yaml"  # the bundle users install; the chart renders alike
# The shipped flags that take a listen address, HOST:PORT.
LISTEN_FLAGS: Final = ("--address", "--metrics-address")
POD_SECURITY: Final = "pod-security.kubernetes.io/"


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Listeners:
    """The loopback ports one replica listens on: the probes (--address) and /metrics."""

    probes: int
    metrics: int

    @classmethod
    def free(cls) -> Listeners:
        probes, metrics = free_ports(2)
        return cls(probes=probes, metrics=metrics)


def on_loopback(args: Sequence[str], listeners: Listeners) -> list[str]:
    """The shipped args with each listen address moved to 127.0.0.1 at its port; every other
    arg as shipped. A listen flag shipped in another form fails here, not on 0.0.0.0."""
    ports = {"--address": listeners.probes, "--metrics-address": listeners.metrics}
    moved, found = [], []
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in LISTEN_FLAGS:
            assert "=" in arg, f"a listen address as --flag=HOST:PORT, not {arg!r}"
            moved.append(f"{flag}={LOOPBACK}:{ports[flag]}")
            found.append(flag)
        else:
            moved.append(arg)
    assert sorted(found) == sorted(LISTEN_FLAGS), f"the shipped listeners: {args}"
    return moved


def shipped_on_the_node(
    shipped: dict[str, Any],
    *,
    instance: str,
    listeners: Listeners,
    api: int,
    namespace: str,
    args: Sequence[str] = (),
) -> dict[str, Any]:
    """The shipped Deployment as this node can run it, changed only where the node forces it.

    One replica (replicas on the host network need ports of their own), named and labelled by
    `instance` and placed in `namespace`; the host network, the node's toleration and the API
    server's loopback address (executions.on_the_node); each listen address on 127.0.0.1, the
    container port named for it and the probes' host to match. `args` are appended to the
    shipped ones: a test that needs its own (and says why) names them here.
    """
    deployment = copy.deepcopy(shipped)
    deployment["metadata"]["name"] += f"-{instance}"
    deployment["metadata"]["namespace"] = namespace
    spec = deployment["spec"]
    spec["replicas"] = 1
    for labels in (spec["selector"]["matchLabels"], spec["template"]["metadata"]["labels"]):
        labels[INSTANCE_KEY] = instance
    pod = spec["template"]["spec"] = on_the_node(spec["template"]["spec"], api)
    (container,) = pod["containers"]
    shipped_ports = {
        arg.split("=", 1)[0]: int(arg.rsplit(":", 1)[1])
        for arg in container["args"]
        if arg.split("=", 1)[0] in LISTEN_FLAGS
    }
    container["args"] = [*on_loopback(container["args"], listeners), *args]
    new_ports = {
        shipped_ports["--address"]: listeners.probes,
        shipped_ports["--metrics-address"]: listeners.metrics,
    }
    for port in container["ports"]:
        port["containerPort"] = new_ports[port["containerPort"]]
    for probe in ("livenessProbe", "readinessProbe"):
        container[probe]["httpGet"]["host"] = LOOPBACK
    return deployment


def without_pod_security(namespace: dict[str, Any]) -> dict[str, Any]:
    """The shipped Namespace without its Pod Security labels: `restricted` forbids the host
    network, which the node forces (a test dry-runs the shipped pod where it is enforced)."""
    namespace = copy.deepcopy(namespace)
    labels = namespace["metadata"].get("labels") or {}
    for key in [key for key in labels if key.startswith(POD_SECURITY)]:
        del labels[key]
    return namespace


def installed_on_the_node(
    objects: Sequence[dict[str, Any]], *, instance: str, listeners: Listeners, api: int
) -> list[dict[str, Any]]:
    """A whole install's objects as this node runs them: its Namespaces without_pod_security,
    its one Deployment as shipped_on_the_node makes it (`instance`, in its own namespace), every
    other object as shipped."""
    ran = []
    for shipped in objects:
        if shipped["kind"] == "Namespace":
            shipped = without_pod_security(shipped)
        elif shipped["kind"] == "Deployment":
            shipped = shipped_on_the_node(
                shipped,
                instance=instance,
                listeners=listeners,
                api=api,
                namespace=shipped["metadata"]["namespace"],
            )
        ran.append(shipped)
    return ran


def pod_of(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    """The pod the Deployment's template makes, named `name`."""
    template = copy.deepcopy(deployment["spec"]["template"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**template["metadata"], "name": name},
        "spec": template["spec"],
    }


def pod_spec_differences(
    api: client.ApiClient, namespace: str, shipped: dict[str, Any], ran: dict[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """How the pod that ran differs from the pod the `shipped` Deployment's template makes in
    `namespace`, both as the API server defaulted and admitted them (the shipped one dry-run)."""
    made = kube.dry_run(api, pod_of(shipped, "as-shipped"), namespace=namespace)
    return differences(comparable(made["spec"]), comparable(ran["spec"]))


def forced(
    found: dict[str, tuple[Any, Any]], ran: dict[str, Any], *, listeners: Listeners, api: int
) -> dict[str, Any]:
    """What `shipped_on_the_node` makes differ, path by path, as the pod `ran` must hold it:
    `found` is pod_spec_differences' (the toleration and env are added to the shipped ones).
    A test asserts the differences that ran are these and no others."""
    return {
        "hostNetwork": True,
        "nodeName": ran["spec"]["nodeName"],
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
    }


def shipped_deployment(bundle: Path = BUNDLE) -> dict[str, Any]:
    """The admission controller's Deployment as `bundle` in dist/ ships it."""
    (deployment,) = [d for d in documents(bundle) if d["kind"] == "Deployment"]
    return deployment


def chart_deployment(work: Path, values: Sequence[str] = ()) -> dict[str, Any]:
    """The admission controller's Deployment as `helm template` renders the chart with its
    default values but `values` (helm's home under `work`)."""
    rendered = tools.template(values, home=work / "helm")
    (deployment,) = [d for d in dist.objects(rendered) if d["kind"] == "Deployment"]
    return deployment


def replica_states(core: client.CoreV1Api, namespace: str) -> list[str]:
    """Each controller pod's phase, container state and log tail: why a replica is not Ready."""
    states = []
    for pod in as_dict(core.list_namespaced_pod(namespace, label_selector=SELECTOR))["items"]:
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        containers = [c.get("state") for c in status.get("containerStatuses") or []]
        try:
            log = str(core.read_namespaced_pod_log(name, namespace, tail_lines=5))
        except client.ApiException as e:
            log = f"(no log: {e.status})"
        states.append(f"{name} {status.get('phase')} {containers} {log}")
    return states


def lease_holder(api: client.ApiClient, namespace: str) -> str | None:
    """The holder of the controller's Lease in `namespace`; None before there is one."""
    leases = client.CoordinationV1Api(api)
    try:
        lease = as_dict(leases.read_namespaced_lease(SERVICE_ACCOUNT, namespace))
    except client.ApiException as e:
        if e.status != 404:
            raise
        return None
    return lease["spec"].get("holderIdentity") or None


def install(api: client.ApiClient, *, api_port: int, listeners: Sequence[Listeners]) -> str:
    """pipelines/controller/ on the node, one replica per listeners, gating every namespace;
    the namespace it is in."""
    (shipped,) = documents(CONTROLLER / "00-namespace.yaml")
    namespace = without_pod_security(shipped)
    name = str(namespace["metadata"]["name"])
    kube.apply(api, namespace, namespace=None)
    for document in documents(RBAC):
        kube.apply(api, document, namespace=name)
    for instance, ports in zip("ab", listeners, strict=False):
        replica = shipped_on_the_node(
            shipped_deployment(), instance=instance, listeners=ports, api=api_port, namespace=name
        )
        kube.apply(api, replica, namespace=name)
    return name
