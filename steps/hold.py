"""`dispatch-hold`: plain-mode hold: suspend the TrainJob, preconditioned on the read."""

from __future__ import annotations

from loguru import logger

from dispatch_k8s.core.rules import decisions, trainjob
from dispatch_k8s.core.rules.errors import Refused
from dispatch_k8s.core.shell import carrying, runner
from dispatch_k8s.core.shell.settings import TrainJobSettings


def run(settings: TrainJobSettings) -> runner.Result:
    """Read the TrainJob and its JobSet, write once (or not at all), see it held, report."""
    gateway = runner.connect(settings)
    job = gateway.read_trainjob(settings.namespace, settings.name)
    if trainjob.is_kueue_managed(job):
        raise Refused(
            f"TrainJob {settings.name} is queued through Kueue, which unsuspends any admitted "
            "job: hold it through its Workload (spec.active: false)"
        )
    version = job["metadata"]["resourceVersion"]
    if job.get("spec", {}).get("suspend") is True:
        logger.info("already suspended: nothing to do")
        carrying.wait_carried(gateway, settings.namespace, settings.name)
        return {"held": True, "changed": False, "resourceVersion": version}
    body = trainjob.with_hold(job, gateway.read_jobset(settings.namespace, settings.name))
    written = gateway.update_trainjob(body, decisions.ResourceVersion(version))
    logger.info("suspended")
    if runner.dry_run_of(settings) == "none":  # a dry run stored nothing for Trainer to carry
        carrying.wait_carried(gateway, settings.namespace, settings.name)
    return {
        "held": True,
        "changed": True,
        "resourceVersion": written["metadata"]["resourceVersion"],
        **runner.unsent(gateway),
    }


ABOUT = (
    "Plain mode hold: suspend the TrainJob and record its JobSet's J in one update, on the job as\n"
    "read (one queued through Kueue refused); then 10 where Trainer could not suspend the JobSet."
)
EXAMPLE = """\
dispatch-hold --kubeconfig ~/.kube/config --namespace team-a --name train-42-3f9c1a2b
"""

main = runner.entrypoint(
    run, TrainJobSettings, step="hold", about=ABOUT, example=EXAMPLE, acted_on=runner.the_trainjob
)
