"""`dispatch-unsuspend`: plain-mode Open and Release: raise A and unsuspend in one update."""

from __future__ import annotations

from loguru import logger

from dispatch_k8s.core.rules import decisions, events, trainjob
from dispatch_k8s.core.rules.errors import Refused
from dispatch_k8s.core.shell import carrying, runner
from dispatch_k8s.core.shell.settings import TrainJobSettings


def run(settings: TrainJobSettings) -> runner.Result:
    """Read the TrainJob and its JobSet, decide, write once, see that Trainer opened it, report."""
    gateway = runner.connect(settings)
    job = gateway.read_trainjob(settings.namespace, settings.name)
    if trainjob.is_kueue_managed(job):
        raise Refused(
            f"TrainJob {settings.name} is queued through Kueue: Kueue owns its suspension; "
            "use dispatch-admit and dispatch-approve"
        )
    done = trainjob.opened_by_last_raise(job)
    if done is not None and trainjob.foreign_flag(job) is None:
        # The update that raised A and opened the job applied; its answer may have been lost.
        logger.bind(admission=done).info("already open on its own raise: nothing to do")
        carrying.wait_carried(gateway, settings.namespace, settings.name)
        return {"admission": done, "resourceVersion": job["metadata"]["resourceVersion"]}
    jobset = gateway.read_jobset(settings.namespace, settings.name)
    decision = trainjob.decide_raise(job, jobset)
    if isinstance(decision, decisions.Refusal):
        raise trainjob.refusal_error(decision)
    body = trainjob.with_admission(job, decision, suspend=False)
    written = gateway.update_trainjob(body, decision.resource_version)
    logger.bind(admission=decision.admission).info("raised admission and unsuspended")
    gateway.emit_event(
        written,
        event_type="Normal",
        reason=events.RAISED,
        message=events.raise_message(admission=decision.admission, restart=decision.restart),
        step="unsuspend",
    )
    if runner.dry_run_of(settings) == "none":  # a dry run stored nothing for Trainer to open
        carrying.wait_carried(gateway, settings.namespace, settings.name)
    return {
        "admission": decision.admission,
        "resourceVersion": written["metadata"]["resourceVersion"],
        **runner.unsent(gateway),
    }


ABOUT = (
    "Plain mode Open and Release: raise A and unsuspend in one update, preconditioned on its read\n"
    "(6 while the last execution drains); then 9 where Trainer could not open the JobSet."
)
EXAMPLE = """\
dispatch-unsuspend --kubeconfig ~/.kube/config --namespace team-a --name train-42-3f9c1a2b
"""

main = runner.entrypoint(
    run,
    TrainJobSettings,
    step="unsuspend",
    about=ABOUT,
    example=EXAMPLE,
    acted_on=runner.the_trainjob,
)
