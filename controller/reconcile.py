"""Gating one Workload: as its watch last told it, with its TrainJob read; decide, write, report.

The Workload comes from the watch (client-go's informer cache does the same): a pass over a
Workload with no reservation pending on our check sends no request at all. Each pass makes
at most one raise and one approval, each preconditioned on what was read: a Workload the
watch had not yet told anew is a 409, which writes nothing and has the Workload looked at
again after its backoff, by when the watch has told the newer version.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, Literal

from loguru import logger

from dispatch_k8s.controller import serve
from dispatch_k8s.controller.queue import RETRY, Again
from dispatch_k8s.core.rules import events, gate, trainjob, workload
from dispatch_k8s.core.rules.decisions import Refusal, ResourceVersion
from dispatch_k8s.core.rules.errors import DispatchError, NotFound, PreconditionFailed, Transient
from dispatch_k8s.core.rules.trainjob import Draining
from dispatch_k8s.core.rules.workload import Finished, Reservation, Skip
from dispatch_k8s.core.shell import clock
from dispatch_k8s.core.shell.gateway import Gateway

COMPONENT: Final = "admission-controller"
DRAIN_RECHECK: Final = 2.0  # seconds: the last execution's Jobs are going
REMEMBERED: Final = 10_000  # reservations whose first sighting is kept for the histogram


class Gatekeeper:
    """Gates Workloads one at a time each (the work queue sees to that), many at once."""

    def __init__(
        self,
        gateway: Gateway,
        *,
        checks: Callable[[], frozenset[str]],
        other_workloads: Literal["approve", "leave"],
        on_refusal: gate.OnRefusal = "reject",
        backoff: gate.Backoff = gate.KUEUE_BACKOFF,
        cached_trainjob: Callable[[str, str], Mapping[str, Any] | None] = lambda _ns, _n: None,
    ) -> None:
        self._gateway = gateway
        self._checks = checks
        self._other_workloads = other_workloads
        self._on_refusal: gate.OnRefusal = on_refusal
        self._backoff = backoff
        self._cached_trainjob = cached_trainjob
        self._lock = threading.Lock()
        self._first_seen: OrderedDict[str, float] = OrderedDict()
        self._refused: OrderedDict[str, str] = OrderedDict()
        self._events = ThreadPoolExecutor(max_workers=1, thread_name_prefix="events")

    def seen(self, workload_obj: Mapping[str, Any]) -> None:
        """Note when a reservation was first seen pending on one of our checks."""
        for check in gate.our_checks(workload_obj, self._checks()):
            found = workload.pending_reservation(workload_obj, check=check)
            if isinstance(found, Reservation) and self._remember(
                self._first_seen, found.record, time.monotonic()
            ):
                serve.GATED.inc()

    def _remember(self, table: OrderedDict[str, Any], key: str, value: Any) -> bool:
        with self._lock:
            if key in table:
                return False
            table[key] = value
            while len(table) > REMEMBERED:
                table.popitem(last=False)
            return True

    def gate(self, current: Mapping[str, Any]) -> Again:
        """One pass over the Workload as last told: RETRY after a failure, for its backoff."""
        name = current["metadata"]["name"]
        queue = workload.cluster_queue(current)
        for check in gate.our_checks(current, self._checks()):
            try:
                again = self._gate_check(current, check)
            except PreconditionFailed as e:
                serve.PASS_ERRORS.labels(queue, "conflict").inc()
                logger.bind(workload=name, reason=str(e)).info("changed meanwhile: again")
                return RETRY
            except NotFound:  # deleted since its watch told it: the watch tells that next
                serve.PASS_ERRORS.labels(queue, "gone").inc()
                logger.bind(workload=name).info("gone meanwhile")
                return RETRY
            except Transient as e:
                serve.PASS_ERRORS.labels(queue, "transient").inc()
                logger.bind(workload=name, error=str(e)).warning("API server unavailable")
                return RETRY
            except DispatchError as e:  # forbidden, refused by a webhook
                serve.PASS_ERRORS.labels(queue, "refused").inc()
                serve.REFUSALS.labels(type(e).__name__).inc()
                logger.bind(workload=name, error=str(e)).error("cannot gate the Workload")
                return RETRY
            if again is not None:
                return again
        return None

    def _gate_check(self, current: Mapping[str, Any], check: str) -> Again:
        namespace = current["metadata"]["namespace"]
        self.seen(current)
        if isinstance(workload.pending_reservation(current, check=check), Skip | Finished):
            return None  # nothing to gate: decided without a request
        owner = workload.owner_trainjob(current)
        job = self._read_trainjob(namespace, owner) if owner else None
        decision = gate.decide_gate(current, job, check=check)
        if isinstance(decision, workload.Replaced):  # a person may wonder why it waits
            logger.bind(workload=current["metadata"]["name"], reason=decision.reason).info(
                "owner replaced: not gated"
            )
        if isinstance(decision, Skip | Finished):
            return None
        if isinstance(decision, Refusal):
            return self._refuse(current, job, check, decision, reason="decision")
        if isinstance(decision, gate.Approve):
            if decision.admission is None:
                if self._other_workloads == "approve":
                    self._approve(
                        current, check, decision.reservation, decision.message, kind="other"
                    )
                return None
            assert job is not None  # raised for this reservation: the TrainJob was read
            # Raised by a pass that did not approve (a 409, or a replica gone in between): the
            # raise may not have been told yet, and it is told before the approval.
            jobset = self._gateway.read_jobset(namespace, job["metadata"]["name"])
            restart = trainjob.restart_count(jobset)
            if not isinstance(restart, Refusal):
                self._tell_raise(
                    current,
                    job,
                    decision.reservation,
                    admission=decision.admission,
                    restart=restart,
                )
            self._approve(current, check, decision.reservation, decision.message, kind="dispatch")
            return None
        assert job is not None  # a raise is only decided for a TrainJob that was read
        return self._raise_and_approve(current, job, check, decision.reservation)

    def _read_trainjob(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The managed TrainJob as its watch told it, else (not managed, or not told yet) read.

        A stale copy is safe: the raise is preconditioned on its resourceVersion (a 409 and
        the pass again after its backoff), and a TrainJob made again under the name has
        another UID, which the decision compares. The JobSet is another matter: it is always
        read afresh before a raise (_raise_and_approve), since a copy from before a
        replacement would show the old J and no precondition of this write covers it.
        """
        cached = self._cached_trainjob(namespace, name)
        if cached is not None:
            return cached
        try:
            return self._gateway.read_trainjob(namespace, name)
        except NotFound:
            return None

    def _raise_and_approve(
        self,
        current: Mapping[str, Any],
        job: Mapping[str, Any],
        check: str,
        reservation: Reservation,
    ) -> Again:
        meta = job["metadata"]
        jobset = self._gateway.read_jobset(meta["namespace"], meta["name"])
        decision = trainjob.decide_raise(job, jobset)
        if isinstance(decision, Draining):  # a wait, told on the check: no Warning
            if self._remember(self._refused, f"{reservation.record} {decision.reason}", True):
                logger.bind(trainjob=meta["name"], reason=decision.reason).info("waiting")
            self._tell_on_check(current, check, decision)
            return DRAIN_RECHECK
        if isinstance(decision, Refusal):
            return self._refuse(current, job, check, decision, reason="raise")
        raised = trainjob.with_admission(job, decision, raised_for=reservation.record)
        written = self._gateway.update_trainjob(raised, decision.resource_version)
        serve.RAISES.inc()
        logger.bind(
            trainjob=meta["name"], workload=reservation.workload, admission=decision.admission
        ).info("raised admission")
        self._tell_raise(
            current, written, reservation, admission=decision.admission, restart=decision.restart
        )
        refusal = workload.decide_approval(
            current, written, check=check, admission=decision.admission
        )
        if refusal is not None:
            return self._refuse(current, written, check, refusal, reason="approval")
        message = workload.approval_message(decision.admission)
        self._approve(current, check, reservation, message, kind="dispatch")
        return None

    def _tell_raise(
        self,
        current: Mapping[str, Any],
        job: Mapping[str, Any],
        reservation: Reservation,
        *,
        admission: int,
        restart: int,
    ) -> None:
        """Post the raise's Event on the TrainJob, under the one name it has, before the approval.

        So no approved raise goes untold: a replica gone after the raise leaves the approval,
        and the telling, to the next pass (best effort, as every Event). The Workload is told
        too, from the Events thread.
        """
        message = events.raise_message(
            admission=admission, restart=restart, workload=reservation.workload
        )
        self._gateway.emit_event(
            job,
            event_type="Normal",
            reason=events.RAISED,
            message=message,
            step=COMPONENT,
            name=events.raise_event_name(job["metadata"]["name"], reservation.record),
        )
        self._emit(
            current,
            "Normal",
            events.RAISED,
            message,
            involved=events.WORKLOAD,
            name=events.raise_event_name(reservation.workload, reservation.record),
        )

    def _approve(
        self,
        current: Mapping[str, Any],
        check: str,
        reservation: Reservation,
        message: str,
        *,
        kind: Literal["dispatch", "other"],
    ) -> None:
        body = workload.build_approval(
            current,
            check=check,
            resource_version=reservation.resource_version,
            message=message,
            now=clock.now(),
        )
        self._gateway.apply_workload_status(body, manager=workload.CHECK_MANAGER)
        serve.APPROVALS.labels(kind).inc()
        with self._lock:
            first = self._first_seen.pop(reservation.record, None)
        if first is not None:
            serve.RESERVED_TO_APPROVED.observe(time.monotonic() - first)
        logger.bind(workload=reservation.workload, check=check, kind=kind).info("approved")
        self._emit(current, "Normal", events.APPROVED, message, involved=events.WORKLOAD)

    def _refuse(
        self,
        current: Mapping[str, Any],
        job: Mapping[str, Any] | None,
        check: str,
        refusal: Refusal,
        *,
        reason: str,
    ) -> Again:
        """Give the check the state the refusal calls for, its reason as the message.

        Why is said once per reservation, as a Warning Event on the job.
        """
        state = self._tell_on_check(current, check, refusal)
        serve.REFUSALS.labels(reason).inc()
        record = workload.reservation_record(current)
        if not self._remember(self._refused, f"{record} {refusal.reason}", True):
            return None
        logger.bind(
            workload=current["metadata"]["name"], reason=refusal.reason, state=state
        ).warning("refused")
        if job is not None:
            self._emit(job, "Warning", events.REFUSED, refusal.reason)
        self._emit(current, "Warning", events.REFUSED, refusal.reason, involved=events.WORKLOAD)
        return None

    def _tell_on_check(self, current: Mapping[str, Any], check: str, refusal: Refusal) -> str:
        """Write the refusal's state and message on the check, unless it says so; the state.

        A check the Workload does not list (admitted without it) is left alone. Retry's delay
        grows with the check's retryCount (gate.retry_delay), Rejected past the limit.
        """
        listed = workload.check_entry(current, check)
        if listed is None:
            return gate.refused_check(refusal, on_refusal=self._on_refusal).state
        update = gate.refused_check(
            refusal,
            on_refusal=self._on_refusal,
            retry_count=workload.retry_count(listed),
            backoff=self._backoff,
        )
        previous = listed.get("state")
        told = workload.state_message(
            update.message, previous=None if previous is None else str(previous)
        )
        if (previous, listed.get("message")) == (update.state, told):
            return update.state
        body = workload.build_check_state(
            current,
            check=check,
            state=update.state,
            resource_version=ResourceVersion(current["metadata"]["resourceVersion"]),
            message=update.message,
            now=clock.now(),
            requeue_after_seconds=update.requeue_after_seconds,
        )
        self._gateway.apply_workload_status(body, manager=workload.CHECK_MANAGER)
        return update.state

    def _emit(
        self,
        subject: Mapping[str, Any],
        event_type: events.EventType,
        reason: str,
        message: str,
        *,
        involved: events.Involved = events.TRAINJOB,
        name: str | None = None,
    ) -> None:
        """Post an Event from a thread of its own: best effort, and no gate waits on it."""
        self._events.submit(
            self._gateway.emit_event,
            subject,
            event_type=event_type,
            reason=reason,
            message=message,
            step=COMPONENT,
            name=name,
            involved=involved,
        )

    def close(self) -> None:
        """Post the Events still waiting (each is bounded by the gateway's Event timeout)."""
        self._events.shutdown(wait=True)
