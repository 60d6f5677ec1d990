"""Building the TrainJob at Start, and reading the identity values back out of one."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from dispatch_k8s.core.rules import runtime as runtime_rules
from dispatch_k8s.core.rules import shapes, wire
from dispatch_k8s.core.rules.decisions import NeedsPerson, Refusal, ResourceVersion
from dispatch_k8s.core.rules.errors import DispatchError, Foreign, Refused
from dispatch_k8s.core.rules.identity import IdentityError, next_admission, parse_counter
from dispatch_k8s.core.rules.prologue import wrap_command
from dispatch_k8s.core.rules.request import StartRequest
from dispatch_k8s.core.rules.snapshot import runtime_digest

INITIAL_ADMISSION: Final = "0"  # A before the first admission; R = 1 only once it is raised
IDENTITY_ANNOTATIONS: Final = (
    wire.JOB_ID_ANNOTATION,
    wire.GENERATION_ANNOTATION,
    wire.SUBMISSION_ANNOTATION,
    wire.ATTEMPT_ANNOTATION,
    wire.REQUEST_DIGEST_ANNOTATION,
)


def build_env(request: StartRequest) -> list[dict[str, Any]]:
    """`spec.trainer.env` in docs/design.md §2 order: the job's own, then the prologue's inputs."""
    identity = request.identity
    env: list[dict[str, Any]] = [{"name": k, "value": request.env[k]} for k in sorted(request.env)]
    env.append({"name": wire.ENV_EPOCH_PREFIX, "value": str(identity.epoch_prefix)})
    env.append({"name": wire.ENV_TOKEN_PREFIX, "value": identity.token_prefix})
    if request.workdir is not None:
        env.append({"name": wire.ENV_WORKDIR, "value": request.workdir})
    # A and J reach the container through the Downward API: a runtime patch may not set env
    # on the `node` container, and spec.trainer is immutable (Trainer's source).
    admission_path = f"metadata.annotations['{wire.ADMISSION_ANNOTATION}']"
    env.append(_downward(wire.ENV_ADMISSION, admission_path))
    env.append(_downward(wire.ENV_RESTART, f"metadata.labels['{wire.RESTART_ATTEMPT_KEY}']"))
    return env


def _downward(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": field_path}}}


def build_runtime_patch(trainer_job: str, admission: str) -> dict[str, Any]:
    """This project's runtimePatches entry: A on the trainer job's pod template, nothing else.

    Pod-template metadata only: Job-level metadata is immutable in JobSet, and env may not
    be patched onto the `node` container (Trainer's source).
    """
    pod_metadata = {"annotations": {wire.ADMISSION_ANNOTATION: admission}}
    pod_template = {"metadata": pod_metadata}
    replicated_job = {"name": trainer_job, "template": {"spec": {"template": pod_template}}}
    return {
        "manager": wire.PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated_job]}}},
    }


def build_trainjob(
    request: StartRequest, *, trainer_job: str, runtime: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The suspended TrainJob `start` creates, with the identity recorded in annotations.

    `runtime` as read records its UID, generation and spec digest, and the restart mechanisms
    it allows (not part of the request's digest: the same request stays the same whatever
    became of the runtime).
    """
    identity = request.identity
    trainer: dict[str, Any] = {
        "image": request.image,
        "command": wrap_command(request.command),
        "env": build_env(request),
    }
    # Only fields with a value: Kueue round-trips the TrainJob through Go types, which drop
    # an empty list, and Trainer's CEL rule then sees spec.trainer change (trainer#3888).
    if request.args:
        trainer["args"] = list(request.args)
    if request.num_nodes is not None:
        trainer["numNodes"] = request.num_nodes
    if request.resources_per_node is not None:
        trainer["resourcesPerNode"] = request.resources_per_node
    labels = {wire.MANAGED_BY_LABEL: wire.MANAGED_BY}
    if request.queue is not None:
        labels[wire.QUEUE_LABEL] = request.queue
    if request.priority_class is not None:
        labels[wire.PRIORITY_CLASS_LABEL] = request.priority_class
    annotations = {
        wire.JOB_ID_ANNOTATION: identity.job_id,
        wire.GENERATION_ANNOTATION: str(identity.generation),
        wire.SUBMISSION_ANNOTATION: str(identity.submission),
        wire.ATTEMPT_ANNOTATION: str(identity.attempt),
        wire.ADMISSION_FLOOR_ANNOTATION: INITIAL_ADMISSION,
    }
    trainjob: dict[str, Any] = {
        "apiVersion": f"{wire.TRAINER_GROUP}/{wire.TRAINER_VERSION}",
        "kind": "TrainJob",
        "metadata": {
            "name": request.trainjob_name,
            "namespace": request.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "suspend": True,
            "runtimeRef": {
                "apiGroup": wire.TRAINER_GROUP,
                "kind": request.runtime_kind,
                "name": request.runtime_name,
            },
            "trainer": trainer,
            "runtimePatches": [build_runtime_patch(trainer_job, INITIAL_ADMISSION)],
        },
    }
    annotations[wire.REQUEST_DIGEST_ANNOTATION] = request_digest(trainjob)
    seen = runtime_seen(runtime) if runtime is not None else None
    if seen is not None:
        annotations[wire.RUNTIME_SEEN_ANNOTATION] = seen
    if runtime is not None:
        allowed = runtime_rules.allowed_mechanisms(runtime)
        annotations[wire.RUNTIME_ALLOWS_ANNOTATION] = runtime_rules.build_allowed(allowed)
    return trainjob


def runtime_seen(runtime: Mapping[str, Any]) -> str | None:
    """A runtime's identity, version and content as one annotation value; None without them.

    The digest tells a copy of the runtime (Trainer's snapshot) edited under the same UID and
    generation. The generation is the spec's: the API server raises it once more when a deletion
    begins (read in upstream k8s.io/apiserver), and Trainer v2.2.1's finalizer keeps a runtime in
    use readable, being deleted, while its jobs are still built from that same spec; that raise
    is read past, any edit before or after the deletion is not.
    """
    meta = runtime.get("metadata") or {}
    uid, generation = meta.get("uid"), meta.get("generation")
    if not uid or generation is None:
        return None
    if meta.get("deletionTimestamp") and isinstance(generation, int) and generation > 1:
        generation -= 1
    return f"{uid} {generation} {runtime_digest(runtime)}"


def request_digest(trainjob: Mapping[str, Any]) -> str:
    """A digest of what was asked for, so a repeated start can tell 'same' from 'different'."""
    canonical = json.dumps(trainjob, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def recorded_identity(trainjob: Mapping[str, Any]) -> dict[str, str | None]:
    """The identity annotations of a TrainJob, None where one is absent."""
    annotations = shapes.annotations_of(trainjob)
    return {key: annotations.get(key) for key in IDENTITY_ANNOTATIONS}


@dataclass(frozen=True, slots=True)
class ForeignFlag(NeedsPerson):
    """The audit flagged the TrainJob foreign: no step opens it until a person clears the flag.

    The step turns it into exit 7, as the audit's own finding.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class Raise:
    """A decided raise of A, tied to the resourceVersion it was decided on."""

    admission: int
    resource_version: ResourceVersion
    jobset_uid: str | None  # recorded in the same update when first seen, else None
    restart: int  # J of the JobSet as read: the next execution's J, unless it is replaced
    highest_restart: int  # the highest J seen, recorded in the same update
    generation: int  # metadata.generation the update produces: the spec changes, so read + 1


def _patch_entry(trainjob: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for entry in shapes.mappings(shapes.at(trainjob, "spec").get("runtimePatches")):
        if entry.get("manager") == wire.PATCH_MANAGER:
            return entry
    return None


# The oldest Trainer v2 release the project works with: v2.2.0 replaced podTemplateOverrides
# with runtimePatches (kubeflow/trainer#3309), and v2.2.1 lets the patch change in the update
# that opens the job, which v2.2.0 refuses (plain mode's Open and Release are that update).
OLDEST_TRAINER: Final = "v2.2.1"


def decide_patch_stored(stored: Mapping[str, Any]) -> Refusal | None:
    """The TrainJob as the API server stored it must hold this project's runtime patch.

    A TrainJob CRD without `spec.runtimePatches` (Trainer before v2.2, found from what the
    API server stored, not configured) drops the field on create: nothing would carry A to
    the pods. None when the patch is there.
    """
    if _patch_entry(stored) is not None:
        return None
    meta = shapes.mapping(stored.get("metadata"))
    return Refusal(
        f"TrainJob {meta.get('namespace')}/{meta.get('name')} is stored without the "
        f"{wire.PATCH_MANAGER} entry of spec.runtimePatches: the TrainJob CRD served here drops "
        "the field (Trainer before v2.2, with podTemplateOverrides), or someone removed it; "
        f"dispatch-k8s needs Trainer {OLDEST_TRAINER} or later, which keeps A there. The "
        "TrainJob stays suspended: delete it"
    )


def _patched_pod_templates(entry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = shapes.at(entry, "trainingRuntimeSpec", "template", "spec")
    return [
        shapes.at(job, "template", "spec", "template")
        for job in shapes.mappings(spec.get("replicatedJobs"))
    ]


def admission_in_patch(trainjob: Mapping[str, Any]) -> int | Refusal:
    """A as this project's runtime patch holds it; a missing or garbled A is refused."""
    entry = _patch_entry(trainjob)
    if entry is None:
        return Refusal(f"spec.runtimePatches has no entry of manager {wire.PATCH_MANAGER}")
    values = [
        shapes.annotations_of(pod).get(wire.ADMISSION_ANNOTATION)
        for pod in _patched_pod_templates(entry)
    ]
    if not values:
        return Refusal(f"the {wire.PATCH_MANAGER} runtime patch names no replicated job")
    try:
        where = f"{wire.ADMISSION_ANNOTATION} in the patch"
        return max(parse_counter(value, name=where) for value in values)
    except IdentityError as e:
        return Refusal(str(e))


def admission_floor(trainjob: Mapping[str, Any]) -> int | Refusal:
    """The floor annotation: the highest A ever written."""
    annotations = shapes.annotations_of(trainjob)
    try:
        return parse_counter(
            annotations.get(wire.ADMISSION_FLOOR_ANNOTATION),
            name=f"annotation {wire.ADMISSION_FLOOR_ANNOTATION}",
        )
    except IdentityError as e:
        return Refusal(str(e))


def active_replicated_job(jobset: Mapping[str, Any] | None) -> str | None:
    """The first replicated job of the JobSet that still has active Jobs, if any."""
    for status in shapes.mappings(shapes.at(jobset, "status").get("replicatedJobsStatus")):
        active = status.get("active")
        # Anything but a count of none is taken as active: a malformed status is waited out.
        if active not in (None, 0) or isinstance(active, bool):
            return str(status.get("name"))
    return None


@dataclass(frozen=True, slots=True)
class Draining(Refusal):
    """The JobSet still has active Jobs from the last execution: a state to wait out."""


def refusal_error(refusal: Refusal) -> DispatchError:
    """The step's outcome for a refusal: 7 for a foreign flag, 6 for every other rule."""
    return Foreign(refusal.reason) if isinstance(refusal, ForeignFlag) else Refused(refusal.reason)


def foreign_flag(trainjob: Mapping[str, Any]) -> ForeignFlag | None:
    """The audit's foreign flag on a TrainJob, told with its cause and how a person clears it."""
    annotations = shapes.annotations_of(trainjob)
    if annotations.get(wire.FOREIGN_ANNOTATION) != wire.FOREIGN:
        return None
    name = trainjob["metadata"]["name"]
    cause = annotations.get(wire.FOREIGN_CAUSE_ANNOTATION) or "no cause recorded"
    return ForeignFlag(
        f"TrainJob {name} is flagged foreign ({wire.FOREIGN_ANNOTATION}): {cause}. A person "
        f"checks the cause, then removes the annotations {wire.FOREIGN_ANNOTATION} and "
        f"{wire.FOREIGN_CAUSE_ANNOTATION} in the one write that records the JobSet "
        "(docs/operations.md: A job flagged foreign, step 4)"
    )


def foreign_and_suspended(trainjob: Mapping[str, Any]) -> ForeignFlag | None:
    """The foreign flag of a suspended TrainJob: the guard refuses its every opening.

    In policy mode Kueue would then reserve quota for it again and again (open-while-foreign);
    a job running when flagged is left to run (the audit never stops one).
    """
    if shapes.at(trainjob, "spec").get("suspend") is not True:
        return None
    return foreign_flag(trainjob)


def raise_seen(before: Mapping[str, Any], after: Mapping[str, Any]) -> int | None:
    """The new A where `after` raised the floor over `before` (two versions a watch told)."""
    old, new = admission_floor(before), admission_floor(after)
    if isinstance(old, int) and isinstance(new, int) and new > old:
        return new
    return None


def restart_count(jobset: Mapping[str, Any] | None) -> int | Refusal:
    """J of the JobSet (status.restarts); 0 before it exists, as a new JobSet starts."""
    value = shapes.at(jobset, "status").get("restarts", 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return Refusal(f"JobSet status.restarts {value!r} is not a count")
    return value


def highest_restart(trainjob: Mapping[str, Any]) -> int | Refusal:
    """The highest J recorded on the TrainJob; 0 before anything was recorded."""
    annotations = shapes.annotations_of(trainjob)
    value = annotations.get(wire.HIGHEST_RESTART_ANNOTATION)
    if value is None:
        return 0
    try:
        return parse_counter(value, name=f"annotation {wire.HIGHEST_RESTART_ANNOTATION}")
    except IdentityError as e:
        return Refusal(str(e))


def opened_by_last_raise(trainjob: Mapping[str, Any]) -> int | None:
    """A, when the TrainJob is open on the raise that opened it, its spec unchanged since.

    A rerun of the step whose answer was lost finds its work done. None otherwise.
    """
    if shapes.at(trainjob, "spec").get("suspend") is not False:
        return None
    generation = shapes.at(trainjob, "metadata").get("generation")
    if shapes.annotations_of(trainjob).get(wire.OPEN_UNTIL_GENERATION_ANNOTATION) != str(
        generation
    ):
        return None  # opened by someone else, or suspended and opened again since
    floor, in_patch = admission_floor(trainjob), admission_in_patch(trainjob)
    return floor if isinstance(floor, int) and floor == in_patch else None


def decide_raise(trainjob: Mapping[str, Any], jobset: Mapping[str, Any] | None) -> Raise | Refusal:
    """Return the next A for a suspended TrainJob, or why it may not be raised."""
    name = trainjob["metadata"]["name"]
    flag = foreign_flag(trainjob)
    if flag is not None:
        return flag
    if shapes.at(trainjob, "spec").get("suspend") is not True:
        return Refusal(
            f"TrainJob {name}: spec.suspend is not true: A may change only while suspended"
        )
    busy = active_replicated_job(jobset)
    if busy is not None:
        # Trainer's webhook refuses any runtimePatches change until this drains
        # (Trainer's source).
        return Draining(
            f"TrainJob {name}: JobSet replicated job {busy} still has active Jobs; wait until "
            "status.replicatedJobsStatus[].active is 0 for every replicated job, then run again"
        )
    generation = trainjob["metadata"].get("generation")
    if not isinstance(generation, int) or isinstance(generation, bool):
        return NeedsPerson(f"TrainJob {name}: metadata.generation {generation!r} is not a number")
    counters = (
        admission_in_patch(trainjob),
        admission_floor(trainjob),
        highest_restart(trainjob),
        restart_count(jobset),
    )
    for counter in counters:
        if isinstance(counter, Refusal):
            return NeedsPerson(f"TrainJob {name}: {counter.reason}")
    in_patch, floor, highest, restart = (c for c in counters if not isinstance(c, Refusal))
    try:
        admission = next_admission(
            in_patch=in_patch, floor=floor, highest_restart=highest, restart=restart
        )
    except IdentityError as e:  # R would leave the epoch's digits
        return NeedsPerson(f"TrainJob {name}: {e}")
    return Raise(
        admission=admission,
        resource_version=ResourceVersion(trainjob["metadata"]["resourceVersion"]),
        jobset_uid=jobset_uid_to_record(trainjob, jobset),
        restart=restart,
        highest_restart=max(highest, restart),
        generation=generation + 1,
    )


def jobset_uid_to_record(
    trainjob: Mapping[str, Any], jobset: Mapping[str, Any] | None
) -> str | None:
    """The JobSet UID to record now: only on first sight; a different one is for audit."""
    annotations = shapes.annotations_of(trainjob)
    if jobset is None or annotations.get(wire.JOBSET_UID_ANNOTATION):
        return None
    return str(jobset["metadata"]["uid"])


def with_admission(
    trainjob: Mapping[str, Any],
    decision: Raise,
    *,
    suspend: bool | None = None,
    raised_for: str | None = None,
) -> dict[str, Any]:
    """The TrainJob with A raised in the patch and the floor, all in one object to PUT.

    The same update records the highest J seen, and until which metadata.generation the job
    may be opened on this raise (pipelines/policies/ read it). A raise that opens in the same
    update is spent by it: any later opening comes after a suspension, which moves the
    generation past the record. A raise made while suspended may be opened on one spec change
    later, for Kueue writes its pod-set patch in one update and opens in the next; an
    opening and the suspension before another take two.
    """
    raised = copy.deepcopy(dict(trainjob))
    value = str(decision.admission)
    for entry in raised["spec"]["runtimePatches"]:
        if entry.get("manager") == wire.PATCH_MANAGER:
            for template in _patched_pod_templates(entry):
                # The raise was decided on A read from each of these: they are the copy's dicts.
                pod = cast(dict[str, Any], template)
                metadata = pod.setdefault("metadata", {})
                metadata.setdefault("annotations", {})[wire.ADMISSION_ANNOTATION] = value
    annotations = raised["metadata"].setdefault("annotations", {})
    annotations[wire.ADMISSION_FLOOR_ANNOTATION] = value
    opens = suspend is False
    open_until = decision.generation if opens else decision.generation + 1
    annotations[wire.OPEN_UNTIL_GENERATION_ANNOTATION] = str(open_until)
    annotations[wire.HIGHEST_RESTART_ANNOTATION] = str(decision.highest_restart)
    if raised_for is not None:  # the Kueue reservation this raise is for; approve checks it
        annotations[wire.RAISED_FOR_ANNOTATION] = raised_for
    if decision.jobset_uid is not None:
        annotations[wire.JOBSET_UID_ANNOTATION] = decision.jobset_uid
    if suspend is not None:
        raised["spec"]["suspend"] = suspend
    return raised


def with_hold(trainjob: Mapping[str, Any], jobset: Mapping[str, Any] | None) -> dict[str, Any]:
    """The TrainJob suspended, with the highest J seen recorded in the same update.

    J lives in the JobSet only: recorded at the hold, a JobSet replaced while the job is held
    still leaves the next raise above every R the job had, with no audit run in between.
    """
    held = copy.deepcopy(dict(trainjob))
    held["spec"]["suspend"] = True
    restart, highest = restart_count(jobset), highest_restart(trainjob)
    if isinstance(restart, int) and isinstance(highest, int) and restart > highest:
        annotations = held["metadata"].setdefault("annotations", {})
        annotations[wire.HIGHEST_RESTART_ANNOTATION] = str(restart)
    return held


def multikueue_refusal(trainjob: Mapping[str, Any]) -> Refusal | None:
    """MultiKueue runs the job on a worker cluster, where A and J cannot be kept."""
    if shapes.at(trainjob, "spec").get("managedBy") != wire.MULTIKUEUE_MANAGER:
        return None
    return NeedsPerson(
        f"TrainJob {trainjob['metadata']['name']} is managed by MultiKueue "
        f"(spec.managedBy: {wire.MULTIKUEUE_MANAGER}), which is not supported yet: each dispatch "
        "creates the job afresh on a worker cluster, whose JobSet starts J at 0 again, so R "
        "could repeat. Queue it on a ClusterQueue without a MultiKueue check"
    )


def finished_reason(trainjob: Mapping[str, Any]) -> str | None:
    """Why the TrainJob will never run again (Trainer's terminal conditions), if it will not."""
    for condition in shapes.mappings(shapes.at(trainjob, "status").get("conditions")):
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return f"TrainJob {trainjob['metadata']['name']} is {condition['type']}"
    return None


def is_kueue_managed(trainjob: Mapping[str, Any]) -> bool:
    """Kueue owns the suspension of a TrainJob that carries its queue label."""
    labels = shapes.labels_of(trainjob)
    return bool(labels.get(wire.QUEUE_LABEL))
