"""The audit's checks of one object as read (the TrainJob, its runtime, JobSet, Jobs, a pod).

Each yields findings, or reads a value as the prologue would; none keeps anything between
objects (the trackers do).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from dispatch_k8s.core.rules import ownership, runtime, shapes
from dispatch_k8s.core.rules.audit.findings import Finding, FindingKind
from dispatch_k8s.core.rules.identity import IdentityError, parse_counter
from dispatch_k8s.core.rules.snapshot import Snapshot
from dispatch_k8s.core.rules.trainjob import runtime_seen
from dispatch_k8s.core.rules.wire import (
    ADMISSION_ANNOTATION,
    ANCESTOR_LABEL,
    ANCESTOR_TRAINER,
    JOBSET_NAME_KEY,
    JOBSET_UID_KEY,
    PATCH_MANAGER,
    REPLICATED_JOB_NAME_KEY,
    RESERVED_ENV_PREFIX,
    RESTART_ATTEMPT_KEY,
    RUNTIME_ALLOWS_ANNOTATION,
    RUNTIME_SEEN_ANNOTATION,
    RUNTIME_SNAPSHOT_KEY,
    TRAINER_CONTAINER,
)

_FINISHED_PHASES: Final = ("Succeeded", "Failed")  # compared with ==: any phase may come
_PATCH_JOBS: Final = "trainingRuntimeSpec.template.spec.replicatedJobs"


def differs(admission: str, patch_admission: Any) -> bool:
    """A pod's (canonical) A is not the patch's single readable A."""
    try:
        return int(admission) != parse_counter(patch_admission, name="A")
    except IdentityError:
        return False  # no single readable patch A: the patch findings say why


def counts_of(pod: Mapping[str, Any]) -> tuple[int, int] | None:
    """(A, J) as the prologue reads them from the pod; None when either is unreadable."""
    try:
        admission = parse_counter(shapes.annotations_of(pod).get(ADMISSION_ANNOTATION), name="A")
        restart = parse_counter(shapes.labels_of(pod).get(RESTART_ATTEMPT_KEY), name="J")
    except IdentityError:
        return None  # the prologue refuses it (exit 125), or the A findings tell it
    return admission, restart


def counter_or_none(value: Any) -> int | None:
    """A counter as the prologue reads it; None when it is unreadable (other findings tell)."""
    try:
        return parse_counter(value, name="counter")
    except IdentityError:
        return None


def has_started(pod: Mapping[str, Any]) -> bool:
    """The kubelet took the pod: its containers ran, or were about to."""
    return bool(shapes.mapping(pod.get("status")).get("startTime"))


def check_restarted_in_place(pod: Mapping[str, Any], pod_name: str) -> Iterator[Finding]:
    """The kubelet restarted the trainer container: the execution reran under one identity."""
    for status in shapes.mapping(pod.get("status")).get("containerStatuses") or []:
        status = shapes.mapping(status)
        count = status.get("restartCount")
        if status.get("name") == TRAINER_CONTAINER and isinstance(count, int) and count > 0:
            yield Finding(
                kind=FindingKind.RESTARTED_IN_PLACE,
                reason=(
                    f"pod {pod_name} container {TRAINER_CONTAINER} was restarted in place "
                    f"{count} time{'' if count == 1 else 's'}: each restart reran the execution "
                    "with the same A and J"
                ),
            )


def counted_restarts(jobset: Mapping[str, Any] | None) -> int | None:
    """JobSet's count of restarts, J; None without a JobSet or a readable count."""
    if jobset is None:
        return None
    value = shapes.mapping(jobset.get("status")).get("restarts", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# What an execution's identity is read from: no runtime-patch entry but ours may set it.
_IDENTITY_ANNOTATIONS: Final = (ADMISSION_ANNOTATION, RESTART_ATTEMPT_KEY)
_IDENTITY_LABELS: Final = (RESTART_ATTEMPT_KEY, JOBSET_UID_KEY, JOBSET_NAME_KEY)


def check_foreign_patches(trainjob: Mapping[str, Any], name: str) -> Iterator[Finding]:
    """Another manager's runtime-patch entry that sets what an execution's identity is read from.

    Trainer merges every entry into the JobSet, so such an entry wins over ours on the pods.
    """
    patches = shapes.at(trainjob, "spec").get("runtimePatches")
    for index, patch in enumerate(patches if isinstance(patches, list) else []):
        patch = shapes.mapping(patch)
        if patch.get("manager") == PATCH_MANAGER:
            continue
        jobs = shapes.at(patch, "trainingRuntimeSpec", "template", "spec").get("replicatedJobs")
        for job_index, job in enumerate(shapes.mappings(jobs)):
            path = f"spec.runtimePatches[{index}].{_PATCH_JOBS}[{job_index}]"
            for what in _identity_settings(job):
                yield Finding(
                    kind=FindingKind.FOREIGN_PATCH,
                    reason=(
                        f"TrainJob {name} {path} (manager {shapes.word(patch.get('manager'))}) "
                        f"sets {what}: only the {PATCH_MANAGER} entry may set an execution's "
                        "identity"
                    ),
                )


def _identity_settings(replicated_job: Mapping[str, Any]) -> Iterator[str]:
    """What in one patched replicated job touches the identity, in words."""
    for where, meta in (
        ("template.metadata", shapes.at(replicated_job, "template", "metadata")),
        (
            "pod template metadata",
            shapes.at(replicated_job, "template", "spec", "template", "metadata"),
        ),
    ):
        for key in _IDENTITY_ANNOTATIONS:
            if key in shapes.mapping(meta.get("annotations")):
                yield f"{where} annotation {key}"
        for key in _IDENTITY_LABELS:
            if key in shapes.mapping(meta.get("labels")):
                yield f"{where} label {key}"
    pod_spec = shapes.at(replicated_job, "template", "spec", "template", "spec")
    for field in ("initContainers", "containers"):
        for container in shapes.mappings(pod_spec.get(field)):
            container_name = shapes.word(container.get("name"))
            for entry in shapes.mappings(container.get("env")):
                env_name = entry.get("name")
                if isinstance(env_name, str) and env_name.startswith(RESERVED_ENV_PREFIX):
                    yield f"env {env_name} of container {container_name}"
            if container.get("name") == TRAINER_CONTAINER:
                for word in ("command", "args"):
                    if word in container:
                        yield f"the {word} of container {container_name}"


def trainer_jobs_of(
    jobset: Mapping[str, Any] | None, runtime_now: Mapping[str, Any] | None
) -> frozenset[str]:
    """The trainer-labelled replicated jobs, from the JobSet (else the runtime, if read now)."""
    if jobset is not None:
        spec: Any = jobset.get("spec")
    elif runtime_now is not None:
        spec = shapes.at(runtime_now, "spec", "template").get("spec")
    else:
        return frozenset()
    return frozenset(
        shapes.word(job.get("name"))
        for job in shapes.mappings(shapes.mapping(spec).get("replicatedJobs"))
        if shapes.at(job, "template", "metadata", "labels").get(ANCESTOR_LABEL) == ANCESTOR_TRAINER
    )


def check_child_job(job: Mapping[str, Any], allowed: frozenset[str]) -> Iterator[Finding]:
    """The runtime rules applied to a trainer child Job as it is now, `allowed` waived."""
    meta = shapes.mapping(job.get("metadata"))
    if shapes.mapping(meta.get("labels")).get(ANCESTOR_LABEL) != ANCESTOR_TRAINER:
        return  # initializers and MPI workers: the rules check the trainer job's
    name = shapes.word(meta.get("name"))
    for violation in runtime.decide_violations_in_trainer_job(job, allowed=allowed):
        yield Finding(kind=FindingKind.JOBSET_SPEC, reason=f"Job {name} {violation}")


_UNRECORDED: Final = object()  # no record: told apart from any value an annotation can hold


def allowed_at_start(trainjob: Mapping[str, Any], name: str) -> frozenset[str] | Finding:
    """The restart mechanisms the runtime allowed when start checked it, as start recorded them.

    A job started before the record is judged as before, against every mechanism: what its
    runtime allowed then is known nowhere. A record no start writes allows none, and is a finding.
    """
    recorded = shapes.annotations_of(trainjob).get(RUNTIME_ALLOWS_ANNOTATION, _UNRECORDED)
    if recorded is _UNRECORDED:
        return frozenset(runtime.MECHANISMS)
    allowed = runtime.parse_allowed(recorded) if isinstance(recorded, str) else None
    if allowed is not None:
        return allowed
    return Finding(
        kind=FindingKind.RUNTIME_CHANGED,
        reason=(
            f"TrainJob {name} annotation {RUNTIME_ALLOWS_ANNOTATION} is {shapes.shown(recorded)}, "
            f"not mechanisms from {', '.join(runtime.MECHANISMS)}: what the runtime allowed at "
            "start cannot be read, so the JobSet and its Jobs are judged as allowing none"
        ),
    )


# What only JobSet may set in a child Job's spec (pipelines/policies/guard-path.yaml refuses
# an edit of them, or a scale): a lowered parallelism removes a rank's pod without failing it
# (no restart, J stays), and raising it again makes the rank again under the same A and J.
CHILD_JOB_FIELDS: Final = (
    "parallelism",
    "completions",
    "backoffLimit",
    "backoffLimitPerIndex",
    "podFailurePolicy",
    "successPolicy",
    "completionMode",
    "manualSelector",
)
_BACKOFF_DEFAULT: Final = 6
_BACKOFF_PER_INDEX_DEFAULT: Final = 2**31 - 1


def _job_defaults(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What the API server sets in a Job spec that leaves these fields out (batch/v1 defaults)."""
    defaults: dict[str, Any] = {"parallelism": 1, "completionMode": "NonIndexed"}
    if spec.get("completions") is None and spec.get("parallelism") is None:
        defaults["completions"] = 1
    per_index = spec.get("backoffLimitPerIndex") is not None
    defaults["backoffLimit"] = _BACKOFF_PER_INDEX_DEFAULT if per_index else _BACKOFF_DEFAULT
    return defaults


def _covers(template: Any, live: Any) -> bool:
    """`live` holds everything `template` sets (the API server may add defaults below it)."""
    if isinstance(template, Mapping):
        return isinstance(live, Mapping) and all(
            _covers(value, live.get(key)) for key, value in template.items()
        )
    if isinstance(template, list):
        return (
            isinstance(live, list)
            and len(live) == len(template)
            and all(_covers(t, v) for t, v in zip(template, live, strict=True))
        )
    return bool(template == live)


def check_child_job_spec(
    job: Mapping[str, Any], jobset: Mapping[str, Any] | None
) -> Iterator[Finding]:
    """A live child Job's spec against its replicated job's template in the JobSet.

    JobSet copies the template into each Job it makes; only a scale or an edit by hand makes
    them differ. Jobs of another JobSet, or being deleted, are the UID and restart findings'.
    """
    meta = shapes.mapping(job.get("metadata"))
    jobset_uid = shapes.mapping((jobset or {}).get("metadata")).get("uid")
    if (
        jobset is None
        or meta.get("deletionTimestamp")
        or jobset_uid not in ownership.owner_uids(job)
    ):
        return
    replicated = shapes.labels_of(job).get(REPLICATED_JOB_NAME_KEY)
    jobs = shapes.mappings(shapes.mapping(jobset.get("spec")).get("replicatedJobs"))
    found = [(i, j) for i, j in enumerate(jobs) if j.get("name") == replicated]
    if not found:
        return
    index, replicated_job = found[0]
    template = shapes.at(replicated_job, "template", "spec")
    live = shapes.mapping(job.get("spec"))
    defaults = _job_defaults(template)
    name = shapes.word(meta.get("name"))
    jobset_name = shapes.word(shapes.mapping(jobset.get("metadata")).get("name"))
    for field in CHILD_JOB_FIELDS:
        wanted = template.get(field, defaults.get(field))
        if wanted is None and field == "manualSelector":
            wanted = False  # unset and false mean the same: the Job controller picks the selector
        value = live.get(field)
        if field == "manualSelector" and value is None:
            value = False
        if _covers(wanted, value):
            continue
        yield Finding(
            kind=FindingKind.JOB_SPEC,
            reason=(
                f"Job {name} spec.{field} is {shapes.shown(value)}, not "
                f"{shapes.shown(wanted)} as in JobSet {jobset_name} "
                f"spec.replicatedJobs[{index}].template.spec: only JobSet sets a child Job's "
                "spec (scaled or edited by hand, a rank's pod is removed without a restart "
                "and made again under the same A and J)"
            ),
        )


def check_jobset_spec(jobset: Mapping[str, Any], allowed: frozenset[str]) -> Iterator[Finding]:
    """The runtime rules applied to the live JobSet, the mechanisms in `allowed` waived.

    The runtime may have been edited after start, or the JobSet by hand (or rebuilt by Trainer
    from an edited copy of the runtime).
    """
    name = shapes.word(shapes.mapping(jobset.get("metadata")).get("name"))
    violations = runtime.decide_violations_in_jobset(
        jobset.get("spec"), path="spec", allowed=allowed
    )
    for violation in violations:
        yield Finding(kind=FindingKind.JOBSET_SPEC, reason=f"JobSet {name} {violation}")


def check_runtime(
    trainjob: Mapping[str, Any], built_from: Mapping[str, Any] | Snapshot | None
) -> Iterator[Finding]:
    """The runtime start checked, compared with what the job is built from now.

    That is Trainer's snapshot of it where the job has one (Trainer v2.3.0 and later), else the
    runtime as it is (v2.2.1, or before the first reconcile, or a copy deleted: Trainer copies
    it again).
    """
    recorded = shapes.annotations_of(trainjob).get(RUNTIME_SEEN_ANNOTATION)
    if not isinstance(recorded, str):
        return  # started before the record existed, or by hand
    ref = shapes.at(trainjob, "spec", "runtimeRef")
    what = f"{shapes.word(ref.get('kind'))} {shapes.word(ref.get('name'))}"
    runtime_now = built_from
    if isinstance(built_from, Snapshot):
        copy = (
            f"runtime snapshot ConfigMap {built_from.name}, the copy of {what} Trainer builds "
            "the job from,"
        )
        uid = shapes.mapping(trainjob.get("metadata")).get("uid")
        if built_from.owner_uid != uid:
            yield Finding(
                kind=FindingKind.RUNTIME_CHANGED,
                reason=(
                    f"{copy} is not controlled by the TrainJob (UID {uid}, its "
                    f"controller's is {built_from.owner_uid}): made or given away by someone else"
                ),
            )
            return
        if built_from.runtime is None:
            reason = f"{copy} holds no runtime under key {RUNTIME_SNAPSHOT_KEY}"
            yield Finding(kind=FindingKind.RUNTIME_CHANGED, reason=reason)
            return
        what, runtime_now = copy, built_from.runtime
    now = runtime_seen(runtime_now) if isinstance(runtime_now, Mapping) else None
    # A record made before the digest holds the UID and generation alone.
    if now is not None and now.split()[: len(recorded.split())] == recorded.split():
        return
    told = "is gone" if now is None else f"is now {now}"
    yield Finding(
        kind=FindingKind.RUNTIME_CHANGED,
        reason=(
            f"{what} changed since start checked it (UID, generation and spec digest {recorded}, "
            f"{told}): its restart settings may no longer pass the runtime rules; check them, "
            "and the JobSet Trainer builds from it"
        ),
    )


def patched_jobs(
    trainjob: Mapping[str, Any], name: str, findings: list[Finding]
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Yield (path, replicated job) of this project's runtime patch; a missing one is a finding."""
    patches = shapes.at(trainjob, "spec").get("runtimePatches")
    found = False
    for index, patch in enumerate(patches if isinstance(patches, list) else []):
        if not isinstance(patch, Mapping) or patch.get("manager") != PATCH_MANAGER:
            continue
        found = True
        path = f"spec.runtimePatches[{index}].{_PATCH_JOBS}"
        jobset_spec = shapes.at(patch, "trainingRuntimeSpec", "template", "spec")
        replicated_jobs = jobset_spec.get("replicatedJobs")
        if not isinstance(replicated_jobs, list) or not replicated_jobs:
            reason = f"TrainJob {name} {path} is empty: the patch sets A on no pod"
            findings.append(Finding(kind=FindingKind.RUNTIME_PATCH, reason=reason))
            continue
        for job_index, replicated_job in enumerate(replicated_jobs):
            yield f"{path}[{job_index}]", shapes.mapping(replicated_job)
    if not found:
        reason = (
            f"TrainJob {name} spec.runtimePatches has no entry of manager {PATCH_MANAGER}: "
            "A is set on no pod"
        )
        findings.append(Finding(kind=FindingKind.RUNTIME_PATCH, reason=reason))


def check_admission(
    value: Any, *, name: str, floor: int | None, kind: FindingKind
) -> Iterator[Finding]:
    """Yield the finding for one A: missing, garbage, or below the floor (a lowered A)."""
    admission = read_counter(value, name=name, kind=kind)
    if isinstance(admission, Finding):
        yield admission
    elif floor is not None and admission < floor:
        reason = f"{name} is {admission}, below the admission floor {floor}: A may have been reset"
        yield Finding(kind=kind, reason=reason)


def read_counter(value: Any, *, name: str, kind: FindingKind) -> int | Finding:
    """Read a counter as the prologue would; anything but a canonical decimal is a finding."""
    try:
        if value == "":
            raise IdentityError(f"{name} is empty")  # present, so "missing" would mislead
        if value is not None and not isinstance(value, str):
            # Annotations are strings on the wire; anything else was written around the API.
            raise IdentityError(f"{name} {value!r} is not a string")
        return parse_counter(value, name=name)
    except IdentityError as e:
        return Finding(kind=kind, reason=str(e))


def is_live(pod: Mapping[str, Any]) -> bool:
    """A pod that is neither terminating nor finished: its execution may still be running."""
    if shapes.mapping(pod.get("metadata")).get("deletionTimestamp"):
        return False
    return shapes.mapping(pod.get("status")).get("phase") not in _FINISHED_PHASES
