"""`dispatch-start`: validate the runtime, build the suspended TrainJob, create it once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loguru import logger

from dispatch_k8s.core import output, runtime, trainjob
from dispatch_k8s.core.errors import BadInput, Refused
from dispatch_k8s.core.gateway import Gateway
from dispatch_k8s.core.request import StartRequest
from dispatch_k8s.core.settings import StartSettings, read_document


def _runtime_from_file(settings: StartSettings) -> tuple[StartRequest, dict[str, Any]]:
    if settings.runtime_file is None:
        raise BadInput("--dry-run needs --runtime-file: a dry run contacts no cluster")
    document = read_document(settings.runtime_file, what="runtime file")
    meta = document.get("metadata") or {}
    # The file names the runtime unless the request does; a mismatch is a mistake.
    defaults = {"runtime_kind": document.get("kind"), "runtime_name": meta.get("name")}
    request = settings.start_request(runtime_defaults={k: v for k, v in defaults.items() if v})
    if (request.runtime_kind, request.runtime_name) != (defaults["runtime_kind"], meta.get("name")):
        raise BadInput(
            f"the request names {request.runtime_kind} {request.runtime_name} but "
            f"{settings.runtime_file} holds {defaults['runtime_kind']} {meta.get('name')}"
        )
    return request, document


def _trainer_job(request: StartRequest, runtime_object: Mapping[str, Any]) -> str:
    words = {"command": request.command, "args": request.args, "env": request.env}
    violations = runtime.decide_violations(runtime_object, words)
    if violations:
        raise Refused(runtime.build_refusal(runtime_object, violations))
    name = runtime.trainer_job_name(runtime_object)
    if name is None:  # decide_violations reports this; kept for the type checker
        raise Refused(runtime.build_refusal(runtime_object, violations))
    return name


def _check_queued(request: StartRequest, runtime_object: Mapping[str, Any]) -> None:
    """Kueue mode: the pods must request a resource, or no admission check ever applies."""
    if request.queue is None:
        return
    if runtime.requested_resources(runtime_object, request.resources_per_node):
        return
    raise Refused(
        f"queue {request.queue}: the TrainJob's pods would request no resource, so Kueue would "
        "assign them no flavor and admit them without any admission check, and A would never "
        "be raised: give resources_per_node requests (--resources-per-node "
        '\'{"requests":{"cpu":"1"}}\') or requests in the runtime\'s trainer container'
    )


def _same_request(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return trainjob.recorded_identity(existing) == trainjob.recorded_identity(wanted)


def run(settings: StartSettings) -> output.Result:
    """Read the runtime, decide, create the TrainJob once, report."""
    if settings.dry_run:
        request, runtime_object = _runtime_from_file(settings)
        _check_queued(request, runtime_object)
        return trainjob.build_trainjob(request, trainer_job=_trainer_job(request, runtime_object))
    request = settings.start_request()
    gateway = Gateway.connect(kubeconfig=settings.kubeconfig, context=settings.context)
    runtime_object = gateway.read_runtime(
        request.runtime_kind, request.runtime_name, request.namespace
    )
    _check_queued(request, runtime_object)
    wanted = trainjob.build_trainjob(
        request, trainer_job=_trainer_job(request, runtime_object), runtime=runtime_object
    )
    log = logger.bind(namespace=request.namespace, trainjob=request.trainjob_name)
    created = gateway.create_trainjob(wanted)
    if created is None:
        existing = gateway.read_trainjob(request.namespace, request.trainjob_name)
        if not _same_request(existing, wanted):
            raise Refused(
                f"TrainJob {request.namespace}/{request.trainjob_name} exists with another "
                f"identity or request: recorded {trainjob.recorded_identity(existing)}"
            )
        log.info("TrainJob exists with the same request: nothing to do")
        created, outcome = existing, "exists"
    else:
        log.info("created TrainJob")
        outcome = "created"
    meta = created["metadata"]
    return {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta["uid"],
        "resourceVersion": meta["resourceVersion"],
        "outcome": outcome,
        "epochPrefix": str(request.identity.epoch_prefix),
        "tokenPrefix": request.identity.token_prefix,
    }


ABOUT = (
    "Validate the runtime, build the TrainJob (suspended, its command wrapped in the prologue)\n"
    "and create it once; the same request again is a no-op, another one on its name is refused."
)
EXAMPLE = """\
dispatch-start --namespace team-a --runtime-name dispatch-torch-distributed --job-id train-42 \\
    --generation 3 --submission 7 --attempt 2 --image registry.example/trainer:1 \\
    --command python --command train.py --args=--lr --args=0.1
"""

main = output.entrypoint(run, StartSettings, step="start", about=ABOUT, example=EXAMPLE)
