"""`dispatch-audit`: detect resets, record the JobSet UID, flag the TrainJob foreign."""

from __future__ import annotations

from dispatch_k8s.core import output
from dispatch_k8s.core.auditing import audit_trainjob
from dispatch_k8s.core.errors import Foreign
from dispatch_k8s.core.gateway import Gateway
from dispatch_k8s.core.settings import TrainJobSettings


def run(settings: TrainJobSettings) -> output.Result:
    """Read the TrainJob, its JobSet and pods; write at most one annotation update."""
    gateway = Gateway.connect(kubeconfig=settings.kubeconfig, context=settings.context)
    outcome = audit_trainjob(gateway, settings.namespace, settings.name, step="audit")
    if outcome.findings:
        raise Foreign(f"flagged foreign: {outcome.cause}")
    return {
        "findings": 0,
        "resourceVersion": outcome.resource_version,
        "recorded": outcome.recorded,
    }


ABOUT = (
    "Detect resets of A or J (JobSet UID, runtime patch, live pods, executions) and record what\n"
    "it saw in at most one annotation update; on a finding, flag the TrainJob foreign and exit 7."
)
EXAMPLE = """\
dispatch-audit --namespace team-a --name train-42-3f9c1a2b
"""

main = output.entrypoint(run, TrainJobSettings, step="audit", about=ABOUT, example=EXAMPLE)
