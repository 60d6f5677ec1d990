"""Executions on the real node: start flags whose training command prints what the execution
is, and the line each execution's own process printed, read back with pods/log."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import yaml
from kubernetes import client

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.rules.identity import Identity
from tests.cluster.engine import BUSYBOX
from tests.cluster.engines import loopback_api_env
from tests.cluster.node import TOLERATION
from tests.cluster.process import LOOPBACK
from tests.cluster.wait import wait_until
from tests.support.lifecycle import as_dict
from tests.support.shipped import TORCH_RUNTIME, documents

TRAINER: Final = (wire.TRAINER_GROUP, wire.TRAINER_VERSION)
NODE_RUNTIME: Final = "dispatch-torch-real-node"
GRACE_SECONDS: Final = 5  # terminationGracePeriodSeconds of the node runtime's pods
DEADLINE: Final = 120.0


def node_runtime() -> dict[str, Any]:
    """The shipped torch runtime, its pods on the real node: host network (the node has no pod
    network), the node's toleration, a short grace, and the log tail as termination message."""
    runtime = copy.deepcopy(documents(TORCH_RUNTIME)[0])
    runtime["metadata"] = {"name": NODE_RUNTIME}
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]["spec"]
        pod["hostNetwork"] = True
        pod["tolerations"] = [TOLERATION]
        pod["terminationGracePeriodSeconds"] = GRACE_SECONDS
        for container in pod["containers"]:
            container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return runtime


IDENTITY: Final = Identity(job_id="on-node", generation=3, submission=7, attempt=1)
PREEMPTOR: Final = Identity(job_id="preemptor", generation=3, submission=7, attempt=1)
# What an execution must print, by (request, A, J); both requests have G = 3, N = 7, attempt 1:
# DISPATCH_EPOCH = G x 10^12 + N x 10^6 + R and DISPATCH_ATTEMPT = <JobID>.<N>.<attempt>.<A>.<J>
# (docs/design.md §2), written out here rather than computed by the product's own
# core/rules/identity.py, so that a wrong formula there fails these tests instead of agreeing.
PRINTED: Final = {
    (IDENTITY, 1, 0): (3_000007_000001, "on-node.7.1.1.0"),
    (IDENTITY, 1, 1): (3_000007_000002, "on-node.7.1.1.1"),
    (IDENTITY, 2, 0): (3_000007_000002, "on-node.7.1.2.0"),
    (IDENTITY, 2, 1): (3_000007_000003, "on-node.7.1.2.1"),
    (PREEMPTOR, 1, 0): (3_000007_000001, "preemptor.7.1.1.0"),
}
# The training command: print what this execution is, fail the first one (J = 0) after a
# moment, and otherwise run until told to stop.
SHOW: Final = 'printf "%s %s\\n" "$DISPATCH_EPOCH" "$DISPATCH_ATTEMPT"; '
TRAIN: Final = (
    SHOW + 'case "$DISPATCH_ATTEMPT" in *.1.0) sleep 3; exit 1;; esac; '
    'trap "exit 0" TERM; while :; do sleep 1; done'
)
RUNS: Final = SHOW + 'trap "exit 0" TERM; while :; do sleep 1; done'  # until told to stop
FINISHES: Final = SHOW + "sleep 2"  # then exits 0: the TrainJob is Complete


@dataclass(frozen=True, slots=True)
class Printed:
    """What one execution's own process printed."""

    pod: str
    epoch: int
    attempt: str


def start_flags(
    namespace: str,
    runtime: str,
    *extra: str,
    train: str = TRAIN,
    job_id: str = IDENTITY.job_id,
    image: str = BUSYBOX,
) -> list[str]:
    """A start request whose training command is `train`, run by /bin/sh."""
    return [
        *("--namespace", namespace, "--runtime-name", runtime, "--job-id", job_id),
        *("--generation", "3", "--submission", "7", "--attempt", "1", "--image", image),
        *("--command", "/bin/sh", "--command", "-c", "--command", train),
        *extra,
    ]


def pods(
    core: client.CoreV1Api, namespace: str, name: str, restart: int | None = None
) -> list[dict[str, Any]]:
    selector = f"{wire.JOBSET_NAME_KEY}={name}"
    if restart is not None:
        selector += f",{wire.RESTART_ATTEMPT_KEY}={restart}"
    listed = as_dict(core.list_namespaced_pod(namespace, label_selector=selector))
    return list(listed["items"])


def execution_logs(
    core: client.CoreV1Api, namespace: str, name: str, *, admission: int, restart: int | None
) -> Iterator[tuple[str, str]]:
    """(pod, log so far) of each pod of the execution with A = `admission` (and J =
    `restart`, if given), until one that has not started."""
    for pod in pods(core, namespace, name, restart):
        annotations = pod["metadata"].get("annotations") or {}
        if annotations.get(wire.ADMISSION_ANNOTATION) != str(admission):
            continue
        try:
            log = core.read_namespaced_pod_log(pod["metadata"]["name"], namespace)
        except client.ApiException:
            return  # not started yet
        yield pod["metadata"]["name"], str(log)


def printed(
    core: client.CoreV1Api, namespace: str, name: str, *, restart: int, admission: int
) -> Printed:
    """The line the training command printed in the pod of attempt `restart` with A."""

    def line() -> Printed | None:
        for pod, log in execution_logs(core, namespace, name, admission=admission, restart=restart):
            words = log.split()
            if len(words) >= 2:
                return Printed(pod, int(words[0]), words[1])
        return None

    what = f"{name}'s execution A={admission} J={restart} to print"
    return wait_until(line, what=what, timeout=DEADLINE)


def expected(admission: int, restart: int, identity: Identity = IDENTITY) -> tuple[int, str]:
    """The epoch and attempt the execution of `identity`'s request with A and J must print."""
    return PRINTED[(identity, admission, restart)]


def api_port(kubeconfig: Path) -> int:
    """The API server's loopback port, from an admin kubeconfig of the local plane."""
    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    url = urlsplit(cluster["server"])
    assert url.hostname == LOOPBACK, "pods on the node reach the API server on loopback"
    assert url.port is not None
    return int(url.port)


def on_the_node(pod: dict[str, Any], port: int) -> dict[str, Any]:
    """A pod spec as it runs on this node: with no Service network, the host network, the
    node's toleration, and the API server's loopback address in the env in-cluster clients
    read. The token, CA and namespace are the ServiceAccount admission plugin's."""
    pod = copy.deepcopy(pod)
    pod["hostNetwork"] = True
    pod["tolerations"] = [TOLERATION]
    for container in pod["containers"]:
        container["env"] = [*(container.get("env") or []), *loopback_api_env(port)]
    return pod
