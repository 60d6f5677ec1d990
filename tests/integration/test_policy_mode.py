"""Kueue's policy mode with the real Kueue: a ClusterQueue with no AdmissionCheck, the
MutatingAdmissionPolicy raising A as Kueue opens each TrainJob, and the admission controller
as the auditor only (--no-gate): it tells each raise, and deactivates the Workload of a job
flagged foreign, whose opening the guard refuses, rather than let Kueue retry it for ever."""

from __future__ import annotations

import functools
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client, watch

from dispatch_k8s.core.rules import events, wire
from tests.cluster.wait import wait_until
from tests.integration.conftest import wait_suspended
from tests.support.cluster_under_test import Cluster
from tests.support.kueue_objects import (
    KueueSetup,
    condition,
    next_version,
    reserved_at,
    workload_versions,
)
from tests.support.lifecycle import (
    DEADLINE,
    TRAINER,
    Execution,
    Kubelet,
    Step,
    read_trainjob,
    start_args,
    start_queued,
)
from tests.support.replicas import replicas

pytestmark = pytest.mark.integration
# The auditor only; a short resync, so a refused opening (no change of the TrainJob) is seen.
POLICY_MODE: Final = ("--no-gate", "--resync-seconds", "3")
CYCLES: Final = 10  # evictions tried until a re-admission comes within 1 s of the release


def test_a_queued_job_that_requests_nothing_is_started_and_raised_on_open(
    step: Step, kubelet: Kubelet, namespace: str, torch_runtime: str, kueue: KueueSetup
) -> None:
    kueue.install(cpu="1", with_check=False)
    args = start_args(namespace, torch_runtime, "empty", queue=kueue.local_queue)
    refused = step("start", *args)
    assert (refused.code, "--kueue-mode policy" in refused.error) == (6, True)
    started = step("start", *args, "--kueue-mode", "policy")
    assert started.code == 0, started.error
    pod = kubelet.wait_for_pod(started.result["name"], restart=0, admission=1)
    assert kubelet.execute(pod).r == 1


def _raised(api: client.ApiClient, namespace: str, name: str) -> list[str]:
    listed = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason={events.RAISED}"
    )
    return sorted(e.message or "" for e in listed.items)


def test_the_auditor_tells_each_raise_and_deactivates_a_foreign_jobs_workload(
    control_plane: Cluster,
    api_client: client.ApiClient,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    kueue.install(cpu="1", with_check=False)
    started = start_queued(step, namespace, torch_runtime, kueue, "policy-mode")
    name, uid = started.result["name"], started.result["uid"]
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "only", extra=POLICY_MODE):
        kubelet.wait_for_pod(name, restart=0, admission=1)
        kueue.set_active(uid, active=False)
        wait_suspended(custom, namespace, name)
        kueue.set_active(uid, active=True)
        kubelet.wait_for_pod(name, restart=0, admission=2)

        # The second raise is the watch's (one made before the first list: the test below).
        second = "A raised to 2: the next execution starts with R = A + J = 2 + 0 = 2"
        wait_until(
            lambda: second in _raised(api_client, namespace, name) or None,
            what="the second raise told",
            timeout=DEADLINE,
        )
        assert _raised(api_client, namespace, name).count(second) == 1

        # Flagged while it runs: left to run. Then preempted (deactivated, as a person or a
        # higher priority would) and let back: Kueue admits it, and its opening is refused.
        flag = {wire.FOREIGN_ANNOTATION: "true", wire.FOREIGN_CAUSE_ANNOTATION: "test"}
        custom.patch_namespaced_custom_object(
            *TRAINER, namespace, "trainjobs", name, {"metadata": {"annotations": flag}}
        )
        kueue.set_active(uid, active=False)
        wait_suspended(custom, namespace, name)
        kueue.set_active(uid, active=True)

        def deactivated() -> dict[str, Any] | None:
            found = kueue.workload_of(uid)
            return found if found and found["spec"].get("active") is False else None

        workload = wait_until(deactivated, what="the auditor to deactivate it", timeout=DEADLINE)
        because = workload["metadata"]["annotations"][wire.DEACTIVATED_ANNOTATION]
        assert f"TrainJob {name} is flagged foreign" in because
        wait_until(
            lambda: condition(kueue.workload_of(uid) or {}, "QuotaReserved") != "True" or None,
            what="Kueue to release the quota",
            timeout=DEADLINE,
        )
    job = read_trainjob(custom, namespace, name)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "2", "no raise"
    refused = client.CoreV1Api(api_client).list_namespaced_event(
        namespace, field_selector=f"reason={events.REFUSED}"
    )
    kinds = {e.involved_object.kind for e in refused.items if "deactivated" in (e.message or "")}
    assert kinds == {"Workload", "TrainJob"}


def _opened(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any] | None:
    job = read_trainjob(custom, namespace, name)
    return job if job["spec"].get("suspend") is False else None


def _pods_seen(
    api: client.ApiClient, namespace: str, trainjob: str, stop: threading.Event
) -> list[dict[str, Any]]:
    """Every version of every pod of the TrainJob's JobSet the API server tells until `stop`
    (filled by a thread): the pods of an admission preempted at once go within moments."""
    seen: list[dict[str, Any]] = []

    def follow() -> None:
        version = ""
        while not stop.is_set():
            stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                client.CoreV1Api(api).list_namespaced_pod,
                namespace,
                label_selector=f"{wire.JOBSET_NAME_KEY}={trainjob}",
                resource_version=version,
                timeout_seconds=2,
            )
            for event in stream:
                version = event["object"].metadata.resource_version
                seen.append(api.sanitize_for_serialization(event["object"]))  # type: ignore[no-untyped-call]

    threading.Thread(target=follow, daemon=True).start()
    return seen


@pytest.mark.policies("all")
def test_a_preemption_and_readmissions_within_one_second_raise_each_admission_once(
    control_plane: Cluster,
    api_client: client.ApiClient,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """Policy mode: a low-priority job is preempted by a high-priority one, deactivated at once
    so that Kueue admits the victim again; then the victim is evicted (deactivated) and let
    back as soon as Kueue released its quota, until one re-admission is seen within one second
    of its release (by the watch's arrival, this process's clock: the Workload's own times
    have whole seconds); each eviction waits for the job's pods to go, so two admissions are
    never within a second here. The API server raises A in each opening:
    1, 2, 3, ... one per admission, each told once by the auditor; every pod any admission
    made, run through the real prologue, has R = its admission's A and an epoch no execution
    of another admission has."""
    low, high = f"{namespace}-low", f"{namespace}-high"
    kueue.install(cpu="1", with_check=False, priorities={low: 10, high: 1000})
    queued = kueue.queued_request()
    stop = threading.Event()
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "only", extra=POLICY_MODE):
        victim = step(
            "start", *start_args(namespace, torch_runtime, "victim", priority_class=low, **queued)
        )
        assert victim.code == 0, victim.error
        name, uid = victim.result["name"], victim.result["uid"]
        pods = _pods_seen(api_client, namespace, name, stop)
        workload = wait_until(lambda: kueue.workload_of(uid), what="the Workload", timeout=DEADLINE)
        versions = workload_versions(
            custom, namespace, workload["metadata"]["name"], timeout=DEADLINE * 3
        )
        floors: list[int] = []  # A at each admission
        gaps: list[float] = []  # seconds from a release of the quota to the admission after it
        released_at = 0.0
        try:
            for _ in range(CYCLES):
                next_version(versions, lambda v: condition(v, "Admitted") == "True", "an admission")
                if released_at:
                    gaps.append(time.monotonic() - released_at)
                opened = wait_until(
                    functools.partial(_opened, custom, namespace, name),
                    what="Kueue to open the victim",
                    timeout=DEADLINE,
                )
                annotations = opened["metadata"]["annotations"]
                floors.append(int(annotations[wire.ADMISSION_FLOOR_ANNOTATION]))
                if len(floors) > 2 and gaps[-1] < 1.0:
                    break
                if len(floors) == 1:  # the first admission's pod made, then preempted
                    kubelet.wait_for_pod(name, restart=0, admission=floors[0])
                    preemptor = step(
                        "start",
                        *start_args(
                            namespace, torch_runtime, "preemptor", priority_class=high, **queued
                        ),
                    )
                    assert preemptor.code == 0, preemptor.error
                    evicted = next_version(
                        versions,
                        lambda v: (
                            condition(v, "Evicted") == "True" and condition(v, "Admitted") != "True"
                        ),
                        "the victim preempted",
                    )
                    reasons = [
                        c["reason"]
                        for c in evicted["status"]["conditions"]
                        if c["type"] == "Evicted"
                    ]
                    assert reasons == ["Preempted"], evicted["status"]["conditions"]
                    let_back = (preemptor.result["uid"], False)  # the preemptor goes
                else:
                    kueue.set_active(uid, active=False)
                    let_back = (uid, True)
                next_version(versions, lambda v: reserved_at(v) is None, "the quota released")
                kueue.set_active(let_back[0], active=let_back[1])
                released_at = time.monotonic()
            assert gaps[-1] < 1.0, f"no re-admission within 1 s of its release: {gaps}"
            last = kubelet.wait_for_pod(name, restart=0, admission=floors[-1])
        finally:
            stop.set()
        told = [f"A raised to {a}:" for a in floors]
        wait_until(
            lambda: (
                all(
                    any(m.startswith(t) for m in _raised(api_client, namespace, name)) for t in told
                )
                or None
            ),
            what="every raise told",
            timeout=DEADLINE,
        )
        messages = _raised(api_client, namespace, name)
    assert floors == list(range(1, len(floors) + 1)), f"not one raise per admission: {floors}"
    assert [sum(m.startswith(t) for m in messages) for t in told] == [1] * len(told), messages
    executed: dict[str, Execution] = {}
    for pod in [*pods, last]:
        if pod["metadata"]["uid"] not in executed:
            executed[pod["metadata"]["uid"]] = kubelet.execute(pod)
    by_admission: dict[int, set[int]] = {}
    for execution in executed.values():
        assert execution.r == execution.admission, execution
        by_admission.setdefault(execution.admission, set()).add(execution.epoch)
    assert {floors[0], floors[-1]} <= set(by_admission) <= set(floors), by_admission
    epochs = [by_admission[a] for a in sorted(by_admission)]
    assert all(len(one) == 1 for one in epochs), f"one admission, two epochs: {by_admission}"
    assert all(a < b for (a,), (b,) in pairwise(epochs)), f"an epoch repeated: {by_admission}"


def _raises_told(api: client.ApiClient, namespace: str, name: str) -> list[tuple[str, int]]:
    """The AdmissionRaised Events about the object `name`: each one's message and count."""
    listed = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason={events.RAISED}"
    )
    return sorted((e.message or "", e.count or 1) for e in listed.items)


def test_a_raise_no_auditor_saw_made_is_told_once_on_the_trainjob_and_its_workload(
    control_plane: Cluster,
    api_client: client.ApiClient,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """Policy mode: the first raise is made while no auditor runs; the leader tells it at its
    first list, on the TrainJob and on its Workload. Its successor, after a leader change,
    lists again and tells nothing twice, then tells the raise its own watch sees: one Event
    per raise on each object, posted once."""
    kueue.install(cpu="1", with_check=False)
    started = start_queued(step, namespace, torch_runtime, kueue, "told-late")
    name, uid = started.result["name"], started.result["uid"]
    kubelet.wait_for_pod(name, restart=0, admission=1)
    workload = wait_until(lambda: kueue.workload_of(uid), what="the Workload", timeout=DEADLINE)
    wname = workload["metadata"]["name"]
    first = "A raised to 1: the next execution starts with R = A + J = 1 + 0 = 1"
    second = "A raised to 2: the next execution starts with R = A + J = 2 + 0 = 2"
    on_workload = [
        f"A raised to {a} for the reservation of Workload {wname}: the next execution starts "
        f"with R = A + J = {a} + 0 = {a}"
        for a in (1, 2)
    ]

    def told(expected: list[str], subject: str) -> bool | None:
        return [m for m, _ in _raises_told(api_client, namespace, subject)] == expected or None

    with replicas(
        control_plane.kubeconfig, namespace, tmp_path, "one", "two", extra=POLICY_MODE
    ) as both:
        wait_until(lambda: told([first], name), what="the raise told", timeout=DEADLINE)
        wait_until(
            lambda: told(on_workload[:1], wname),
            what="the raise told on the Workload",
            timeout=DEADLINE,
        )
        leader = wait_until(
            lambda: next((r for r in both if r.leading()), None), what="a leader", timeout=DEADLINE
        )
        leader.kill()
        (successor,) = [r for r in both if r is not leader]
        wait_until(lambda: successor.leading() or None, what="a new leader", timeout=DEADLINE)
        kueue.set_active(uid, active=False)
        wait_suspended(custom, namespace, name)
        kueue.set_active(uid, active=True)
        kubelet.wait_for_pod(name, restart=0, admission=2)
        wait_until(lambda: told([first, second], name), what="the second raise", timeout=DEADLINE)
        wait_until(
            lambda: told(on_workload, wname), what="the second on the Workload", timeout=DEADLINE
        )
    assert _raises_told(api_client, namespace, name) == [(first, 1), (second, 1)]
    assert _raises_told(api_client, namespace, wname) == [(m, 1) for m in on_workload]
