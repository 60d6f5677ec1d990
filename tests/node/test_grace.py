"""A hold on the real node while the old container ignores SIGTERM for its grace period, then
a release at once. With the shipped runtime (podReplacementPolicy: Failed) the next execution
starts only once the old process has ended; with TerminatingOrFailed (a Job's default without
a podFailurePolicy) the two run side by side. Either way they never share an epoch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until
from tests.support.executions import (
    DEADLINE,
    TRAINER,
    expected,
    node_runtime,
    pods,
    printed,
    start_flags,
)
from tests.support.lifecycle import Step, StepRun, run_stage

pytestmark = [pytest.mark.node, pytest.mark.cluster]
GRACE_SECONDS: Final = 20
# Print, then ignore SIGTERM (the trap only says so): the kubelet kills it at the grace's end.
STUBBORN: Final = (
    'printf "%s %s\\n" "$DISPATCH_EPOCH" "$DISPATCH_ATTEMPT"; '
    "trap 'echo still-running' TERM; while :; do sleep 1; done"
)


@pytest.fixture(params=["Failed", "TerminatingOrFailed"])
def slow_to_stop_runtime(
    request: pytest.FixtureRequest, api_client: client.ApiClient, namespace: str
) -> Iterator[str]:
    """The node runtime with a long termination grace period and the replacement policy."""
    runtime = node_runtime()
    runtime["metadata"] = {"name": f"{namespace}-grace"}
    if request.param != "Failed":
        # Trainer's torch plugin gives the trainer container port 29400, a host port under
        # hostNetwork: on this one node a replacement could not be scheduled beside the old
        # pod whatever the policy (measured: "didn't have free ports"). No ML policy, no port.
        runtime["spec"]["mlPolicy"] = {"numNodes": 1}
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        job["template"]["spec"]["podReplacementPolicy"] = request.param
        pod = job["template"]["spec"]["template"]["spec"]
        pod["terminationGracePeriodSeconds"] = GRACE_SECONDS
    custom = client.CustomObjectsApi(api_client)
    custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
    yield str(runtime["metadata"]["name"])
    custom.delete_cluster_custom_object(
        *TRAINER, "clustertrainingruntimes", runtime["metadata"]["name"]
    )


def _running(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return any("running" in (status.get("state") or {}) for status in statuses)


def _live(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    return {pod["metadata"]["name"]: pod for pod in pods(core, namespace, name)}


def _admission(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("annotations") or {}).get(wire.ADMISSION_ANNOTATION)


def test_a_release_during_the_old_grace_period_never_shares_its_epoch(
    step: Step, namespace: str, slow_to_stop_runtime: str, api_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(api_client)
    runtime = client.CustomObjectsApi(api_client).get_cluster_custom_object(
        *TRAINER, "clustertrainingruntimes", slow_to_stop_runtime
    )
    assert isinstance(runtime, dict)
    (job,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    waits_for_the_old = job["template"]["spec"]["podReplacementPolicy"] == "Failed"
    started = step("start", *start_flags(namespace, slow_to_stop_runtime, train=STUBBORN))
    assert started.code == 0, started.error
    name = started.result["name"]
    target = ["--namespace", namespace, "--name", name]
    assert run_stage(step, "unsuspend", *target).code == 0
    old = printed(core, namespace, name, restart=0, admission=1)

    assert run_stage(step, "hold", *target).code == 0

    def terminating() -> bool | None:
        pod = _live(core, namespace, name).get(old.pod)
        return True if pod and pod["metadata"].get("deletionTimestamp") else None

    wait_until(terminating, what=f"pod {old.pod} to be terminating", timeout=DEADLINE)

    def released() -> StepRun | None:
        # The release waits for the JobSet's Jobs to stop being active, not for the old
        # pod's grace period: the API has no word for "its process has ended".
        run = run_stage(step, "unsuspend", *target)
        return run if run.code == 0 else None

    release = wait_until(released, what="the release", timeout=DEADLINE)
    assert release.result["admission"] == 2
    old_running = _live(core, namespace, name).get(old.pod)
    assert old_running is not None, "released within the old pod's grace period"
    assert _running(old_running)
    side_by_side: list[str] = []

    def old_ended() -> bool | None:
        live = _live(core, namespace, name)
        pod = live.get(old.pod)
        if pod is None or not _running(pod):
            return True
        side_by_side.extend(n for n, p in live.items() if _admission(p) == "2" and _running(p))
        return None

    wait_until(old_ended, what=f"pod {old.pod} to end", timeout=DEADLINE + GRACE_SECONDS)
    new = printed(core, namespace, name, restart=0, admission=2)
    assert (old.epoch, old.attempt) == expected(1, 0)
    assert (new.epoch, new.attempt) == expected(2, 0)
    assert new.epoch > old.epoch, "a checkpoint the old one saves late is the stale one"
    if waits_for_the_old:
        assert not side_by_side, "the Job replaced the pod only once it had failed"
    else:
        assert side_by_side, "the Job replaced the pod while it ran out its grace"
