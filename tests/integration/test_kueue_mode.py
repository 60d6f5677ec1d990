"""Kueue mode with the real Kueue: admit and approve before every admission."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until
from tests.integration.conftest import with_policies
from tests.support.kueue_objects import KUEUE, KueueSetup, condition
from tests.support.lifecycle import (
    DEADLINE,
    TRAINER,
    Kubelet,
    Step,
    admit_and_approve,
    admit_wait,
    read_trainjob,
    start_args,
)

pytestmark = pytest.mark.integration


@with_policies("all", "guard")
def test_readmission_after_preemption_gives_r_2(
    installed: str,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    kueue.install(cpu="1", priorities={f"{namespace}-low": 10, f"{namespace}-high": 1000})
    queued = kueue.queued_request()
    victim = step(
        "start",
        *start_args(
            namespace, torch_runtime, "victim", priority_class=f"{namespace}-low", **queued
        ),
    )
    assert victim.code == 0, victim.error
    name = victim.result["name"]
    assert read_trainjob(custom, namespace, name)["spec"]["suspend"] is True

    first_admission = admit_and_approve(step, namespace, name, kueue.check)
    assert first_admission.result["admission"] == 1
    first = kubelet.execute(kubelet.wait_for_pod(name, restart=0, admission=1))
    assert (first.admission, first.restart, first.r) == (1, 0, 1)
    assert read_trainjob(custom, namespace, name)["spec"]["suspend"] is False, "Kueue unsuspends it"

    preemptor = step(
        "start",
        *start_args(
            namespace, torch_runtime, "preemptor", priority_class=f"{namespace}-high", **queued
        ),
    )
    assert preemptor.code == 0, preemptor.error

    def preempted() -> bool | None:
        workload = kueue.workload_of(victim.result["uid"])
        return True if workload and condition(workload, "Evicted") == "True" else None

    wait_until(preempted, what=f"Kueue to preempt {name}", timeout=DEADLINE)
    admit_and_approve(step, namespace, preemptor.result["name"], kueue.check)
    kubelet.wait_for_pod(preemptor.result["name"], restart=0, admission=1)

    # The preemptor finishes its work and goes away: the victim is admitted again.
    custom.delete_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", preemptor.result["name"]
    )
    second_admission = admit_and_approve(step, namespace, name, kueue.check)
    assert second_admission.result["admission"] == 2
    assert second_admission.result["reservedAt"] >= first_admission.result["reservedAt"]
    second = kubelet.execute(kubelet.wait_for_pod(name, restart=0, admission=2))
    assert (second.admission, second.restart, second.r) == (2, 0, 2)
    assert second.epoch > first.epoch
    assert second.attempt != first.attempt


def test_approve_refuses_a_reservation_that_changed_after_admit(
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    kueue.install(cpu="1")
    started = step(
        "start",
        *start_args(namespace, torch_runtime, "changed", **kueue.queued_request()),
    )
    assert started.code == 0, started.error
    name = started.result["name"]
    admitted = step("admit", *admit_wait(namespace, name, kueue.check, timeout=DEADLINE))
    assert admitted.code == 0, admitted.error
    workload = admitted.result["workload"]
    # The reservation admit raised A for is gone: deactivate, then reactivate the Workload.
    for active in (False, True):
        custom.patch_namespaced_custom_object(
            *KUEUE, namespace, "workloads", workload, {"spec": {"active": active}}
        )
    approved = step(
        "approve",
        "--namespace",
        namespace,
        "--check",
        kueue.check,
        "--workload",
        workload,
        "--workload-resource-version",
        admitted.result["workloadResourceVersion"],
        "--admission",
        str(admitted.result["admission"]),
    )
    assert approved.code == 3
    assert "changed since admit read it" in approved.error
    live = kueue.workload_of(started.result["uid"])
    assert live is not None
    states = [c["state"] for c in live["status"]["admissionChecks"] if c["name"] == kueue.check]
    assert states == ["Pending"], "nothing was approved"
    assert read_trainjob(custom, namespace, name)["spec"]["suspend"] is True


def test_admit_waits_for_a_reservation_that_comes_later(
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    kueue.install(cpu="1")
    queued = kueue.queued_request()
    holder = step("start", *start_args(namespace, torch_runtime, "holder", **queued))
    assert holder.code == 0, holder.error
    waiter = step("start", *start_args(namespace, torch_runtime, "waiter", **queued))
    assert waiter.code == 0, waiter.error
    with ThreadPoolExecutor(1) as pool:
        # Started at once, before Kueue has reserved (or even listed checks) for the waiter.
        pending = pool.submit(
            step,
            "admit",
            *admit_wait(namespace, waiter.result["name"], kueue.check, timeout=DEADLINE),
        )

        def queued_without_quota() -> bool | None:
            workload = kueue.workload_of(waiter.result["uid"])
            return True if workload and condition(workload, "QuotaReserved") == "False" else None

        wait_until(queued_without_quota, what="the waiter to queue for quota", timeout=DEADLINE)
        assert not pending.done(), f"admit gave up early: {pending.result().error}"
        custom.delete_namespaced_custom_object(
            *TRAINER, namespace, "trainjobs", holder.result["name"]
        )
        admitted = pending.result(timeout=DEADLINE + 30)
    assert admitted.code == 0, admitted.error
    assert admitted.result["admission"] == 1
    job = read_trainjob(custom, namespace, waiter.result["name"])
    assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "1"
