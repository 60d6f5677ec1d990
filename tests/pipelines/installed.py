"""dispatch-k8s installed as a cluster admin installs it (docs/install.md), and run through what
was installed: the pinned kubectl with the admin's kubeconfig, the installed ServiceAccounts'
tokens (TokenRequest API), and the installed controller's own command line.

The bundles and the chart are installed as they ship: the path guard's defaults
(pipelines/policies/controllers.yaml) name the identities of upstream's own releases, which the
local control plane runs Trainer, JobSet, Kueue and kube-controller-manager's controllers as
(tests/cluster/identities.py), so no overlay of the admin's is needed.

The installed controller on a plane without a node: its Deployment's pods are made by the
ReplicaSet, admitted under the namespace's Pod Security `restricted`, and stay unscheduled. The
test plays one of them: it runs the pod's own command and arguments, with the pod's Downward API
environment and a token of the pod's ServiceAccount. Only the listen addresses move from
0.0.0.0 to free loopback ports: nothing here listens beyond 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster import kube
from tests.cluster.process import LOOPBACK, free_ports
from tests.cluster.wait import wait_until
from tests.support.environment import host_env
from tests.support.lifecycle import DEADLINE, as_dict
from tests.support.replicas import Replica, end, launch, wait_ready
from tests.support.shells import resolve_downward_env
from tests.support.step_identity import service_account_token, token_kubeconfig

CONTROLLER: Final = ("apps/v1", "Deployment", "dispatch-system", "dispatch-admission-controller")
REVISION: Final = "deployment.kubernetes.io/revision"
# The controller's listeners (its Deployment's args), moved to loopback here.
LISTENERS: Final = ("--address", "--metrics-address")
EVENT_KINDS: Final = {("v1", "Event"), ("events.k8s.io/v1", "Event")}


def account_kubeconfig(
    api: client.ApiClient, admin_kubeconfig: Path, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig holding a token of the installed ServiceAccount `namespace/account` only."""
    return token_kubeconfig(admin_kubeconfig, service_account_token(api, namespace, account), path)


def controller_pods(api: client.ApiClient) -> list[dict[str, Any]]:
    """The pods of the controller Deployment's newest ReplicaSet (its current template), once
    that ReplicaSet has made as many as it wants: all `replicas` on an install; on an upgrade
    the one its surge allows, as the old pods never become ready on a plane without a node."""
    _, _, namespace, name = CONTROLLER
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    deployment = as_dict(apps.read_namespaced_deployment(name, namespace))
    revision = deployment["metadata"].get("annotations", {}).get(REVISION)
    selector = ",".join(
        f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items()
    )
    sets = as_dict(apps.list_namespaced_replica_set(namespace, label_selector=selector))["items"]
    newest = [s for s in sets if s["metadata"].get("annotations", {}).get(REVISION) == revision]
    if not newest or not newest[0]["spec"].get("replicas"):
        return []
    template = newest[0]["metadata"]["labels"]["pod-template-hash"]
    pods = as_dict(
        core.list_namespaced_pod(namespace, label_selector=f"pod-template-hash={template}")
    )["items"]
    return pods if len(pods) == newest[0]["spec"]["replicas"] else []


def wait_for_controller_pods(api: client.ApiClient) -> list[dict[str, Any]]:
    """controller_pods, once the ReplicaSet has made them."""
    return wait_until(
        lambda: controller_pods(api) or None,
        what="the controller Deployment's pods",
        timeout=DEADLINE,
    )


def _on_loopback(args: list[str]) -> tuple[list[str], int]:
    """The Deployment's args with each listener on a free loopback port; the probes' port."""
    moved, ports = [], iter(free_ports(len(LISTENERS)))
    probes = 0
    for arg in args:
        flag, _, _ = arg.partition("=")
        if flag in LISTENERS:
            port = next(ports)
            probes = port if flag == "--address" else probes
            arg = f"{flag}={LOOPBACK}:{port}"
        moved.append(arg)
    assert probes, f"the installed args name no --address: {args}"
    return moved, probes


@contextmanager
def installed_controller(
    api: client.ApiClient, admin_kubeconfig: Path, work: Path
) -> Iterator[Replica]:
    """One pod of the installed controller Deployment's current template, played as a process
    (the module docstring): ready on its probes' port; killed if still running at the end."""
    pod = wait_for_controller_pods(api)[0]
    spec, name = pod["spec"], pod["metadata"]["name"]
    (container,) = spec["containers"]
    assert container["command"] == ["dispatch-admission-controller"], container["command"]
    kubeconfig = account_kubeconfig(
        api,
        admin_kubeconfig,
        pod["metadata"]["namespace"],
        spec["serviceAccountName"],
        work / f"{name}.kubeconfig",
    )
    args, port = _on_loopback(container.get("args") or [])
    env = host_env(resolve_downward_env(container.get("env") or [], pod))
    replica = launch(name, port, work, [*args, "--kubeconfig", str(kubeconfig)], env)
    try:
        wait_ready(replica)
        yield replica
    finally:
        end(replica)


def logged(replica: Replica, message: str) -> list[dict[str, Any]]:
    """The replica's log records with this message."""
    return [r for r in replica.records() if r.get("message") == message]


def ledger_keys(api: client.ApiClient, namespace: str) -> set[kube.Key]:
    """The start ledger's ConfigMaps in `namespace`: made by the steps, kept by design."""
    listed = as_dict(
        client.CoreV1Api(api).list_namespaced_config_map(
            namespace, label_selector=wire.LEDGER_LABEL
        )
    )
    return {("v1", "ConfigMap", namespace, i["metadata"]["name"]) for i in listed["items"]}


def wait_left(
    api: client.ApiClient, before: set[kube.Key], kept: Callable[[kube.Key], bool]
) -> set[kube.Key]:
    """Once only Events and what `kept` allows are left beyond `before` (a namespace finishes
    deleting meanwhile), what is left."""

    def stray(left: set[kube.Key]) -> set[kube.Key]:
        return {k for k in left if (k[0], k[1]) not in EVENT_KINDS and not kept(k)}

    def settled() -> set[kube.Key] | None:
        left = kube.everything(api) - before
        return None if stray(left) else left

    try:
        return wait_until(settled, what="nothing left but Events", timeout=DEADLINE)
    except AssertionError:
        raise AssertionError(sorted(stray(kube.everything(api) - before))) from None
