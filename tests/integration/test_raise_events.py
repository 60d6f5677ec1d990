"""The admission controller tells every raise it approves, once, before the approval: with the
real Kueue, a pass run in-process on a gateway that fails exactly where a replica could die or
lose a race, then a pass on the real gateway, as the next replica would run it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes import client

from dispatch_k8s.controller.queue import RETRY
from dispatch_k8s.controller.reconcile import Gatekeeper
from dispatch_k8s.core.rules import events, wire
from dispatch_k8s.core.rules.errors import PreconditionFailed
from dispatch_k8s.core.shell.gateway import Gateway
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.kueue_objects import KueueSetup, check_state, condition
from tests.support.lifecycle import DEADLINE, Step, StepRun, read_trainjob, start_queued

pytestmark = pytest.mark.integration


class _Gone(BaseException):
    """The replica's process ends here (a SIGKILL): nothing after it runs."""


class _GoneAtTheEvent(Gateway):
    """The real gateway, but the replica is gone when it would post an Event."""

    def emit_event(self, subject: Mapping[str, Any], **kwargs: Any) -> bool:
        raise _Gone


class _Watched(Gateway):
    """The real gateway, noting the raise Events there are at each approval, whose first
    write is lost to a 409 (Kueue changed the Workload between the pass's read and write)."""

    api: client.CoreV1Api
    raised_events_at_approval: list[int]
    emitted: list[bool]

    def apply_workload_status(self, workload: Mapping[str, Any], *, manager: str) -> dict[str, Any]:
        namespace = workload["metadata"]["namespace"]
        self.raised_events_at_approval.append(len(_raise_events(self.api, namespace)))
        if len(self.raised_events_at_approval) == 1:
            raise PreconditionFailed("Workload: changed meanwhile (played)")
        return super().apply_workload_status(workload, manager=manager)

    def emit_event(self, subject: Mapping[str, Any], **kwargs: Any) -> bool:
        told = super().emit_event(subject, **kwargs)
        self.emitted.append(told)
        return told


def _raise_events(api: client.CoreV1Api, namespace: str) -> list[client.CoreV1Event]:
    """The AdmissionRaised Events on TrainJobs."""
    listed = api.list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=TrainJob,reason={events.RAISED}"
    )
    return list(listed.items)


def _workload_events(
    api: client.CoreV1Api, namespace: str, workload: str
) -> dict[str, client.CoreV1Event]:
    """The controller's Events on the Workload, by reason (Kueue posts its own beside them);
    one each, or the assertion fails."""
    listed = api.list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=Workload,involvedObject.name={workload}"
    )
    ours = [e for e in listed.items if e.reason in {events.RAISED, events.APPROVED}]
    by_reason = {str(e.reason): e for e in ours}
    assert len(by_reason) == len(ours), [(e.reason, e.message) for e in ours]
    return by_reason


def _reserved(kueue: KueueSetup, started: StepRun) -> dict[str, Any]:
    """The job's Workload once its quota is reserved and our check waits on it."""

    def found() -> dict[str, Any] | None:
        workload = kueue.workload_of(started.result["uid"])
        if workload is None:
            return None
        pending = check_state(workload, kueue.check) == "Pending"
        return workload if pending and condition(workload, "QuotaReserved") == "True" else None

    return wait_until(found, what="the Workload's reservation", timeout=DEADLINE)


def _state_now(kueue: KueueSetup, started: StepRun) -> str | None:
    """Our check's state on the job's Workload, read now."""
    workload = kueue.workload_of(started.result["uid"])
    assert workload is not None
    return check_state(workload, kueue.check)


def _gate(gateway: Gateway, kueue: KueueSetup, started: StepRun) -> object:
    """One pass over the job's Workload, read now, as its watch would have told it."""
    keeper = Gatekeeper(gateway, checks=lambda: frozenset({kueue.check}), other_workloads="leave")
    current = kueue.workload_of(started.result["uid"])
    assert current is not None
    try:
        return keeper.gate(current)
    finally:
        keeper.close()


def _passes_until_approved(gateway: Gateway, kueue: KueueSetup, started: StepRun) -> list[object]:
    """Passes as the controller makes them after each backoff, until one approves; what each
    returned. A pass may meet a real 409 and be made again: Trainer writing the TrainJob
    between its read and its raise, or Kueue the Workload before its approval."""
    passes: list[object] = []

    def approved() -> bool | None:
        passes.append(_gate(gateway, kueue, started))
        assert passes[-1] in (None, RETRY), passes[-1]
        return True if passes[-1] is None else None

    wait_until(approved, what="the pass that approves", timeout=60)
    return passes


def test_a_raise_whose_replica_died_before_telling_it_is_told_by_the_replica_that_approves(
    control_plane: Cluster,
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
) -> None:
    """The first pass raises A and is gone before its Event: the check stays Pending and
    nothing tells the raise. The next pass finds the raise on record for this reservation,
    tells it under its one name, then approves."""
    kueue.install(cpu="1")
    started = start_queued(step, namespace, torch_runtime, kueue, "told")
    name = started.result["name"]
    workload = _reserved(kueue, started)["metadata"]["name"]
    core = client.CoreV1Api(api_client)

    dying = _GoneAtTheEvent.connect(kubeconfig=control_plane.kubeconfig, context=None)

    def gone_at_the_event() -> bool | None:
        """A pass whose raise met Trainer's status write (409) wrote nothing and is made
        again, as the controller makes it after its backoff."""
        try:
            again = _gate(dying, kueue, started)
        except _Gone:
            return True
        assert again is RETRY, again
        return None

    wait_until(gone_at_the_event, what="a pass gone between its raise and its Event", timeout=60)
    raised = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
    assert raised[wire.ADMISSION_FLOOR_ANNOTATION] == "1"
    assert (_raise_events(core, namespace), _state_now(kueue, started)) == ([], "Pending")

    _passes_until_approved(
        Gateway.connect(kubeconfig=control_plane.kubeconfig, context=None), kueue, started
    )
    assert _state_now(kueue, started) == "Ready"
    (told,) = _raise_events(core, namespace)
    record = raised[wire.RAISED_FOR_ANNOTATION]
    assert told.metadata.name == events.raise_event_name(name, record)
    assert (told.involved_object.name, told.type) == (name, "Normal")
    assert told.message == events.raise_message(admission=1, restart=0, workload=workload)
    on_workload = _workload_events(core, namespace, workload)
    assert sorted(on_workload) == [events.APPROVED, events.RAISED], on_workload
    assert on_workload[events.RAISED].metadata.name == events.raise_event_name(workload, record)
    assert on_workload[events.RAISED].message == told.message
    assert on_workload[events.APPROVED].message == "dispatch: admission count raised to 1"


def test_a_raise_is_told_before_its_approval_and_once_when_the_approval_is_tried_again(
    control_plane: Cluster,
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    api_client: client.ApiClient,
) -> None:
    """A pass raises, tells, and loses its approval to a 409; the pass after finds the raise on
    record and tells it again: the API server already has that Event, so it stays one, and
    both posts count as told (nothing is logged as lost)."""
    kueue.install(cpu="1")
    started = start_queued(step, namespace, torch_runtime, kueue, "once")
    workload = _reserved(kueue, started)["metadata"]["name"]
    gateway = _Watched.connect(kubeconfig=control_plane.kubeconfig, context=None)
    assert isinstance(gateway, _Watched)
    gateway.api = client.CoreV1Api(api_client)
    gateway.raised_events_at_approval, gateway.emitted = [], []

    passes = _passes_until_approved(gateway, kueue, started)
    assert set(passes[:-1]) == {RETRY}, passes
    assert _state_now(kueue, started) == "Ready"
    tried = gateway.raised_events_at_approval
    assert len(tried) >= 2, "the played 409 was not met"
    assert tried == [1] * len(tried), "an approval came before its raise's Event"
    # Each pass that tries the approval first tells the raise, on the TrainJob and the
    # Workload; the one that approves tells the approval too.
    assert gateway.emitted == [True] * (2 * len(tried) + 1)
    assert len(_raise_events(gateway.api, namespace)) == 1
    assert sorted(_workload_events(gateway.api, namespace, workload)) == [
        events.APPROVED,
        events.RAISED,
    ]
