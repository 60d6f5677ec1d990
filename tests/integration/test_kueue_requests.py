"""Kueue applies an admission check only to the flavors it assigns (Kueue v0.19.2,
`AdmissionChecksForWorkload`): a job that requests nothing is assigned none and would be
admitted without the dispatch check. With the real Kueue: start refuses such a job, admit
tells the two ways to be admitted without the check apart, and every execution that does
run has A raised for it."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until
from tests.integration.conftest import with_policies
from tests.integration.history import History
from tests.support.kueue_objects import KueueSetup, condition
from tests.support.lifecycle import (
    DEADLINE,
    Kubelet,
    Step,
    admit_and_approve,
    read_trainjob,
    start_args,
    start_queued,
)

pytestmark = pytest.mark.integration


def test_a_queued_job_that_requests_nothing_is_refused_by_start(
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    kueue.install(cpu="1")
    refused = step("start", *start_args(namespace, torch_runtime, "empty", queue=kueue.local_queue))
    assert refused.code == 6
    assert "would request no resource" in refused.error
    listed = custom.list_namespaced_custom_object(
        wire.TRAINER_GROUP, wire.TRAINER_VERSION, namespace, "trainjobs"
    )
    assert isinstance(listed, dict)
    assert listed["items"] == [], "nothing is created"


def test_a_job_requesting_only_what_the_queue_does_not_cover_never_runs(
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    kueue.install(cpu="1")  # covers cpu only
    started = step(
        "start",
        *start_args(
            namespace,
            torch_runtime,
            "memory-only",
            queue=kueue.local_queue,
            resources_per_node='{"requests":{"memory":"1Gi"}}',
        ),
    )
    assert started.code == 0, started.error

    def refused_quota() -> str | None:
        workload = kueue.workload_of(started.result["uid"])
        for item in (workload or {}).get("status", {}).get("conditions") or []:
            if item["type"] == "QuotaReserved" and item["status"] == "False":
                return str(item.get("message"))
        return None

    said = wait_until(refused_quota, what="Kueue to refuse quota", timeout=DEADLINE)
    assert "resource memory unavailable in ClusterQueue" in said
    waited = step(
        "admit",
        *("--namespace", namespace, "--name", started.result["name"], "--check", kueue.check),
        *("--wait", "--timeout", "5"),
    )
    assert waited.code == 75, "nothing to act on: it is not admitted"
    assert read_trainjob(custom, namespace, started.result["name"])["spec"]["suspend"] is True


@with_policies("all", "guard")
def test_a_check_scoped_to_one_flavor_is_told_apart_and_no_execution_misses_a_raise(
    installed: str,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
) -> None:
    kueue.install(cpu="1", flavors=("unchecked", "checked"), check_on_flavors=("checked",))
    first = start_queued(step, namespace, torch_runtime, kueue, "first-flavor")
    name = first.result["name"]

    def admitted() -> dict[str, object] | None:
        workload = kueue.workload_of(first.result["uid"])
        return workload if workload and condition(workload, "Admitted") == "True" else None

    wait_until(admitted, what=f"Kueue to admit {name} on the unchecked flavor", timeout=DEADLINE)
    refused = step("admit", "--namespace", namespace, "--name", name, "--check", kueue.check)
    assert refused.code == 6
    assert f"for the flavors it was assigned ({kueue.flavor('unchecked')})" in refused.error
    assert "onFlavors" in refused.error
    if installed == "all":  # Kueue's opening is raised by the API server
        execution = kubelet.execute(kubelet.wait_for_pod(name, restart=0, admission=1))
        assert execution.r == 1

    with History(api_client, namespace, check=kueue.check) as history:
        second = start_queued(step, namespace, torch_runtime, kueue, "second-flavor")
        second_name = second.result["name"]

        def watched() -> bool | None:
            workload = kueue.workload_of(second.result["uid"])
            return (workload is not None and workload["metadata"]["uid"] in history.checks) or None

        # The watches see the reservation before anything is raised for it.
        wait_until(
            watched, what=f"the watches to see {second_name}'s reservation", timeout=DEADLINE
        )
        admission = admit_and_approve(step, namespace, second_name, kueue.check)
    # The checked flavor is gated by the check: one raise per reservation Kueue made. Two cores
    # and five controllers: Kueue may evict the Workload, or make it again, meanwhile.
    records = {raised_for for raised_for, _ in history.raises[second_name]}
    for record in records:
        uid, _, at = record.split(" ")
        assert at in {reserved for reserved, _ in history.checks[uid]}, (record, history.checks)
    reservations = len(records)
    assert admission.result["admission"] == reservations, json.dumps(
        {"admit": admission.result, "raises": history.raises[second_name], "checks": history.checks}
    )
    pod = kubelet.wait_for_pod(second_name, restart=0, admission=reservations)
    assert kubelet.execute(pod).r == reservations
    if installed == "guard":  # Kueue has tried to open the first all along: refused each time
        assert read_trainjob(custom, namespace, name)["spec"]["suspend"] is True
        assert kubelet.pods(name) == []
