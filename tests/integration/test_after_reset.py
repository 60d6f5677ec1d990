"""After a reset of J: the job flagged foreign is not opened again by the project, and once a
person clears the flag the next execution's R is above every R the job had.

The reset is a JobSet deleted by hand while the job runs at J > 0; Trainer rebuilds it at J = 0.
The guard refuses that deletion (test_policies.py), so these run where no policy is installed.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.integration.conftest import wait_suspended
from tests.support.kueue_objects import KueueSetup
from tests.support.lifecycle import (
    Execution,
    Kubelet,
    Step,
    admit_and_approve,
    clear_flag,
    read_trainjob,
    reset_jobset,
    run_stage,
    start_args,
    start_queued,
    wait_for_drained_jobset,
)

pytestmark = [pytest.mark.integration, pytest.mark.policies("none")]


def fail_twice(kubelet: Kubelet, name: str, admission: int) -> list[Execution]:
    """The first execution and two JobSet restarts of it: J = 0, 1, 2."""
    executions = []
    for restart in range(3):
        pod = kubelet.wait_for_pod(name, restart=restart, admission=admission)
        executions.append(kubelet.execute(pod))
        if restart < 2:
            kubelet.set_phase(pod, "Failed")
    return executions


def assert_above(execution: Execution, earlier: list[Execution]) -> None:
    assert execution.r > max(e.r for e in earlier), (execution, earlier)
    assert execution.epoch > max(e.epoch for e in earlier)
    assert execution.attempt not in {e.attempt for e in earlier}


def test_plain_release_after_a_reset_is_refused_then_above_every_r(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
) -> None:
    started = step("start", *start_args(namespace, torch_runtime, "reset-plain"))
    assert started.code == 0, started.error
    name = started.result["name"]
    target = ["--namespace", namespace, "--name", name]
    assert run_stage(step, "unsuspend", *target).code == 0
    earlier = fail_twice(kubelet, name, admission=1)  # R = 1, 2, 3
    assert run_stage(step, "audit", *target).code == 0, "records J = 2 and the execution"

    new_uid = reset_jobset(custom, namespace, name)
    earlier.append(kubelet.execute(kubelet.wait_for_pod(name, restart=0, admission=1)))
    flagged = run_stage(step, "audit", *target)
    assert flagged.code == 7
    assert "below the R = 3 an earlier execution had" in flagged.error

    assert run_stage(step, "hold", *target).code == 0
    wait_for_drained_jobset(api_client, namespace, name)
    refused = run_stage(step, "unsuspend", *target)
    assert refused.code == 7
    assert "is flagged foreign" in refused.error
    assert "J may have been reset" in refused.error, "the cause is named"
    assert read_trainjob(custom, namespace, name)["spec"]["suspend"] is True

    clear_flag(custom, namespace, name, new_uid)
    released = run_stage(step, "unsuspend", *target)
    assert released.code == 0, released.error
    assert released.result["admission"] == 4, "max(A, floor) + highest J (2) - J (0) + 1"
    assert_above(kubelet.execute(kubelet.wait_for_pod(name, restart=0, admission=4)), earlier)


def test_kueue_admission_after_a_reset_is_refused_then_above_every_r(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
) -> None:
    kueue.install(cpu="1")
    started = start_queued(step, namespace, torch_runtime, kueue, "reset-kueue")
    name = started.result["name"]
    target = ["--namespace", namespace, "--name", name]
    admit_and_approve(step, namespace, name, kueue.check)
    earlier = fail_twice(kubelet, name, admission=1)
    assert run_stage(step, "audit", *target).code == 0

    new_uid = reset_jobset(custom, namespace, name)
    assert run_stage(step, "audit", *target).code == 7
    admit = ["--namespace", namespace, "--name", name, "--check", kueue.check]
    refused = step("admit", *admit, "--wait", "--timeout", "600")
    assert refused.code == 7, "refused at once, not after waiting"
    assert "is flagged foreign" in refused.error

    kueue.set_active(started.result["uid"], active=False)
    wait_suspended(custom, namespace, name)
    wait_for_drained_jobset(api_client, namespace, name)
    clear_flag(custom, namespace, name, new_uid)
    kueue.set_active(started.result["uid"], active=True)
    admitted = admit_and_approve(step, namespace, name, kueue.check)
    assert admitted.result["admission"] == 4
    assert_above(kubelet.execute(kubelet.wait_for_pod(name, restart=0, admission=4)), earlier)
