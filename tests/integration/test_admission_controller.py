"""`dispatch-admission-controller` with the real Kueue: one raise per reservation, then the
approval; another team's TrainJob approved with nothing raised; leadership, restarts."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import events, wire
from dispatch_k8s.core.rules.errors import Fenced
from tests.cluster.harness import ControlPlane
from tests.cluster.wait import wait_until
from tests.integration.history import History
from tests.support.cluster_under_test import Cluster
from tests.support.kueue_objects import KUEUE, KueueSetup, condition
from tests.support.lifecycle import (
    DEADLINE,
    TRAINER,
    Kubelet,
    Step,
    read_trainjob,
    run_stage,
    start_args,
    start_queued,
)
from tests.support.replicas import (
    RENEW_DEADLINE,
    admitted,
    other_teams_trainjob,
    replicas,
    workload_of,
    writes_after_the_deadline,
)

pytestmark = pytest.mark.integration


def check_message(workload: dict[str, Any], check: str) -> str:
    states = workload["status"].get("admissionChecks") or []
    return str(next(s for s in states if s["name"] == check).get("message"))


def test_it_raises_once_approves_and_admits_another_teams_trainjob_as_it_is(
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
    kueue.install(cpu="2")
    ours = start_queued(step, namespace, torch_runtime, kueue, "ours").result["name"]
    theirs = other_teams_trainjob(custom, namespace, torch_runtime, kueue)
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "only") as (only,):
        pod = kubelet.wait_for_pod(ours, restart=0, admission=1)
        assert kubelet.execute(pod).r == 1
        mine = admitted(custom, namespace, ours)
        assert check_message(mine, kueue.check) == (
            'dispatch: admission count raised to 1, Previously: "Pending"'
        )
        other = admitted(custom, namespace, theirs)
        assert "without raising an admission count" in check_message(other, kueue.check)
        assert "TrainJob other-team is not a dispatch-managed TrainJob" in check_message(
            other, kueue.check
        )
        annotations = read_trainjob(custom, namespace, theirs)["metadata"].get("annotations")
        assert not any(key.startswith(wire.DOMAIN) for key in annotations or {})
        # The replica's own Events on each Workload: its raise and its approval, once each.
        told = {
            job: _told_on_workload(api_client, namespace, workload["metadata"]["name"])
            for job, workload in ((ours, mine), (theirs, other))
        }
        assert told[ours] == {
            events.RAISED: [
                events.raise_message(admission=1, restart=0, workload=mine["metadata"]["name"])
            ],
            events.APPROVED: ["dispatch: admission count raised to 1"],
        }
        # The Event tells what the check's message does, less the state it replaced.
        said = check_message(other, kueue.check).removesuffix(', Previously: "Pending"')
        assert told[theirs] == {events.APPROVED: [said]}
        job = read_trainjob(custom, namespace, ours)
        assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "1"
        assert only.metric("dispatch_admission_raises_total") == 1
        assert only.metric("dispatch_admission_approvals_total", 'kind="dispatch"') == 1
        assert only.metric("dispatch_admission_approvals_total", 'kind="other"') == 1
        assert only.metric("dispatch_admission_reserved_to_approved_seconds_count") == 2
        assert only.get("/healthz") == (200, "ok\n")
        check = custom.get_cluster_custom_object(*KUEUE, "admissionchecks", kueue.check)
        assert isinstance(check, dict)
        active = next(c for c in check["status"]["conditions"] if c["type"] == "Active")
        assert (active["status"], active["reason"]) == ("True", "Active")
        assert "dispatch-admission-controller" in active["message"]
        assert only.stop() == 0
    assert any(r["message"] == "released the leader Lease" for r in only.records())


def test_a_check_with_parameters_is_marked_inactive_and_kueue_stops_its_queue(
    control_plane: Cluster,
    namespace: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """A check asking for what the controller cannot do (spec.parameters) gets Active=False
    with the reason, over the True the install wrote; Kueue then marks its ClusterQueue
    inactive, so no Workload is admitted past a check nothing gates as asked."""
    kueue.install(cpu="1")
    parameters = {"apiGroup": "example.invalid", "kind": "Settings", "name": "any"}
    custom.patch_cluster_custom_object(
        *KUEUE, "admissionchecks", kueue.check, {"spec": {"parameters": parameters}}
    )

    def active_condition(plural: str, name: str) -> dict[str, Any]:
        found = custom.get_cluster_custom_object(*KUEUE, plural, name)
        assert isinstance(found, dict)
        conditions = (found.get("status") or {}).get("conditions") or []
        return dict(next(c for c in conditions if c["type"] == "Active"))

    def inactive() -> dict[str, Any] | None:
        found = active_condition("admissionchecks", kueue.check)
        return found if found["status"] == "False" else None

    with replicas(control_plane.kubeconfig, namespace, tmp_path, "only"):
        active = wait_until(inactive, what="the check to be marked inactive", timeout=DEADLINE)
        assert active["reason"] == "ParametersNotSupported"
        assert "remove spec.parameters" in active["message"]
        wait_until(
            lambda: (
                active_condition("clusterqueues", f"{namespace}-cq")["status"] == "False" or None
            ),
            what="Kueue to stop the check's ClusterQueue",
            timeout=DEADLINE,
        )


def test_a_reservation_raised_for_before_a_restart_is_approved_without_a_second_raise(
    control_plane: Cluster,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """As a controller killed between its raise and its approval: the raise is on record."""
    kueue.install(cpu="1")
    name = start_queued(step, namespace, torch_runtime, kueue, "raised").result["name"]
    raised = run_stage(
        step, "admit", "--namespace", namespace, "--name", name, "--check", kueue.check, "--wait"
    )
    assert (raised.code, raised.result.get("admission")) == (0, 1), raised.error
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "after") as (after,):
        pod = kubelet.wait_for_pod(name, restart=0, admission=1)
        assert kubelet.execute(pod).r == 1
        assert after.metric("dispatch_admission_raises_total") == 0
        assert after.metric("dispatch_admission_approvals_total", 'kind="dispatch"') == 1
    job = read_trainjob(custom, namespace, name)
    assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "1"


LOW_JOBS: Final = 70
HIGH_JOBS: Final = 30
QUOTA_CPUS: Final = 8
BURST_WAIT: Final = 300.0


def _delete_trainjob(custom: client.CustomObjectsApi, namespace: str, name: str) -> None:
    try:
        custom.delete_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
    except client.ApiException as e:
        if e.status != 404:
            raise


def _start_all(
    step: Step, namespace: str, runtime: str, kueue: KueueSetup, ids: list[str], priority: str
) -> list[str]:
    def start(job_id: str) -> str:
        started = step(
            "start",
            *start_args(
                namespace, runtime, job_id, priority_class=priority, **kueue.queued_request()
            ),
        )
        assert started.code == 0, started.error
        return str(started.result["name"])

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(start, ids))


NO_AUDIT: Final = ("--no-audit",)


@pytest.mark.timeout(1500)
def test_a_burst_of_100_with_preemptions_and_leaders_paused_and_killed_keeps_r_rising(
    plane: ControlPlane,
    api_client: client.ApiClient,
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """Three replicas under a burst with preemptions. The first leader is paused (SIGSTOP)
    while the highs preempt the lows, until a standby has taken over; resumed, it writes
    nothing after its renew deadline (the API server's audit log) and exits 75. Half-way
    through the jobs' ends, the leader that took over is killed (SIGKILL) and the last
    replica takes over. Every job's R strictly rises, A is raised once per reservation and
    each reservation approved once."""
    low, high = f"{namespace}-low", f"{namespace}-high"
    kueue.install(cpu=str(QUOTA_CPUS), priorities={low: 10, high: 1000})
    user = f"{namespace}-paused"
    audited = plane.audited_kubeconfig(user, tmp_path / f"{user}.kubeconfig")
    with History(api_client, namespace, check=kueue.check) as history, ExitStack() as stack:
        # The gate alone: the auditor's own passes under a burst are its benchmark's to measure
        # (issue 24), and on two shared cores they shift when preempted jobs run again.
        # The replica to be paused leads first, and alone acts as the audited user.
        (first,) = stack.enter_context(
            replicas(audited, namespace, tmp_path, "first", extra=NO_AUDIT)
        )
        wait_until(lambda: first.leading() or None, what="the first replica to lead", timeout=30)
        standbys = stack.enter_context(
            replicas(plane.kubeconfig, namespace, tmp_path, "second", "third", extra=NO_AUDIT)
        )
        lows = _start_all(
            step, namespace, torch_runtime, kueue, [f"low-{i}" for i in range(LOW_JOBS)], low
        )

        def ran(count: int) -> bool | None:
            return len(history.executions) >= count or None

        wait_until(lambda: ran(QUOTA_CPUS), what="the first lows to run", timeout=BURST_WAIT)
        running_lows = {e.trainjob for e in history.executions}
        highs = _start_all(
            step, namespace, torch_runtime, kueue, [f"high-{i}" for i in range(HIGH_JOBS)], high
        )
        wait_until(lambda: ran(QUOTA_CPUS + 3), what="highs to run", timeout=BURST_WAIT)
        first.process.send_signal(signal.SIGSTOP)  # mid-burst, with passes in flight
        paused = datetime.now().astimezone()
        try:
            successor = wait_until(
                lambda: next((r for r in standbys if r.leading()), None),
                what="a standby to take over from the paused leader",
                timeout=BURST_WAIT,
            )
        finally:
            first.process.send_signal(signal.SIGCONT)
        assert first.process.wait(timeout=30) == Fenced.exit_code

        deleted: set[str] = set()

        def finish_what_ran(count: int) -> bool | None:
            """A job that has run is done (deleted): the highs first, then the lows, each low
            once it has run under its latest admission (a preempted one waits to run again)."""
            if set(highs) - deleted:
                done = [name for name in highs if history.of(name)]
            else:
                done = [name for name in lows if history.ran_as_admitted(name)]
            for name in done:
                if name not in deleted:
                    _delete_trainjob(custom, namespace, name)
                    deleted.add(name)
            return len(deleted) >= count or None

        jobs = LOW_JOBS + HIGH_JOBS
        wait_until(
            lambda: finish_what_ran(jobs // 2), what="half the jobs to run", timeout=BURST_WAIT * 3
        )
        successor.kill()  # no release, no pass finished, lows being raised again
        last = next(r for r in standbys if r is not successor)
        wait_until(
            lambda: finish_what_ran(jobs), what="every job to run once", timeout=BURST_WAIT * 6
        )
        assert last.leading(), "the last replica took over"
        assert last.metric("dispatch_admission_approvals_total", 'kind="dispatch"') > 0

    deadline, late = writes_after_the_deadline(plane.audit_events(user))
    assert deadline < paused + RENEW_DEADLINE + timedelta(seconds=1)
    assert late == [], "written after the paused replica's renew deadline had passed"
    for name in lows + highs:
        rs = [execution.r for execution in history.of(name)]
        assert rs, f"{name} never ran"
        assert all(a < b for a, b in pairwise(rs)), f"{name}: R went {rs}"
    preempted = [name for name in running_lows if len(history.of(name)) > 1]
    assert preempted, f"no low job of {sorted(running_lows)} was preempted and run again"
    for name, versions in history.raises.items():
        floors: dict[str, set[str]] = {}
        for raised_for, floor in versions:
            floors.setdefault(raised_for, set()).add(floor)
        twice = {record: seen for record, seen in floors.items() if len(seen) > 1}
        assert not twice, f"{name}: A raised more than once for one reservation: {twice}"
        assert max(int(floor) for _, floor in versions) == len(floors), name
    for uid, states in history.checks.items():
        approvals: dict[str, int] = {}
        for (_, before), (reserved, state) in pairwise(states):
            if state == "Ready" and before != "Ready":
                approvals[reserved] = approvals.get(reserved, 0) + 1
        assert all(count == 1 for count in approvals.values()), f"Workload {uid}: {approvals}"


def check_entry(workload: dict[str, Any], check: str) -> dict[str, Any]:
    states = workload["status"].get("admissionChecks") or []
    return dict(next(s for s in states if s["name"] == check))


def kueue_events(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, list[str]]:
    """The messages of the Events on the Workload `name`, by reason."""
    listed = client.CoreV1Api(api_client).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    )
    found: dict[str, list[str]] = {}
    for event in listed.items:
        found.setdefault(str(event.reason), []).append(str(event.message))
    return found


def _told_on_workload(
    api_client: client.ApiClient, namespace: str, workload: str
) -> dict[str, list[str]]:
    """The controller's raise and approval Events on a Workload, once its approval is told
    (Events are posted from a thread of their own, after the approval)."""

    def approval_told() -> dict[str, list[str]] | None:
        found = kueue_events(api_client, namespace, workload)
        ours: dict[str, list[str]] = {
            r: found[r] for r in (events.RAISED, events.APPROVED) if r in found
        }
        return ours if events.APPROVED in ours else None

    return wait_until(approval_told, what=f"the approval Event on {workload}", timeout=DEADLINE)


def _refused_once(api_client: client.ApiClient, namespace: str, name: str) -> Any:
    def warned() -> list[Any] | None:
        listed = client.CoreV1Api(api_client).list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}"
        )
        found = [e for e in listed.items if e.reason == events.REFUSED]
        return found or None

    (event,) = wait_until(warned, what=f"the refusal Event on {name}", timeout=DEADLINE)
    return event


@pytest.mark.parametrize("on_refusal", ["reject", "retry", "wait"])
def test_a_trainjob_flagged_foreign_gets_its_check_state_and_the_reason_once(
    on_refusal: str,
    control_plane: Cluster,
    api_client: client.ApiClient,
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """A person decides on a job the audit flagged: no raise, no approval, one Warning Event,
    and the reason on the check. Rejected (the default): real Kueue deactivates the Workload
    and releases its quota; Retry: it evicts it (quota released) and keeps it active to queue
    again; wait: the check stays Pending and the quota stays held. Rejected, then cleared as
    docs/operations.md says (flag removed, Workload active again): raised once and admitted."""
    kueue.install(cpu="1")
    name = start_queued(step, namespace, torch_runtime, kueue, "flagged").result["name"]
    flag = {wire.FOREIGN_ANNOTATION: wire.FOREIGN, wire.FOREIGN_CAUSE_ANNOTATION: "a reset"}
    custom.patch_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", name, {"metadata": {"annotations": flag}}
    )
    extra = ("--on-refusal", on_refusal)
    state = {"reject": "Rejected", "retry": "Retry", "wait": "Pending"}[on_refusal]
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "only", extra=extra) as (only,):
        event = _refused_once(api_client, namespace, name)
        assert event.type == "Warning"
        assert "foreign" in event.message

        def settled() -> dict[str, Any] | None:
            current = workload_of(custom, namespace, name)
            active = current["spec"].get("active", True)
            reserved = condition(current, "QuotaReserved")
            entry = check_entry(current, kueue.check)
            said = str(entry.get("message"))
            if on_refusal == "wait":  # our state and reason, the quota held
                told = entry.get("state") == "Pending" and "is flagged foreign" in said
                return current if told and reserved == "True" else None
            # Kueue evicts it for the check (the quota released) and resets the check to
            # Pending: deactivated for Rejected; still active, to be queued again, for Retry.
            stats = current["status"].get("schedulingStats") or {}
            reasons = {
                (e.get("reason"), e.get("underlyingCause")) for e in stats.get("evictions") or []
            }
            if on_refusal == "reject":
                evicted = ("Deactivated", "AdmissionCheck") in reasons and reserved != "True"
                return current if active is False and evicted else None
            evicted = any(reason == "AdmissionCheck" for reason, _ in reasons)
            return current if active is True and evicted else None

        held = wait_until(settled, what=f"Kueue to act on {state}", timeout=DEADLINE)
        told = wait_until(
            lambda: kueue_events(api_client, namespace, held["metadata"]["name"]).get(
                events.REFUSED
            ),
            what="the refusal Event on the Workload",
            timeout=DEADLINE,
        )
        assert all("is flagged foreign" in message for message in told), told
        if on_refusal == "reject":
            why = kueue_events(api_client, namespace, held["metadata"]["name"])
            assert any("is flagged foreign" in e for e in why.get("AdmissionCheckRejected", [])), (
                why
            )
        assert condition(held, "Admitted") != "True"
        assert only.metric("dispatch_admission_refusals_total", 'reason="decision"') >= 1
        assert only.metric("dispatch_admission_raises_total") == 0
        assert only.metric("dispatch_admission_approvals_total", 'kind="dispatch"') == 0
        job = read_trainjob(custom, namespace, name)
        assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "0"
        if on_refusal != "reject":
            return
        # The runbook's steps 4 and 5 (docs/operations.md): the flag removed, then the Workload
        # deleted, for Kueue v0.19.2 leaves one deactivated by a rejected check stuck when it is
        # made active again (kubernetes-sigs/kueue#14309); Kueue makes a new one for the TrainJob.
        custom.patch_namespaced_custom_object(
            *TRAINER,
            namespace,
            "trainjobs",
            name,
            {"metadata": {"annotations": dict.fromkeys(flag)}},
        )
        custom.delete_namespaced_custom_object(
            *KUEUE, namespace, "workloads", held["metadata"]["name"]
        )
        again = admitted(custom, namespace, name)
        assert again["metadata"]["uid"] != held["metadata"]["uid"]
        assert check_message(again, kueue.check) == (
            'dispatch: admission count raised to 1, Previously: "Pending"'
        )
        assert only.metric("dispatch_admission_raises_total") == 1


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_retry_backs_off_as_kueues_own_checks_then_rejects(
    control_plane: Cluster,
    api_client: client.ApiClient,
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """--on-refusal retry as Kueue's ProvisioningRequest check retries: each refusal sets Retry
    with a delay doubling from --backoff-base-seconds (2 s, then 4 s) read from the check's
    retryCount, which real Kueue raises as it evicts the Workload and resets the check; Kueue
    queues it again no sooner than the delay after the Retry; the refusal after
    --backoff-limit-count (2) retries is Rejected, and Kueue deactivates the Workload. Every
    state the controller writes tells the state it replaced, as MultiKueue's messages do."""
    kueue.install(cpu="1")
    name = start_queued(step, namespace, torch_runtime, kueue, "retried").result["name"]
    flag = {wire.FOREIGN_ANNOTATION: wire.FOREIGN, wire.FOREIGN_CAUSE_ANNOTATION: "a reset"}
    custom.patch_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", name, {"metadata": {"annotations": flag}}
    )
    extra = ("--on-refusal", "retry", "--backoff-base-seconds", "2", "--backoff-limit-count", "2")
    with (
        History(api_client, namespace, check=kueue.check) as history,
        replicas(control_plane.kubeconfig, namespace, tmp_path, "only", extra=extra) as (only,),
    ):

        def deactivated() -> dict[str, Any] | None:
            # Kueue resets the Rejected check to Pending as it deactivates: read the eviction.
            current = workload_of(custom, namespace, name)
            stats = current["status"].get("schedulingStats") or {}
            reasons = {
                (e.get("reason"), e.get("underlyingCause")) for e in stats.get("evictions") or []
            }
            rejected = ("Deactivated", "AdmissionCheck") in reasons
            return current if rejected and current["spec"].get("active") is False else None

        held = wait_until(deactivated, what="Kueue to deactivate the Workload", timeout=DEADLINE)
        assert only.metric("dispatch_admission_raises_total") == 0
    uid = held["metadata"]["uid"]
    seen = history.entries[uid]
    ours = [
        (entry, index)
        for index, (entry, _, _) in enumerate(seen)
        if entry["state"] in ("Retry", "Rejected") and seen[index - 1][0] != entry
    ]
    told = [(e["state"], e.get("retryCount", 0)) for e, _ in ours]
    assert told == [("Retry", 0), ("Retry", 1), ("Rejected", 2)], seen
    assert [e["requeueAfterSeconds"] for e, _ in ours[:2]] == [2, 4], seen
    for entry, _ in ours:
        assert "is flagged foreign" in entry["message"], entry
        assert entry["message"].endswith(', Previously: "Pending"'), entry
    assert "(retried 2 times, the limit being 2)" in ours[-1][0]["message"]
    # Each retry is queued again by Kueue at the Retry's time plus its delay, and reserved no
    # sooner: the reservation that the next refusal answers comes after it.
    for (entry, index), (_, following) in pairwise(ours):
        due = _at(entry["lastTransitionTime"]) + timedelta(seconds=entry["requeueAfterSeconds"])
        requeued = {at for _, at, _ in seen[index + 1 : following] if at is not None}
        assert {_at(at) for at in requeued} == {due}, seen
        reserved = {r for _, _, r in seen[index:following] if r is not None} - {seen[index][2]}
        assert reserved, seen
        assert all(_at(r) >= due for r in reserved), seen
