"""Audits of TrainJobs: read them and what they own, decide (`core.rules.audit`), write once each.

Shell, not rule: `dispatch-audit` runs it for one TrainJob or every managed one of a
namespace, the admission controller's auditor each time a managed TrainJob or something it
owns changes. All make the same decisions through the same pure functions, so they can never
disagree.

A namespace is read in one pass whatever its size: its TrainJobs, JobSets, Jobs and pods are
each listed once (pods page by page, each handed to the audits that claim it and dropped), so
memory grows with the jobs audited, not with their pods.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import yaml
from loguru import logger

from dispatch_k8s.core.rules import (
    audit,
    decisions,
    erasure,
    events,
    gate,
    ledger,
    opening,
    ownership,
    shapes,
    snapshot,
    wire,
)
from dispatch_k8s.core.rules.erasure import Erasure
from dispatch_k8s.core.rules.errors import DispatchError, NotFound
from dispatch_k8s.core.shell.gateway import Gateway

# libyaml's loader, where PyYAML was built with it (its wheels are): the auditor parses a job's
# snapshot at each pass of it, and the pure-Python loader takes ten times as long.
_YAML_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Erasures = tuple[Erasure, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditOutcome:
    """What one audit found and wrote."""

    name: str
    findings: tuple[audit.Finding, ...]
    recorded: bool  # the TrainJob's annotations were updated
    resource_version: str  # of the TrainJob as written, or as read when nothing was written

    @property
    def cause(self) -> str:
        """The findings as the foreign-cause annotation tells them."""
        return audit.build_cause([finding.reason for finding in self.findings])


def audit_trainjob(gateway: Gateway, namespace: str, name: str, *, step: str) -> AuditOutcome:
    """Audit one TrainJob: read it and everything it owns, write at most one update.

    Every Job and pod of the namespace is read, so one whose labels were removed is still
    claimed. The update (records and any flag) is preconditioned on the TrainJob as read, so
    a change made meanwhile fails it (409) and the audit is run again from a fresh read.
    Findings not told before are posted as Warning Events, best effort, after the update.
    """
    return _read_and_record(
        gateway,
        namespace,
        name,
        jobs=lambda: gateway.list_jobs(namespace),
        pods=lambda: gateway.list_pods(namespace),
        step=step,
    )


def audit_namespace(
    gateway: Gateway, namespace: str, *, selector: str | None, step: str
) -> Iterator[AuditOutcome | tuple[str, DispatchError]]:
    """Audit every dispatch-managed TrainJob of a namespace (that `selector` matches).

    Yields each job's outcome, or its name and the error that stopped its write (a 409: it
    changed meanwhile), in the order listed; one job's error never stops the others'.
    """
    jobs = [
        job for job in gateway.list_trainjobs(namespace, selector) if gate.is_dispatch_managed(job)
    ]
    jobsets = _by_name(gateway.list_jobsets(namespace))
    audits = _audits(gateway, namespace, jobs, jobsets)
    after = _by_name(gateway.list_jobsets(namespace))
    for audited in audits:
        try:
            yield _record(gateway, audited, jobset_after=after.get(audited.name), step=step)
        except NotFound:
            logger.bind(trainjob=audited.name).info("deleted while audited: nothing to record")
        except DispatchError as e:
            yield audited.name, e


@dataclass(frozen=True, slots=True, kw_only=True)
class _Audited:
    name: str
    trainjob: dict[str, Any]
    jobset: Mapping[str, Any] | None
    audit: audit.JobAudit


def _audits(
    gateway: Gateway,
    namespace: str,
    trainjobs: Iterable[dict[str, Any]],
    jobsets: Mapping[str, Mapping[str, Any]],
) -> list[_Audited]:
    """Each TrainJob's audit, fed its Jobs and pods from one list of each in the namespace.

    Every Job and pod is kept for the TrainJobs that own it by label, owner reference or the
    trainer it runs (core.rules.ownership), so a removed label hides nothing.
    """
    trainjobs = list(trainjobs)
    lineages = {
        str(job["metadata"]["name"]): ownership.lineage_of(
            job, jobsets.get(job["metadata"]["name"])
        )
        for job in trainjobs
    }
    job_claims: ownership.Claims[str] = ownership.Claims()
    for name, lineage in lineages.items():
        job_claims.add(lineage, name, uids=[lineage.jobset_uid] if lineage.jobset_uid else [])
    children: dict[str, list[dict[str, Any]]] = {name: [] for name in lineages}
    for child in gateway.list_jobs(namespace):
        for name in job_claims.owners_of_job(child):
            children[name].append(child)
    runtimes = _Runtimes(gateway, namespace)
    audited: list[_Audited] = []
    pod_claims: ownership.Claims[audit.JobAudit] = ownership.Claims()
    for job in trainjobs:
        name = str(job["metadata"]["name"])
        jobset = jobsets.get(name)
        job_audit = audit.JobAudit(job, jobset, runtime_now=runtimes.now(job), jobs=children[name])
        pod_claims.add(job_audit.lineage, job_audit, uids=job_audit.lineage.job_uids)
        audited.append(_Audited(name=name, trainjob=job, jobset=jobset, audit=job_audit))
    for pod in gateway.list_pods(namespace):
        for job_audit in pod_claims.owners_of_pod(pod):
            job_audit.see(pod)
    return audited


def runtime_ref(trainjob: Mapping[str, Any]) -> tuple[str, str]:
    """The kind and name of the runtime a TrainJob names."""
    ref = shapes.at(trainjob, "spec", "runtimeRef")
    return str(ref.get("kind", "ClusterTrainingRuntime")), str(ref.get("name"))


class _Runtimes:
    """Each runtime the audited jobs name, read once; each job's snapshot of it, read afresh."""

    def __init__(self, gateway: Gateway, namespace: str) -> None:
        self._gateway, self._namespace = gateway, namespace
        self._read: dict[tuple[str, str], dict[str, Any] | None] = {}

    def now(self, trainjob: Mapping[str, Any]) -> dict[str, Any] | snapshot.Snapshot | None:
        """What the job is built from: its runtime snapshot where it has one, else its runtime."""
        taken = read_snapshot(self._gateway, self._namespace, trainjob)
        if taken is not None:
            return taken
        key = runtime_ref(trainjob)
        if key not in self._read:
            self._read[key] = self._gateway.find_runtime(*key, self._namespace)
        return self._read[key]


def read_snapshot(
    gateway: Gateway, namespace: str, trainjob: Mapping[str, Any]
) -> snapshot.Snapshot | None:
    """The TrainJob's runtime snapshot (Trainer v2.3.0 and later take one), None without one."""
    name = snapshot.snapshot_name(str(shapes.mapping(trainjob.get("metadata")).get("name")))
    found = gateway.find_config_map(namespace, name)
    return None if found is None else snapshot_of(found)


def snapshot_of(config_map: Mapping[str, Any]) -> snapshot.Snapshot:
    """A runtime snapshot ConfigMap as the audit compares it: its owner and the runtime it holds."""
    text = shapes.mapping(config_map.get("data")).get(wire.RUNTIME_SNAPSHOT_KEY)
    try:
        runtime = yaml.load(text, Loader=_YAML_LOADER) if isinstance(text, str) else None
    except yaml.YAMLError:
        runtime = None  # a finding, as a copy that holds no runtime
    return snapshot.Snapshot(
        name=str(shapes.mapping(config_map.get("metadata")).get("name")),
        owner_uid=snapshot.controller_uid(config_map),
        runtime=runtime if isinstance(runtime, Mapping) else None,
    )


def _by_name(objects: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(obj["metadata"]["name"]): obj for obj in objects}


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What one audit found and the annotations its one update sets (None: no update)."""

    findings: tuple[audit.Finding, ...]
    changes: dict[str, str] | None


def decide(
    trainjob: Mapping[str, Any],
    jobset: Mapping[str, Any] | None,
    job_audit: audit.JobAudit,
    *,
    jobset_after: Mapping[str, Any] | None,
    created: Mapping[str, Any] | None,
    erased: Erasures = (),
) -> Decision:
    """The findings of an audit fed everything it claims, and the update they call for.

    `created`: the ledger's record that start created the TrainJob's identity (`ledger_record`).
    `erased`: the records the caller saw moved back (core.rules.erasure), already put back in
    `trainjob` (and in what `job_audit` was given): they are findings of their own.
    """
    findings, observed = job_audit.result(jobset_after=jobset_after)
    unraised = opening.decide_unraised_opening(trainjob) or opening.decide_unearned_records(
        trainjob
    )
    if unraised is not None:  # first: it says how the execution began (or none can rightly)
        findings = (unraised, *findings)
    remade = ledger.decide_remade(trainjob, created)
    if remade is not None:  # before all: the whole TrainJob is not the one start made
        findings = (remade, *findings)
    findings = (*(e.finding for e in erased), *findings)
    changes = audit.decide_annotations(trainjob, findings, jobset=jobset, observed=observed)
    # What was put back is written back, even where the flag says nothing new (erased twice).
    annotations = shapes.annotations_of(trainjob)
    restoring = {e.annotation: e.value for e in erased if annotations.get(e.annotation) == e.value}
    return Decision(findings=findings, changes={**restoring, **(changes or {})} or None)


def ledger_record(gateway: Gateway, trainjob: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ledger's "created" record for the TrainJob's identity (core.rules.ledger), if any."""
    name = ledger.recorded_name(trainjob)
    if name is None:
        return None
    return gateway.find_config_map(str(trainjob["metadata"]["namespace"]), name)


def audit_of(
    trainjob: Mapping[str, Any],
    jobset: Mapping[str, Any] | None,
    *,
    runtime_now: Mapping[str, Any] | snapshot.Snapshot | None,
    jobs: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
) -> audit.JobAudit:
    """One TrainJob's audit, fed those of `jobs` and `pods` it owns (core.rules.ownership)."""
    lineage = ownership.lineage_of(trainjob, jobset)
    owned = [job for job in jobs if lineage.claims_job(job)]
    job_audit = audit.JobAudit(trainjob, jobset, runtime_now=runtime_now, jobs=owned)
    for pod in pods:
        if job_audit.claims(pod):
            job_audit.see(pod)
    return job_audit


Objects = Iterable[Mapping[str, Any]]


def audit_read(
    gateway: Gateway,
    namespace: str,
    name: str,
    *,
    also: tuple[Objects, Objects] = ((), ()),
    erased: Erasures = (),
    step: str,
) -> AuditOutcome:
    """Audit one TrainJob as `audit_trainjob` does, reading only what carries its JobSet's label.

    Its Jobs and pods are listed by the `jobset-name` label, so the cost does not grow with the
    namespace's other pods; `also` adds the Jobs and pods the caller knows of without it (the
    controller's store: core.rules.ownership claims them by owner or by the trainer they run), and
    `erased` the records it saw moved back, which are put back in the TrainJob as read.
    """
    selector = f"{wire.JOBSET_NAME_KEY}={name}"
    return _read_and_record(
        gateway,
        namespace,
        name,
        jobs=lambda: [*gateway.list_jobs(namespace, selector), *also[0]],
        pods=lambda: itertools.chain(gateway.list_pods(namespace, selector), also[1]),
        erased=erased,
        step=step,
    )


def _read_and_record(
    gateway: Gateway,
    namespace: str,
    name: str,
    *,
    jobs: Callable[[], Objects],
    pods: Callable[[], Objects],
    erased: Erasures = (),
    step: str,
) -> AuditOutcome:
    """Read the TrainJob, its JobSet, `jobs`, `pods` and the JobSet again; decide; write once."""
    job = erasure.restored(gateway.read_trainjob(namespace, name), erased)
    jobset = gateway.read_jobset(namespace, name)
    runtime_now = _Runtimes(gateway, namespace).now(job)
    job_audit = audit_of(job, jobset, runtime_now=runtime_now, jobs=jobs(), pods=pods())
    after = gateway.read_jobset(namespace, name)
    created = ledger_record(gateway, job)
    decision = decide(job, jobset, job_audit, jobset_after=after, created=created, erased=erased)
    return write(gateway, job, decision, step=step)


def _record(
    gateway: Gateway,
    audited: _Audited,
    *,
    jobset_after: Mapping[str, Any] | None,
    step: str,
) -> AuditOutcome:
    """The audit's one update of a TrainJob (if anything changes), then its Events."""
    decision = decide(
        audited.trainjob,
        audited.jobset,
        audited.audit,
        jobset_after=jobset_after,
        created=ledger_record(gateway, audited.trainjob),
    )
    return write(gateway, audited.trainjob, decision, step=step)


def write(
    gateway: Gateway, job: Mapping[str, Any], decision: Decision, *, step: str
) -> AuditOutcome:
    """The update a decision calls for, preconditioned on `job` as read, then its Events."""
    findings, changes = decision.findings, decision.changes
    name = str(job["metadata"]["name"])
    version: str = job["metadata"]["resourceVersion"]
    bound = logger.bind(trainjob=name)
    if changes:
        body = audit.with_annotations(job, changes)
        written = gateway.update_trainjob(body, decisions.ResourceVersion(version))
        version = written["metadata"]["resourceVersion"]
        bound.bind(annotations=sorted(changes)).info("updated TrainJob annotations")
    for finding in findings:
        bound.bind(kind=str(finding.kind)).warning(finding.reason)
    if changes and wire.FOREIGN_CAUSE_ANNOTATION in changes:
        # Only findings not told before: an audit every 15 minutes must not repeat them.
        for finding in findings[: audit.MAX_EVENTS]:
            gateway.emit_event(
                job,
                event_type="Warning",
                reason=events.FLAGGED,
                message=f"{finding.kind}: {finding.reason}",
                step=step,
            )
    return AuditOutcome(
        name=name, findings=findings, recorded=bool(changes), resource_version=version
    )
