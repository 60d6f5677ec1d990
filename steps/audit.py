"""`dispatch-audit`: detect resets, record the JobSet UID, flag the TrainJob foreign."""

from __future__ import annotations

from loguru import logger

from dispatch_k8s.core import audit, events, output, trainjob, wire
from dispatch_k8s.core.errors import Foreign
from dispatch_k8s.core.gateway import Gateway
from dispatch_k8s.core.settings import TrainJobSettings


def run(settings: TrainJobSettings) -> output.Result:
    """Read the TrainJob, its JobSet and pods; write at most one annotation update."""
    gateway = Gateway.connect(kubeconfig=settings.kubeconfig, context=settings.context)
    job = gateway.read_trainjob(settings.namespace, settings.name)
    jobset = gateway.read_jobset(settings.namespace, settings.name)
    ref = job.get("spec", {}).get("runtimeRef") or {}
    runtime = gateway.find_runtime(
        str(ref.get("kind", "ClusterTrainingRuntime")), str(ref.get("name")), settings.namespace
    )
    selector = f"{wire.JOBSET_NAME_KEY}={settings.name}"
    jobs = gateway.list_jobs(settings.namespace, selector)
    pods = gateway.list_pods(settings.namespace, selector)
    findings, observed = audit.decide_audit(job, jobset, pods=pods, runtime_now=runtime, jobs=jobs)
    changes = audit.decide_annotations(job, findings, jobset=jobset, observed=observed)
    version = job["metadata"]["resourceVersion"]
    if changes:
        body = audit.with_annotations(job, changes)
        written = gateway.update_trainjob(body, trainjob.ResourceVersion(version))
        version = written["metadata"]["resourceVersion"]
        logger.bind(annotations=sorted(changes)).info("updated TrainJob annotations")
    for finding in findings:
        logger.bind(kind=str(finding.kind)).warning(finding.reason)
    if changes and wire.FOREIGN_CAUSE_ANNOTATION in changes:
        # Only findings not told before: an audit every 15 minutes must not repeat them.
        for finding in findings[: audit.MAX_EVENTS]:
            gateway.emit_event(
                job,
                event_type="Warning",
                reason=events.FLAGGED,
                message=f"{finding.kind}: {finding.reason}",
                step="audit",
            )
    if findings:
        cause = audit.build_cause([finding.reason for finding in findings])
        raise Foreign(f"flagged foreign: {cause}")
    return {"findings": 0, "resourceVersion": version, "recorded": bool(changes)}


ABOUT = (
    "Detect resets of A or J (JobSet UID, runtime patch, live pods, executions) and record what\n"
    "it saw in at most one annotation update; on a finding, flag the TrainJob foreign and exit 7."
)
EXAMPLE = """\
dispatch-audit --namespace team-a --name train-42-3f9c1a2b
"""

main = output.entrypoint(run, TrainJobSettings, step="audit", about=ABOUT, example=EXAMPLE)
