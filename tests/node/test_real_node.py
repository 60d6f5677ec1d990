"""The project's mechanism on a real node: the kubelet resolves A and J through the Downward
API, the real prologue runs as PID 1 of a real container, and what the training command
itself printed is read back from its log (pods/log)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import pytest
from kubernetes import client

from core import wire
from core.identity import Counts, Identity, attempt_token, epoch
from tests.images.engine import BUSYBOX
from tests.integration.conftest import Step
from tests.integration.lifecycle import (
    as_dict,
    read_trainjob,
    run_stage,
    wait_for_drained_jobset,
)
from tests.node.conftest import TRAINER, node_runtime
from tests.requests import trainjob_body
from tests.wait import wait_until

pytestmark = [pytest.mark.node, pytest.mark.cluster]
DEADLINE: Final = 120.0
IDENTITY: Final = Identity(job_id="on-node", generation=3, submission=7, attempt=1)
# The training command: print what this execution is, fail the first one (J = 0) after a
# moment, and otherwise run until told to stop.
TRAIN: Final = (
    'printf "%s %s\\n" "$DISPATCH_EPOCH" "$DISPATCH_ATTEMPT"; '
    'case "$DISPATCH_ATTEMPT" in *.1.0) sleep 3; exit 1;; esac; '
    'trap "exit 0" TERM; while :; do sleep 1; done'
)


@dataclass(frozen=True, slots=True)
class Printed:
    """What one execution's own process printed."""

    pod: str
    epoch: int
    attempt: str


def start_flags(namespace: str, runtime: str, *extra: str) -> list[str]:
    return [
        *("--namespace", namespace, "--runtime-name", runtime, "--job-id", IDENTITY.job_id),
        *("--generation", "3", "--submission", "7", "--attempt", "1", "--image", BUSYBOX),
        *("--command", "/bin/sh", "--command", "-c", "--command", TRAIN),
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


def printed(
    core: client.CoreV1Api, namespace: str, name: str, *, restart: int, admission: int
) -> Printed:
    """The line the training command printed in the pod of attempt `restart` with A."""

    def line() -> Printed | None:
        for pod in pods(core, namespace, name, restart):
            annotations = pod["metadata"].get("annotations") or {}
            if annotations.get(wire.ADMISSION_ANNOTATION) != str(admission):
                continue
            try:
                log = core.read_namespaced_pod_log(pod["metadata"]["name"], namespace)
            except client.ApiException:
                return None  # not started yet
            words = str(log).split()
            if len(words) >= 2:
                return Printed(pod["metadata"]["name"], int(words[0]), words[1])
        return None

    what = f"{name}'s execution A={admission} J={restart} to print"
    return wait_until(line, what=what, timeout=DEADLINE)


def expected(admission: int, restart: int) -> tuple[int, str]:
    counts = Counts(admission=admission, restart=restart)
    return epoch(IDENTITY, counts), attempt_token(IDENTITY, counts)


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


@pytest.mark.policies("none")  # the guard refuses a garbled A: here nothing does
def test_a_garbled_a_exits_125_with_the_prologues_line(
    step: Step, namespace: str, real_node_runtime: str, api_client: client.ApiClient
) -> None:
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    started = step("start", *start_flags(namespace, real_node_runtime))
    assert started.code == 0, started.error
    name = started.result["name"]
    job = read_trainjob(custom, namespace, name)
    patch = next(p for p in job["spec"]["runtimePatches"] if p["manager"] == wire.PATCH_MANAGER)
    replicated = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    # Octal to a shell: the prologue must refuse it, never read it as 1 or 0. (Removing A from
    # the patch would not reach the pods: JobSet merges pod-template annotations into its Jobs
    # on resume and never removes a key, so they would keep A = 0.)
    replicated["template"]["spec"]["template"]["metadata"]["annotations"][
        wire.ADMISSION_ANNOTATION
    ] = "01"
    job["spec"]["suspend"] = False  # opened by hand, with A garbled in the patch
    custom.replace_namespaced_custom_object(
        wire.TRAINER_GROUP, wire.TRAINER_VERSION, namespace, "trainjobs", name, job
    )

    def terminated() -> dict[str, Any] | None:  # any attempt: JobSet restarts each, quickly
        for pod in pods(core, namespace, name):
            for status in pod.get("status", {}).get("containerStatuses") or []:
                state = status.get("state", {}).get("terminated")
                if state:
                    return dict(state)
        return None

    state = wait_until(terminated, what="the container to end", timeout=DEADLINE)
    assert state["exitCode"] == 125
    assert state["message"].startswith("dispatch: "), state["message"]
    assert "01" in state["message"]


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
