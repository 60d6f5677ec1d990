"""Plain mode on the real control plane: start, Open, a JobSet restart, hold, Release."""

from __future__ import annotations

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.rules.trainjob import admission_in_patch
from tests.integration.conftest import with_policies
from tests.support.lifecycle import (
    Execution,
    Kubelet,
    Step,
    read_trainjob,
    run_stage,
    start_args,
    wait_for_drained_jobset,
)

pytestmark = pytest.mark.integration


def assert_increasing(executions: list[Execution]) -> None:
    epochs = [e.epoch for e in executions]
    assert epochs == sorted(set(epochs)), f"epochs must strictly increase: {epochs}"
    attempts = [e.attempt for e in executions]
    assert len(set(attempts)) == len(attempts), f"attempts must be unique: {attempts}"


@with_policies("all", "guard", "none")
def test_release_after_restart_and_hold_gives_r_3(
    installed: str,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
) -> None:
    started = step("start", *start_args(namespace, torch_runtime, "plain-1"))
    assert started.code == 0, started.error
    name = started.result["name"]
    target = ["--namespace", namespace, "--name", name]

    opened = run_stage(step, "unsuspend", *target)
    assert opened.code == 0, opened.error
    assert opened.result["admission"] == 1
    pod = kubelet.wait_for_pod(name, restart=0, admission=1)
    first = kubelet.execute(pod)
    assert (first.admission, first.restart, first.r) == (1, 0, 1)
    assert first.epoch == 3_000_007_000_001

    kubelet.set_phase(pod, "Failed")  # the real JobSet controller restarts: J = 1
    pod = kubelet.wait_for_pod(name, restart=1, admission=1)
    restarted = kubelet.execute(pod)
    assert (restarted.admission, restarted.restart, restarted.r) == (1, 1, 2)

    held = run_stage(step, "hold", *target)
    assert held.code == 0, held.error
    assert held.result["changed"] is True
    recorded = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
    assert recorded[wire.HIGHEST_RESTART_ANNOTATION] == "1", "the hold records J, no audit run"
    assert step("hold", *target).result["changed"] is False, "a second hold is a no-op"
    wait_for_drained_jobset(api_client, namespace, name)

    released = run_stage(step, "unsuspend", *target)
    assert released.code == 0, released.error
    assert released.result["admission"] == 2
    third = kubelet.execute(kubelet.wait_for_pod(name, restart=1, admission=2))
    assert (third.admission, third.restart, third.r) == (2, 1, 3)
    assert_increasing([first, restarted, third])

    job = read_trainjob(custom, namespace, name)
    annotations = job["metadata"]["annotations"]
    assert annotations[wire.ADMISSION_FLOOR_ANNOTATION] == "2"
    assert annotations[wire.JOBSET_UID_ANNOTATION], "the first raise records the JobSet UID"


def test_same_start_is_a_no_op_and_a_different_one_is_refused(
    step: Step, namespace: str, torch_runtime: str, custom: client.CustomObjectsApi
) -> None:
    first = step("start", *start_args(namespace, torch_runtime, "idem-1"))
    assert (first.code, first.result["outcome"]) == (0, "created"), first.error
    again = step("start", *start_args(namespace, torch_runtime, "idem-1"))
    assert (again.code, again.result["outcome"]) == (0, "exists"), again.error
    assert again.result["uid"] == first.result["uid"]
    other = step(
        "start", *start_args(namespace, torch_runtime, "idem-2", name=first.result["name"])
    )
    assert other.code == 6
    assert "exists with another identity" in other.error
    job = read_trainjob(custom, namespace, first.result["name"])
    assert job["metadata"]["annotations"][wire.JOB_ID_ANNOTATION] == "idem-1"


@with_policies("all")
def test_trainers_time_stamp_on_our_entry_is_neither_refused_nor_a_raise(
    installed: str, step: Step, namespace: str, torch_runtime: str, custom: client.CustomObjectsApi
) -> None:
    """Trainer's mutating webhook stamps `time` on each runtime-patch entry a request adds or
    changes, this project's included (v2.2.1 and v2.3.0 alike): the guard lets the stamp
    through, and raise-on-open does not take the opening for one without a raise: one
    opening, one raise."""
    started = step("start", *start_args(namespace, torch_runtime, "stamped"))
    assert started.code == 0, started.error
    name = started.result["name"]

    def ours() -> dict[str, object]:
        patches = read_trainjob(custom, namespace, name)["spec"]["runtimePatches"]
        entry: dict[str, object] = next(p for p in patches if p["manager"] == wire.PATCH_MANAGER)
        return entry

    created = ours()
    assert "time" in created, created
    opened = run_stage(step, "unsuspend", "--namespace", namespace, "--name", name)
    assert opened.code == 0, opened.error
    assert opened.result["admission"] == 1
    job = read_trainjob(custom, namespace, name)
    assert admission_in_patch(job) == 1
    assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "1"
    assert "time" in ours()
