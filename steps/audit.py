"""`dispatch-audit`: detect resets, record what was seen, flag the TrainJob foreign."""

from __future__ import annotations

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.rules.errors import DispatchError, Foreign
from dispatch_k8s.core.shell import runner
from dispatch_k8s.core.shell.auditing import AuditOutcome, audit_namespace, audit_trainjob
from dispatch_k8s.core.shell.gateway import kinds
from dispatch_k8s.core.shell.settings import TargetSettings, WritingSettings


class AuditSettings(TargetSettings, WritingSettings):
    """`dispatch-audit`: audit one TrainJob or a namespace's, each with at most one update."""


def run(settings: AuditSettings) -> runner.Result | runner.Report:
    """Audit one TrainJob or a namespace's; at most one annotation update per TrainJob."""
    gateway = runner.connect(settings)
    if settings.name is not None:
        outcome = audit_trainjob(gateway, settings.namespace, settings.name, step="audit")
        if outcome.findings:
            raise Foreign(f"flagged foreign: {outcome.cause}")
        return {**_line(outcome), **runner.unsent(gateway)}
    selector = settings.selector or f"{wire.MANAGED_BY_LABEL}={wire.MANAGED_BY}"
    lines: list[runner.Result] = []
    flagged: list[str] = []
    failed: list[DispatchError] = []
    for audited in audit_namespace(gateway, settings.namespace, selector=selector, step="audit"):
        if isinstance(audited, AuditOutcome):
            lines.append({"name": audited.name, **_line(audited), **runner.unsent(gateway)})
            if audited.findings:
                flagged.append(audited.name)
        else:
            name, stopped = audited
            lines.append({"name": name, "error": str(stopped), "exitCode": stopped.exit_code})
            failed.append(stopped)
    summary = {"audited": len(lines), "flagged": len(flagged)}
    error: DispatchError | None = failed[0] if failed else None
    if flagged:  # a person's decision outranks a rerun: 7 wins over a 3 of another job
        error = Foreign(f"flagged foreign: {len(flagged)} of {len(lines)}: {', '.join(flagged)}")
    return runner.Report(lines=lines, summary=summary, error=error)


def _line(outcome: AuditOutcome) -> runner.Result:
    return {
        "findings": len(outcome.findings),
        "resourceVersion": outcome.resource_version,
        "recorded": outcome.recorded,
    }


ABOUT = (
    "Detect resets of A or J (JobSet, runtime patch, Jobs, pods, executions) of one TrainJob or a\n"
    "namespace's; record what was seen, one update per job; a finding flags the job foreign (7)."
)
EXAMPLE = """\
dispatch-audit --namespace team-a --name train-42-3f9c1a2b
dispatch-audit --namespace team-a --all
"""


def acted_on(settings: AuditSettings, line: runner.Result) -> str:
    """`-o name`: the TrainJob a line is about (--all's lines name theirs, --name's the flag)."""
    return kinds.TRAINJOB.kubectl_name(str(line.get("name", settings.name)))


main = runner.entrypoint(
    run, AuditSettings, step="audit", about=ABOUT, example=EXAMPLE, acted_on=acted_on
)
