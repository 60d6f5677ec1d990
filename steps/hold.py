"""`dispatch-hold`: plain-mode hold: suspend the TrainJob, preconditioned on the read."""

from __future__ import annotations

import copy

from loguru import logger

from core import output, trainjob
from core.errors import Refused
from core.gateway import Gateway
from core.settings import TrainJobSettings


def run(settings: TrainJobSettings) -> output.Result:
    """Read the TrainJob, decide, write once (or not at all if already held), report."""
    gateway = Gateway.connect(kubeconfig=settings.kubeconfig, context=settings.context)
    job = gateway.read_trainjob(settings.namespace, settings.name)
    if trainjob.is_kueue_managed(job):
        raise Refused(
            f"TrainJob {settings.name} is queued through Kueue, which unsuspends any admitted "
            "job: hold it through its Workload (spec.active: false)"
        )
    version = job["metadata"]["resourceVersion"]
    if job.get("spec", {}).get("suspend") is True:
        logger.info("already suspended: nothing to do")
        return {"held": True, "changed": False, "resourceVersion": version}
    body = copy.deepcopy(job)
    body["spec"]["suspend"] = True
    written = gateway.update_trainjob(body, trainjob.ResourceVersion(version))
    logger.info("suspended")
    return {
        "held": True,
        "changed": True,
        "resourceVersion": written["metadata"]["resourceVersion"],
    }


main = output.entrypoint(run, TrainJobSettings, step="hold")
