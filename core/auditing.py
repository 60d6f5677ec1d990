"""One audit of one TrainJob: read it and what it owns, decide (`core.audit`), write at most once.

Shell, not rule: `dispatch-audit` runs it once per TrainJob it is asked about, the admission
controller's auditor each time a managed TrainJob or something it owns changes. Both make the
same decisions through the same pure functions, so the two can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loguru import logger

from dispatch_k8s.core import audit, events, opening, trainjob, wire
from dispatch_k8s.core.gateway import Gateway


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditOutcome:
    """What one audit found and wrote."""

    findings: tuple[audit.Finding, ...]
    recorded: bool  # the TrainJob's annotations were updated
    resource_version: str  # of the TrainJob as written, or as read when nothing was written

    @property
    def cause(self) -> str:
        """The findings as the foreign-cause annotation tells them."""
        return audit.build_cause([finding.reason for finding in self.findings])


def audit_trainjob(gateway: Gateway, namespace: str, name: str, *, step: str) -> AuditOutcome:
    """Read the TrainJob, its runtime, JobSet, Jobs and pods; write at most one update.

    The update (records and any flag) is preconditioned on the TrainJob as read, so a change
    made meanwhile fails it (409) and the audit is run again from a fresh read. Findings not
    told before are posted as Warning Events, best effort, after the update.
    """
    job = gateway.read_trainjob(namespace, name)
    jobset = gateway.read_jobset(namespace, name)
    ref = job.get("spec", {}).get("runtimeRef") or {}
    runtime = gateway.find_runtime(
        str(ref.get("kind", "ClusterTrainingRuntime")), str(ref.get("name")), namespace
    )
    selector = f"{wire.JOBSET_NAME_KEY}={name}"
    jobs = gateway.list_jobs(namespace, selector)
    pods = gateway.list_pods(namespace, selector)
    findings, observed = audit.decide_audit(job, jobset, pods=pods, runtime_now=runtime, jobs=jobs)
    unraised = opening.decide_unraised_opening(job)
    if unraised is not None:  # first: it says how the execution the others describe began
        findings = (unraised, *findings)
    changes = audit.decide_annotations(job, findings, jobset=jobset, observed=observed)
    version: str = job["metadata"]["resourceVersion"]
    if changes:
        body = audit.with_annotations(job, changes)
        written = gateway.update_trainjob(body, trainjob.ResourceVersion(version))
        version = written["metadata"]["resourceVersion"]
        logger.bind(annotations=sorted(changes)).info("updated TrainJob annotations")
    for finding in findings:
        logger.bind(kind=str(finding.kind)).warning(finding.reason)
    if changes and wire.FOREIGN_CAUSE_ANNOTATION in changes:
        # Only findings not told before: an audit every 15 minutes must not repeat them.
        _tell(gateway, job, findings, step=step)
    return AuditOutcome(findings=findings, recorded=bool(changes), resource_version=version)


def _tell(
    gateway: Gateway, job: dict[str, Any], findings: tuple[audit.Finding, ...], *, step: str
) -> None:
    for finding in findings[: audit.MAX_EVENTS]:
        gateway.emit_event(
            job,
            event_type="Warning",
            reason=events.FLAGGED,
            message=f"{finding.kind}: {finding.reason}",
            step=step,
        )
