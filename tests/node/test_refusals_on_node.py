"""What a refusal looks like on the real node: the prologue's own refusals end the container
with 125, its `dispatch:` line in the log and as the termination message; an image without a
shell never starts, with the runtime's own error in the pod's status."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until
from tests.support.executions import DEADLINE, SHOW, pods, start_flags
from tests.support.lifecycle import Step, edit_trainjob, run_stage

pytestmark = [pytest.mark.node, pytest.mark.cluster]


def terminated(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, Any]:
    """The first terminated state of a trainer container (any attempt: JobSet restarts each)."""

    def ended() -> dict[str, Any] | None:
        for pod in pods(core, namespace, name):
            for status in pod.get("status", {}).get("containerStatuses") or []:
                state = status.get("state", {}).get("terminated")
                if state and status.get("name") == wire.TRAINER_CONTAINER:
                    return {**state, "pod": pod["metadata"]["name"]}
        return None

    return wait_until(ended, what=f"a container of {name} to end", timeout=DEADLINE)


def opened(step: Step, namespace: str, runtime: str, *flags: str, **request: str) -> str:
    started = step("start", *start_flags(namespace, runtime, *flags, **request))
    assert started.code == 0, started.error
    name = str(started.result["name"])
    assert run_stage(step, "unsuspend", "--namespace", namespace, "--name", name).code == 0
    return name


@pytest.mark.policies("none")  # the guard refuses a garbled A: here nothing does
def test_a_garbled_a_exits_125_with_the_prologues_line(
    step: Step, namespace: str, real_node_runtime: str, api_client: client.ApiClient
) -> None:
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    started = step("start", *start_flags(namespace, real_node_runtime))
    assert started.code == 0, started.error
    name = started.result["name"]

    def garble_and_open(job: dict[str, Any]) -> None:
        patch = next(p for p in job["spec"]["runtimePatches"] if p["manager"] == wire.PATCH_MANAGER)
        replicated = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        # Octal to a shell: the prologue must refuse it, never read it as 1 or 0. (Removing A
        # from the patch would not reach the pods: JobSet merges pod-template annotations into
        # its Jobs on resume and never removes a key, so they would keep A = 0.)
        replicated["template"]["spec"]["template"]["metadata"]["annotations"][
            wire.ADMISSION_ANNOTATION
        ] = "01"
        job["spec"]["suspend"] = False  # opened by hand, with A garbled in the patch

    edit_trainjob(custom, namespace, name, garble_and_open)

    state = terminated(core, namespace, name)
    assert state["exitCode"] == 125
    assert state["message"].startswith("dispatch: "), state["message"]
    assert "01" in state["message"]
    assert state["message"].strip() in str(core.read_namespaced_pod_log(state["pod"], namespace))


def test_a_missing_work_dir_exits_125_with_the_prologues_line(
    step: Step,
    namespace: str,
    real_node_runtime: str,
    training_images: dict[str, str],
    api_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(api_client)
    # Debian's dash runs the prologue here; busybox's sh in the other tests.
    name = opened(
        step,
        namespace,
        real_node_runtime,
        "--workdir",
        "/srv/missing",
        train=SHOW,
        image=training_images["debian"],
    )
    state = terminated(core, namespace, name)
    assert state["exitCode"] == 125
    line = "dispatch: cannot enter work dir '/srv/missing'"
    assert state["message"].startswith(line), state["message"]
    assert line in str(core.read_namespaced_pod_log(state["pod"], namespace))


def test_an_image_without_a_shell_fails_to_start_with_the_runtimes_error(
    step: Step,
    namespace: str,
    real_node_runtime: str,
    training_images: dict[str, str],
    api_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(api_client)
    name = opened(step, namespace, real_node_runtime, train=SHOW, image=training_images["no-shell"])
    state = terminated(core, namespace, name)
    assert state["reason"] == "StartError", state
    assert "/bin/sh" in state["message"], state["message"]
    assert state["exitCode"] == 128, state  # the runtime's code: the prologue never ran
