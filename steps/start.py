"""`dispatch-start`: validate the runtime, build the suspended TrainJob, create it once (ledger)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from loguru import logger

from dispatch_k8s.core.rules import decisions, ledger, runtime, snapshot, trainjob, wire
from dispatch_k8s.core.rules.errors import BadInput, PreconditionFailed, Refused
from dispatch_k8s.core.rules.request import StartRequest
from dispatch_k8s.core.shell import runner
from dispatch_k8s.core.shell.gateway import Gateway, kinds
from dispatch_k8s.core.shell.settings import read_document
from dispatch_k8s.steps.start_settings import StartSettings

# Three creates at most (claim, TrainJob, record), then done: more rounds mean records are
# being deleted as start makes them.
ROUNDS: Final = 4


def _runtime_from_file(settings: StartSettings) -> tuple[StartRequest, dict[str, Any]]:
    if settings.runtime_file is None:
        raise BadInput(
            "--dry-run=client needs --runtime-file: a client dry run contacts no cluster "
            "(--dry-run=server reads the cluster's runtime)"
        )
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


def _check_queued(
    request: StartRequest, runtime_object: Mapping[str, Any], *, kueue_mode: str
) -> None:
    """Check mode: the pods must request a resource, or no admission check ever applies.

    In policy mode the API server raises A in Kueue's opening, whatever Kueue assigned.
    """
    if request.queue is None or kueue_mode == "policy":
        return
    if runtime.requested_resources(runtime_object, request.resources_per_node):
        return
    raise Refused(
        f"queue {request.queue}: the TrainJob's pods would request no resource, so Kueue would "
        "assign them no flavor and admit them without any admission check, and A would never "
        "be raised: give resources_per_node requests (--resources-per-node "
        '\'{"requests":{"cpu":"1"}}\') or requests in the runtime\'s trainer container, or '
        "install Kueue's policy mode and start with --kueue-mode policy"
    )


def _create(gateway: Gateway, wanted: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """Claim the identity, create the TrainJob, record it: each create once, as decided.

    Reads come in the order of the creates, so a start running beside another one sees a
    prefix of its creates and carries on from there (core/rules/ledger.py). A create that finds its
    object already made (by that other start) reads it and decides again.
    """
    meta = wanted["metadata"]
    namespace = meta["namespace"]
    log = logger.bind(namespace=namespace, trainjob=meta["name"])
    claim = gateway.find_config_map(namespace, ledger.claim_name(wanted))
    created = gateway.find_config_map(namespace, ledger.created_name(wanted))
    job = gateway.find_trainjob(namespace, meta["name"])
    outcome = "exists"
    for _ in range(ROUNDS):
        action = ledger.decide_start(wanted, claim=claim, created=created, trainjob=job)
        if isinstance(action, decisions.Refusal):
            raise Refused(action.reason)
        if isinstance(action, ledger.Done):
            old_trainer = trainjob.decide_patch_stored(action.trainjob)
            if old_trainer is not None:
                raise Refused(old_trainer.reason)
            if outcome == "exists":
                log.info("TrainJob exists with the same request: nothing to do")
            return action.trainjob, outcome
        if isinstance(action, ledger.CreateTrainJob):
            # Trainer v2.3.0 and later build a job from a snapshot of its runtime where one is
            # there already: a new job must find none, or it runs what start never checked.
            taken = gateway.find_config_map(namespace, snapshot.snapshot_name(meta["name"]))
            if taken is not None:
                # Or another start of the request made the job since our read, and Trainer its
                # snapshot: decide on the job made.
                job = gateway.find_trainjob(namespace, meta["name"])
                if job is not None:
                    continue
            refusal = snapshot.decide_none_before_start(wanted, taken)
            if refusal is not None:
                raise Refused(refusal.reason)
            try:
                job = gateway.create_trainjob(wanted)
            except Refused:
                # The ledger policy refuses a TrainJob whose identity has a "created" record
                # (pipelines/policies/ledger.yaml) before the API server would say one of its
                # name exists: another start made both since our reads. Decide on what it made.
                created = gateway.find_config_map(namespace, ledger.created_name(wanted))
                if created is None:
                    raise
                job = gateway.find_trainjob(namespace, meta["name"])
                continue
            if job is None:
                job = gateway.find_trainjob(namespace, meta["name"])
            else:
                log.info("created TrainJob")
                outcome = "created"
            continue
        record = action.body
        name = record["metadata"]["name"]
        written = gateway.create_config_map(record)
        if written is None:  # another start made it: decide on what it made
            written = gateway.find_config_map(namespace, name)
        else:
            log.bind(record=name).info("ledger record created")
        if record["metadata"]["labels"][wire.LEDGER_LABEL] == wire.LEDGER_CLAIM:
            claim = written
        else:
            created = written
    raise PreconditionFailed(
        f"the ledger records of TrainJob {namespace}/{meta['name']} kept changing under start "
        "(deleted as it wrote them): run it again"
    )


def run(settings: StartSettings) -> runner.Result:
    """Read the runtime, decide, claim the identity, create the TrainJob once, report.

    With --dry-run=server each create is sent with dryRun=All (runner.connect): the creates
    that follow are decided on the objects the dry runs answered, as they would be on those
    created, so every one of them is put to admission and none is persisted.
    """
    if settings.dry_run == "client":
        request, runtime_object = _runtime_from_file(settings)
        _check_queued(request, runtime_object, kueue_mode=settings.kueue_mode)
        return trainjob.build_trainjob(request, trainer_job=_trainer_job(request, runtime_object))
    request = settings.start_request()
    gateway = runner.connect(settings)
    runtime_object = gateway.read_runtime(
        request.runtime_kind, request.runtime_name, request.namespace
    )
    _check_queued(request, runtime_object, kueue_mode=settings.kueue_mode)
    wanted = trainjob.build_trainjob(
        request, trainer_job=_trainer_job(request, runtime_object), runtime=runtime_object
    )
    created, outcome = _create(gateway, wanted)
    meta = created["metadata"]
    return {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta["uid"],
        # A dry-run create is answered without one: nothing was stored.
        "resourceVersion": meta.get("resourceVersion", ""),
        "outcome": outcome,
        "epochPrefix": str(request.identity.epoch_prefix),
        "tokenPrefix": request.identity.token_prefix,
    }


ABOUT = (
    "Validate the runtime, build the TrainJob (suspended, its command wrapped in the prologue)\n"
    "and create it once; the same request again is a no-op, another or a spent identity refused."
)
EXAMPLE = """\
dispatch-start --namespace team-a --runtime-name dispatch-torch-distributed --job-id train-42 \\
    --generation 3 --submission 7 --attempt 2 --image registry.example/trainer:1 \\
    --command python --command train.py --args=--lr --args=0.1
"""


def acted_on(settings: StartSettings, result: runner.Result) -> str:
    """`-o name`: the TrainJob made or found (a client dry run's result is the TrainJob)."""
    name = result["metadata"]["name"] if settings.dry_run == "client" else result["name"]
    return kinds.TRAINJOB.kubectl_name(name)


main = runner.entrypoint(
    run, StartSettings, step="start", about=ABOUT, example=EXAMPLE, acted_on=acted_on
)
