"""Kueue mode on the real node: admission, preemption by a higher-priority job and
re-admission, each execution's R read from what its own process printed."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.cluster.wait import wait_until
from tests.support.executions import (
    DEADLINE,
    FINISHES,
    IDENTITY,
    PREEMPTOR,
    RUNS,
    expected,
    printed,
    start_flags,
)
from tests.support.kueue_objects import KueueSetup, condition
from tests.support.lifecycle import Step, admit_and_approve

pytestmark = [pytest.mark.node, pytest.mark.cluster]


def queued(kueue: KueueSetup, priority: str) -> list[str]:
    request = kueue.queued_request()
    return [
        *("--queue", request["queue"], "--resources-per-node", request["resources_per_node"]),
        *("--priority-class", priority),
    ]


def test_preemption_and_readmission_print_r_1_then_2(
    step: Step,
    namespace: str,
    real_node_runtime: str,
    kueue: KueueSetup,
    api_client: client.ApiClient,
) -> None:
    low, high = f"{namespace}-low", f"{namespace}-high"
    kueue.install(cpu="1", priorities={low: 10, high: 1000})
    core = client.CoreV1Api(api_client)
    victim = step(
        "start", *start_flags(namespace, real_node_runtime, *queued(kueue, low), train=RUNS)
    )
    assert victim.code == 0, victim.error
    name = victim.result["name"]
    admit_and_approve(step, namespace, name, kueue.check)
    first = printed(core, namespace, name, restart=0, admission=1)
    assert (first.epoch, first.attempt) == expected(1, 0)

    preemptor = step(
        "start",
        *start_flags(
            namespace,
            real_node_runtime,
            *queued(kueue, high),
            train=FINISHES,
            job_id=PREEMPTOR.job_id,
        ),
    )
    assert preemptor.code == 0, preemptor.error

    def evicted() -> bool | None:
        workload = kueue.workload_of(victim.result["uid"])
        return True if workload and condition(workload, "Evicted") == "True" else None

    wait_until(evicted, what=f"Kueue to preempt {name}", timeout=DEADLINE)
    admit_and_approve(step, namespace, preemptor.result["name"], kueue.check)
    ran = printed(core, namespace, preemptor.result["name"], restart=0, admission=1)
    assert (ran.epoch, ran.attempt) == expected(1, 0, PREEMPTOR)

    # The preemptor's command ends: its Workload finishes, the quota frees, the victim is
    # admitted again through the gates, with A raised for the new reservation.
    again = admit_and_approve(step, namespace, name, kueue.check)
    assert again.result["admission"] == 2
    second = printed(core, namespace, name, restart=0, admission=2)
    assert (second.epoch, second.attempt) == expected(2, 0)
    assert second.epoch > first.epoch
    assert second.pod != first.pod
    assert IDENTITY.job_id != PREEMPTOR.job_id
