"""`dispatch-admit`: Kueue gate 1: raise A in the suspended TrainJob for this reservation."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from loguru import logger

from dispatch_k8s.core.rules import decisions, events, trainjob, wire, workload
from dispatch_k8s.core.rules.errors import PreconditionFailed, Refused, Transient
from dispatch_k8s.core.shell import runner
from dispatch_k8s.core.shell.gateway import kinds, watching
from dispatch_k8s.core.shell.settings import CHECK_DOC, ObjectName, TrainJobSettings, doc


class AdmitSettings(TrainJobSettings):
    """`dispatch-admit`: raise A for the Workload's current reservation."""

    check: Annotated[ObjectName, CHECK_DOC] = "dispatch-admission"
    wait: Annotated[
        bool,
        doc(
            "Wait for a reservation to act on (list, then watch) and for the last execution's "
            "Jobs to drain, instead of refusing (6); --no-wait turns it off.",
            default="off",
        ),
    ] = False
    timeout: Annotated[
        float,
        doc(
            "With --wait: how long to wait before giving up with exit 75.",
            metavar="SECONDS",
            default="300",
        ),
    ] = 300.0


def _reservation_among(
    workloads: Iterable[dict[str, Any]], job: Mapping[str, Any], settings: AdmitSettings
) -> workload.Reservation | workload.Skip | workload.Finished:
    skipped = workload.Skip(f"no Workload of TrainJob {settings.name} yet")
    for candidate in workloads:
        decision = workload.decide_reservation(candidate, job, check=settings.check)
        if isinstance(decision, decisions.Refusal):
            raise Refused(decision.reason)
        if isinstance(decision, workload.Reservation | workload.Finished):
            return decision
        logger.bind(reason=decision.reason).debug("not yet")
        skipped = decision
    return skipped


def _same_owner(found: workload.Reservation, job: Mapping[str, Any]) -> None:
    """Exit 3 if the TrainJob read afresh is a same-name replacement of the Workload's owner.

    The rerun reads the new TrainJob and gates its own Workload (found by its UID label).
    """
    replaced = workload.owner_replaced(found, job)
    if replaced is not None:
        raise PreconditionFailed(f"{replaced.reason}: run admit again")


def _finished(reason: str) -> runner.Result:
    # Nothing raised: a loop of gates reads `finished` and ends (docs/kueue.md: The steps in
    # Kueue mode).
    logger.bind(reason=reason).info("nothing more to gate")
    return {"finished": True}


def run(settings: AdmitSettings) -> runner.Result:
    """Find the reservation, read the TrainJob and JobSet, raise A once, report."""
    began = time.monotonic()
    gateway = runner.connect(settings)
    job = gateway.read_trainjob(settings.namespace, settings.name)
    for refusal in (trainjob.foreign_flag(job), trainjob.multikueue_refusal(job)):
        if refusal is not None:  # before any wait: no reservation of it is acted on
            raise trainjob.refusal_error(refusal)
    finished = trainjob.finished_reason(job)
    if finished is not None:
        return _finished(finished)
    selector = f"{wire.KUEUE_JOB_UID_LABEL}={job['metadata']['uid']}"
    if settings.wait:
        deadline = time.monotonic() + settings.timeout
        watched = watching.objects(
            watching.list_then_watch(
                gateway,
                kinds.WORKLOAD,
                settings.namespace,
                watch_seconds=lambda: deadline - time.monotonic(),
                label_selector=selector,
            )
        )
        found = _reservation_among(watched, job, settings)
        if isinstance(found, workload.Finished):
            return _finished(found.reason)
        if isinstance(found, workload.Skip):
            raise Transient(f"no admission to act on within {settings.timeout:g}s: {found.reason}")
        # Kueue may have written the TrainJob while we waited: decide on a fresh read.
        job = gateway.read_trainjob(settings.namespace, settings.name)
    else:
        listed = gateway.list_workloads(settings.namespace, selector)
        if len(listed) > 1:
            raise Refused(f"TrainJob {settings.name} has {len(listed)} Workloads; expected one")
        found = _reservation_among(listed, job, settings)
        if isinstance(found, workload.Finished):
            return _finished(found.reason)
        if isinstance(found, workload.Skip):
            raise Refused(f"nothing to admit: {found.reason}")
    jobset = gateway.read_jobset(settings.namespace, settings.name)
    decision = trainjob.decide_raise(job, jobset)
    if settings.wait and isinstance(decision, trainjob.Draining):
        # A new reservation can come before the last execution's Jobs have drained.
        logger.info(decision.reason)
        jobset = watching.poll(
            lambda: gateway.read_jobset(settings.namespace, settings.name),
            lambda read: trainjob.active_replicated_job(read) is None,
            timeout=max(0.0, settings.timeout - (time.monotonic() - began)),
            what=f"JobSet {settings.name} to drain",
        )
        job = gateway.read_trainjob(settings.namespace, settings.name)
        decision = trainjob.decide_raise(job, jobset)
    _same_owner(found, job)  # each read of the job above was by name
    if isinstance(decision, decisions.Refusal):
        raise trainjob.refusal_error(decision)
    written = gateway.update_trainjob(
        trainjob.with_admission(job, decision, raised_for=found.record), decision.resource_version
    )
    logger.bind(admission=decision.admission, workload=found.workload).info("raised admission")
    message = events.raise_message(
        admission=decision.admission, restart=decision.restart, workload=found.workload
    )
    gateway.emit_event(
        written, event_type="Normal", reason=events.RAISED, message=message, step="admit"
    )
    return {
        "admission": decision.admission,
        "resourceVersion": written["metadata"]["resourceVersion"],
        "workload": found.workload,
        "workloadResourceVersion": found.resource_version,
        "reservedAt": found.reserved_at,
        "finished": False,
        **runner.unsent(gateway),
    }


ABOUT = (
    "Kueue gate 1: raise A in the suspended TrainJob for its Workload's current reservation,\n"
    "in one update preconditioned on the TrainJob read; dispatch-approve then opens the gate."
)
EXAMPLE = """\
dispatch-admit --namespace team-a --name train-42-3f9c1a2b --wait --timeout 3600 \\
    --outputs-dir /tmp/out
"""

main = runner.entrypoint(
    run, AdmitSettings, step="admit", about=ABOUT, example=EXAMPLE, acted_on=runner.the_trainjob
)
