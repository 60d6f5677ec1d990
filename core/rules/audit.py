"""The audit (docs/design.md §2, "Resets are detected"): findings and the one write.

Deciding only: the TrainJob, its JobSet and its pods come in as read; findings and the TrainJob
annotations to write go out. A reset is reported, never repaired: the audit flags the TrainJob
foreign so a person decides, and never stops, deletes or edits the job's spec.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from dispatch_k8s.core.rules import ownership, runtime, shapes
from dispatch_k8s.core.rules.identity import IdentityError, parse_counter
from dispatch_k8s.core.rules.trainjob import runtime_seen
from dispatch_k8s.core.rules.wire import (
    ADMISSION_ANNOTATION,
    ADMISSION_FLOOR_ANNOTATION,
    ANCESTOR_LABEL,
    ANCESTOR_TRAINER,
    COMPLETION_INDEX_KEY,
    ENV_TOKEN_PREFIX,
    FOREIGN,
    FOREIGN_ANNOTATION,
    FOREIGN_CAUSE_ANNOTATION,
    HIGHEST_RESTART_ANNOTATION,
    JOB_INDEX_KEY,
    JOBSET_NAME_KEY,
    JOBSET_UID_ANNOTATION,
    JOBSET_UID_KEY,
    LAST_EXECUTION_ANNOTATION,
    PATCH_MANAGER,
    REPLICATED_JOB_NAME_KEY,
    RESERVED_ENV_PREFIX,
    RESTART_ATTEMPT_KEY,
    RUNTIME_SEEN_ANNOTATION,
    TRAINER_CONTAINER,
)

# Annotations share a 256 KiB budget per object; a job of many pods could otherwise produce a
# cause the API server refuses (422), and then the flag would never be written at all.
MAX_CAUSE_CHARS: Final = 8192
CAUSE_SEPARATOR: Final = "; "
MAX_EVENTS: Final = 10  # Warning Events per audit: the cause annotation holds the rest

_TRIMMED: Final = " [trimmed]"
_FINISHED_PHASES: Final = ("Succeeded", "Failed")  # compared with ==: any phase may come
_PATCH_JOBS: Final = "trainingRuntimeSpec.template.spec.replicatedJobs"
_POD_ADMISSION: Final = f"template.spec.template.metadata.annotations['{ADMISSION_ANNOTATION}']"


class Unread:
    """The runtime was not read for this audit: nothing to compare."""


UNREAD: Final = Unread()


class FindingKind(StrEnum):
    """What a finding is about: a short stable code for results and logs."""

    JOBSET_UID = "jobset-uid"  # J may have been reset: the JobSet was replaced
    ADMISSION_FLOOR = "admission-floor"  # the floor itself is missing or garbage
    RUNTIME_PATCH = "runtime-patch"  # A in this project's runtime patch is missing, garbage, low
    POD_ADMISSION = "pod-admission"  # a live pod's A is missing, garbage or low
    REPEATED_R = "repeated-r"  # an execution began with the R of the one recorded before it
    LOWER_R = "lower-r"  # a live pod runs with an R below the one recorded
    RESTARTED_IN_PLACE = "restarted-in-place"  # the kubelet reran the trainer container
    DUPLICATE_POD = "duplicate-pod"  # two pods for one slot under one A, J and JobSet
    STALE_POD = "stale-pod"  # a running job's pod whose A is not the patch's
    JOBSET_SPEC = "jobset-spec"  # the live JobSet holds a setting the runtime rules refuse
    RUNTIME_CHANGED = "runtime-changed"  # the runtime was edited, replaced or deleted since start
    FOREIGN_PATCH = "foreign-patch"  # another runtime-patch entry sets what the identity reads
    JOB_IDENTITY = "job-identity"  # a child Job's template carries a J the JobSet did not count
    POD_IDENTITY = "pod-identity"  # a pod's A or J is not what its Job or JobSet holds
    ORPHANED = "orphaned"  # a Job or pod runs the trainer outside the JobSet's count of J
    ZERO_R = "zero-r"  # an execution began with R = 0: before any raise of A
    RESTART_BELOW = "restart-below-highest"  # J below the highest recorded, A not raised past it
    UNRAISED_OPENING = (
        "unraised-opening"  # open at a generation no raise covers (core.rules.opening)
    )
    RECORD_ERASED = "record-erased"  # a record that bounds R moved back (core.rules.erasure)
    REMADE = "remade"  # a spent identity's TrainJob made again outside start (core.rules.ledger)


@dataclass(frozen=True, slots=True, kw_only=True)
class Execution:
    """The execution the audit last saw: its R, and one of its pods by slot and UID.

    A slot (replicated job, Job index, completion index) has exactly one pod per execution:
    with backoffLimit 0 a failed pod fails its Job and JobSet restarts with J + 1. So a pod of
    the same slot with the same R and another UID is a new execution that repeated R.
    """

    r: int
    slot: str
    pod: str  # the pod's UID

    def text(self) -> str:
        """The annotation value."""
        record = {"pod": self.pod, "r": self.r, "slot": self.slot}
        return json.dumps(record, sort_keys=True, separators=(",", ":"))

    @classmethod
    def parse(cls, text: Any) -> Execution | None:
        """The recorded execution; None when nothing (readable) is recorded."""
        try:
            record = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            return None
        if not isinstance(record, dict):
            return None
        r, slot, pod = record.get("r"), record.get("slot"), record.get("pod")
        if not (isinstance(r, int) and isinstance(slot, str) and isinstance(pod, str)):
            return None
        return cls(r=r, slot=slot, pod=pod)


@dataclass(frozen=True, slots=True, kw_only=True)
class Observed:
    """What the audit saw that its one update records beside any flag."""

    highest_restart: int | None  # the highest J on the JobSet or any pod; None if none seen
    execution: Execution | None  # the execution to record; None leaves the record as it is


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One sign that A or J may have been reset, told in one line a person can act on."""

    kind: FindingKind
    reason: str  # names the object, field and value

    def __str__(self) -> str:
        return self.reason


class JobAudit:
    """The audit of one TrainJob, fed its pods one at a time (so many jobs share one list).

    Built from the TrainJob, its JobSet and its Jobs as read; `see` takes each of its pods,
    `result` gives the findings and what the audit's one update records.
    """

    def __init__(
        self,
        trainjob: Mapping[str, Any],
        jobset: Mapping[str, Any] | None,
        *,
        runtime_now: Mapping[str, Any] | Unread | None = UNREAD,
        jobs: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        self.name = shapes.word(shapes.mapping(trainjob.get("metadata")).get("name"))
        annotations = shapes.annotations_of(trainjob)
        self.findings: list[Finding] = []
        self._recorded_uid = self._read_recorded_uid(annotations.get(JOBSET_UID_ANNOTATION))
        self._seen_uids: set[str] = set()  # one finding per foreign UID, however many pods
        if not isinstance(runtime_now, Unread):
            self.findings.extend(_check_runtime(trainjob, runtime_now))
        self.restarts = _Restarts()
        if jobset is not None:
            self._check_uid(shapes.mapping(jobset.get("metadata")).get("uid"))
            self.restarts.see(shapes.mapping(jobset.get("status")).get("restarts"))
            self.findings.extend(_check_jobset_spec(jobset))
        self._jobset = jobset
        self._jobs = _ChildJobs(jobset)
        for job in jobs:
            self.findings.extend(_check_child_job(job))
            self.findings.extend(self._jobs.see(job))
        self.lineage = ownership.lineage_of(trainjob, jobset).with_jobs(self._jobs.all())
        self.findings.extend(_check_foreign_patches(trainjob, self.name))
        self._floor = self._read_floor(annotations.get(ADMISSION_FLOOR_ANNOTATION))
        self._highest_recorded = _counter_or_none(annotations.get(HIGHEST_RESTART_ANNOTATION))
        patched_jobs, patch_values = self._check_patch(trainjob)
        trainer_jobs = _trainer_jobs_of(jobset, runtime_now)
        if trainer_jobs and patched_jobs and patched_jobs != trainer_jobs:
            self.findings.append(
                Finding(
                    kind=FindingKind.RUNTIME_PATCH,
                    reason=(
                        f"TrainJob {self.name}'s {PATCH_MANAGER} runtime patch names "
                        f"{', '.join(sorted(patched_jobs))}, not the trainer replicated job "
                        f"{', '.join(sorted(trainer_jobs))}: A is raised on pods that do not "
                        "run the trainer"
                    ),
                )
            )
        self._trainer_jobs = patched_jobs | trainer_jobs
        self._executions = _Executions(Execution.parse(annotations.get(LAST_EXECUTION_ANNOTATION)))
        self._running = shapes.at(trainjob, "spec").get("suspend") is not True
        # The patch A every pod of a running job carries; None when the patch is not one value.
        self._patch_admission = next(iter(patch_values)) if len(patch_values) == 1 else None
        self._slots = _Slots()

    def claims(self, pod: Mapping[str, Any]) -> bool:
        """The pod is one of this TrainJob's (by label, owner, or the trainer it runs)."""
        return self.lineage.claims_pod(pod)

    def _read_recorded_uid(self, recorded: Any) -> str | None:
        if recorded is not None and not (isinstance(recorded, str) and recorded):
            # A blanked record would let a replaced JobSet be recorded as if seen first.
            reason = (
                f"TrainJob {self.name} annotation {JOBSET_UID_ANNOTATION} is {recorded!r}, "
                "not a JobSet UID: the recorded UID was removed"
            )
            self.findings.append(Finding(kind=FindingKind.JOBSET_UID, reason=reason))
            return None
        return recorded

    def _check_uid(self, uid: Any) -> None:
        recorded = self._recorded_uid
        if recorded is None or not isinstance(uid, str) or not uid:
            return  # nothing recorded yet, or no UID to compare (JobSet before v0.11)
        if uid == recorded or uid in self._seen_uids:
            return
        self._seen_uids.add(uid)
        reason = f"JobSet UID {uid} is not the recorded {recorded}: J may have been reset"
        self.findings.append(Finding(kind=FindingKind.JOBSET_UID, reason=reason))

    def _read_floor(self, value: Any) -> int | None:
        """The floor; without one a lowered A cannot be told (a garbage A still can)."""
        floor = _read_counter(
            value,
            name=f"TrainJob {self.name} annotation {ADMISSION_FLOOR_ANNOTATION}",
            kind=FindingKind.ADMISSION_FLOOR,
        )
        if isinstance(floor, Finding):
            self.findings.append(floor)
            return None
        return floor

    def _check_patch(self, trainjob: Mapping[str, Any]) -> tuple[frozenset[str], set[str]]:
        """Check A in this project's patch; return the jobs it names and the A values it holds."""
        named: set[str] = set()
        values: set[str] = set()
        for path, replicated_job in _patched_jobs(trainjob, self.name, self.findings):
            named.add(shapes.word(replicated_job.get("name")))
            pod_meta = shapes.at(replicated_job, "template", "spec", "template", "metadata")
            value = shapes.mapping(pod_meta.get("annotations")).get(ADMISSION_ANNOTATION)
            values.add(value if isinstance(value, str) else repr(value))  # any shape hashes
            self.findings.extend(
                _check_admission(
                    value,
                    name=f"TrainJob {self.name} {path}.{_POD_ADMISSION}",
                    floor=self._floor,
                    kind=FindingKind.RUNTIME_PATCH,
                )
            )
        return frozenset(named), values

    def see(self, pod: Mapping[str, Any]) -> None:
        """Take one of the TrainJob's pods (live or not) into the audit."""
        labels = shapes.at(pod, "metadata", "labels")
        self.restarts.see(labels.get(RESTART_ATTEMPT_KEY))  # finished pods ran executions too
        self._slots.see(pod)  # every pod: an execution rerun in the same slot may have finished
        if not self._runs_trainer(pod):
            return  # initializers and MPI workers never carry A: the trainer jobs do
        pod_name = shapes.word(shapes.mapping(pod.get("metadata")).get("name"))
        if not _is_live(pod):
            if _has_started(pod):
                self.findings.extend(self._check_zero_r(pod, pod_name))
            return  # terminating or finished: no execution runs with its values any more
        self._check_uid(labels.get(JOBSET_UID_KEY))
        where = f"pod {pod_name} annotation {ADMISSION_ANNOTATION}"
        value = shapes.annotations_of(pod).get(ADMISSION_ANNOTATION)
        found = list(
            _check_admission(value, name=where, floor=self._floor, kind=FindingKind.POD_ADMISSION)
        )
        self.findings.extend(found)
        if not found and isinstance(value, str):  # a canonical decimal, at or above the floor
            self.findings.extend(self._executions.see(pod, admission=int(value)))
            self.findings.extend(self._check_stale(pod_name, value))
            self.findings.extend(self._check_zero_r(pod, pod_name))
            self.findings.extend(self._check_restart_below(pod, pod_name, int(value)))
        self.findings.extend(self._jobs.check_pod(pod, pod_name))
        self.findings.extend(_check_restarted_in_place(pod, pod_name))
        if ownership.pod_token(pod.get("spec")) is not None and not ownership.owned_by_kind(
            pod, "Job"
        ):
            self.findings.append(
                Finding(
                    kind=FindingKind.ORPHANED,
                    reason=(
                        f"pod {pod_name} runs TrainJob {self.name}'s trainer but no Job owns "
                        "it: JobSet does not count its executions in J"
                    ),
                )
            )

    def _runs_trainer(self, pod: Mapping[str, Any]) -> bool:
        if ownership.pod_token(pod.get("spec")) is not None:
            return True  # the trainer's env, which only trainer-labelled jobs get
        replicated_job_name = shapes.labels_of(pod).get(REPLICATED_JOB_NAME_KEY)
        # A pod without the label is checked: JobSet stamps it on every pod it creates.
        return not isinstance(replicated_job_name, str) or replicated_job_name in self._trainer_jobs

    def _check_stale(self, pod_name: str, admission: str) -> Iterator[Finding]:
        if self._running and _differs(admission, self._patch_admission):
            yield Finding(
                kind=FindingKind.STALE_POD,
                reason=(
                    f"pod {pod_name} runs with A = {admission} while the running job's "
                    f"runtime patch holds A = {self._patch_admission}: it was not started by "
                    "the opening that raised A"
                ),
            )

    def _check_zero_r(self, pod: Mapping[str, Any], pod_name: str) -> Iterator[Finding]:
        counts = _counts_of(pod)
        if counts is not None and counts == (0, 0):
            yield Finding(
                kind=FindingKind.ZERO_R,
                reason=(
                    f"pod {pod_name} began an execution with R = A + J = 0 + 0 = 0: it ran "
                    "before any raise of A (the job or its JobSet was opened by hand)"
                ),
            )

    def _check_restart_below(
        self, pod: Mapping[str, Any], pod_name: str, admission: int
    ) -> Iterator[Finding]:
        """J below the highest recorded is sound only once a raise added the difference to A.

        A raise after a reset of J writes A = max(A, floor) + (highest - J) + 1 with A at least
        1, so such a pod's R is at least highest + 2 (docs/concepts.md: The raise rule).
        """
        highest = self._highest_recorded
        counts = _counts_of(pod)
        if highest is None or counts is None:
            return
        restart = counts[1]
        if restart < highest and admission + restart <= highest + 1:
            yield Finding(
                kind=FindingKind.RESTART_BELOW,
                reason=(
                    f"pod {pod_name} runs with J = {restart}, below the highest J = {highest} "
                    f"recorded, and R = {admission + restart}: A was not raised past the "
                    "executions at that J (J was reset)"
                ),
            )

    def result(
        self, *, jobset_after: Mapping[str, Any] | None = None
    ) -> tuple[tuple[Finding, ...], Observed]:
        """The findings, and what the audit's one update records beside any flag.

        `jobset_after` is the JobSet read again after the pods were listed: a JobSet restart
        during the audit makes pods of a J the first read had not counted yet, and only a
        count read after them can tell them from a J set by hand.
        """
        counted = _counted_restarts(jobset_after if jobset_after is not None else self._jobset)
        findings = [*self.findings, *self._jobs.above(counted), *self._slots.findings()]
        observed = Observed(
            highest_restart=self.restarts.highest, execution=self._executions.to_record()
        )
        return tuple(findings), observed


def _differs(admission: str, patch_admission: Any) -> bool:
    """A pod's (canonical) A is not the patch's single readable A."""
    try:
        return int(admission) != parse_counter(patch_admission, name="A")
    except IdentityError:
        return False  # no single readable patch A: the patch findings say why


def _counts_of(pod: Mapping[str, Any]) -> tuple[int, int] | None:
    """(A, J) as the prologue reads them from the pod; None when either is unreadable."""
    try:
        admission = parse_counter(shapes.annotations_of(pod).get(ADMISSION_ANNOTATION), name="A")
        restart = parse_counter(shapes.labels_of(pod).get(RESTART_ATTEMPT_KEY), name="J")
    except IdentityError:
        return None  # the prologue refuses it (exit 125), or the A findings tell it
    return admission, restart


def _counter_or_none(value: Any) -> int | None:
    try:
        return parse_counter(value, name="counter")
    except IdentityError:
        return None


def _has_started(pod: Mapping[str, Any]) -> bool:
    """The kubelet took the pod: its containers ran, or were about to."""
    return bool(shapes.mapping(pod.get("status")).get("startTime"))


def _check_restarted_in_place(pod: Mapping[str, Any], pod_name: str) -> Iterator[Finding]:
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


class _Slots:
    """Pods per (JobSet UID, slot, A, J): one execution has one pod in each slot.

    Kept for every indexed pod of a list that can be tens of thousands long, so it keeps
    little: the words every pod repeats (UID, job, A, J) once, and one name per slot until
    a second pod turns up in it.
    """

    def __init__(self) -> None:
        self.pods: dict[tuple[str, ...], str] = {}
        self.duplicates: dict[tuple[str, ...], list[str]] = {}
        self._words: dict[str, str] = {}

    def see(self, pod: Mapping[str, Any]) -> None:
        labels = shapes.at(pod, "metadata", "labels")
        if labels.get(COMPLETION_INDEX_KEY) is None:
            return  # not a pod of an indexed Job: no slot to compare
        key = tuple(
            self._words.setdefault(word := shapes.word(value), word)
            for value in (
                labels.get(JOBSET_UID_KEY),
                labels.get(REPLICATED_JOB_NAME_KEY),
                labels.get(JOB_INDEX_KEY),
                labels.get(COMPLETION_INDEX_KEY),
                shapes.annotations_of(pod).get(ADMISSION_ANNOTATION),
                labels.get(RESTART_ATTEMPT_KEY),
            )
        )
        name = shapes.word(shapes.mapping(pod.get("metadata")).get("name"))
        first = self.pods.setdefault(key, name)
        if first is not name:  # a second pod in the slot: from now on every name counts
            self.duplicates.setdefault(key, [first]).append(name)

    def findings(self) -> Iterator[Finding]:
        for (_, job, job_index, index, admission, restart), names in sorted(
            self.duplicates.items()
        ):
            if admission != repr(None):
                yield Finding(
                    kind=FindingKind.DUPLICATE_POD,
                    reason=(
                        f"pods {', '.join(sorted(names))} all ran {job}/{job_index}/{index} "
                        f"with A = {admission} and J = {restart} on one JobSet: the execution "
                        "ran more than once (a child Job deleted and recreated, or a pod "
                        "replaced)"
                    ),
                )


class _ChildJobs:
    """The JobSet's child Jobs by UID: what each holds for the pods made from it."""

    def __init__(self, jobset: Mapping[str, Any] | None) -> None:
        self._by_uid: dict[str, Mapping[str, Any]] = {}
        self._jobset_uid = shapes.mapping((jobset or {}).get("metadata")).get("uid")
        self._labelled: list[tuple[str, int]] = []  # (what, J) to compare with JobSet's count

    def all(self) -> list[Mapping[str, Any]]:
        return list(self._by_uid.values())

    def see(self, job: Mapping[str, Any]) -> Iterator[Finding]:
        meta = shapes.mapping(job.get("metadata"))
        uid, name = meta.get("uid"), shapes.word(meta.get("name"))
        if isinstance(uid, str) and uid:
            self._by_uid[uid] = job
        template_meta = shapes.at(job, "spec", "template", "metadata")
        restart = shapes.labels_of(job).get(RESTART_ATTEMPT_KEY)
        template_restart = shapes.mapping(template_meta.get("labels")).get(RESTART_ATTEMPT_KEY)
        if template_restart is not None and template_restart != restart:
            yield Finding(
                kind=FindingKind.JOB_IDENTITY,
                reason=(
                    f"Job {name} pod template label {RESTART_ATTEMPT_KEY} is "
                    f"{shapes.word(template_restart)}, not the Job's own "
                    f"{shapes.word(restart)}: its pods would run with a J JobSet never counted"
                ),
            )
        self._note_restart(f"Job {name} is labelled restart attempt", restart, job)
        runs_trainer = ownership.pod_token(shapes.at(job, "spec", "template", "spec")) is not None
        if runs_trainer and not ownership.owned_by_kind(job, "JobSet"):
            yield Finding(
                kind=FindingKind.ORPHANED,
                reason=(
                    f"Job {name} runs the trainer but no JobSet owns it (its owner references "
                    "were removed): JobSet does not count its executions in J"
                ),
            )

    def _note_restart(self, what: str, restart: Any, obj: Mapping[str, Any]) -> None:
        # Another JobSet's objects are the UID finding's: their J is not this JobSet's count.
        if shapes.labels_of(obj).get(JOBSET_UID_KEY) not in (None, self._jobset_uid):
            return
        value = _counter_or_none(restart)
        if value is not None and value > 0:
            self._labelled.append((what, value))

    def check_pod(self, pod: Mapping[str, Any], pod_name: str) -> Iterator[Finding]:
        """A live pod's A and J against the Job it was made from."""
        restart = shapes.labels_of(pod).get(RESTART_ATTEMPT_KEY)
        self._note_restart(f"pod {pod_name} runs with J =", restart, pod)
        job = next(
            (self._by_uid[uid] for uid in ownership.owner_uids(pod) if uid in self._by_uid), None
        )
        if job is None:
            return
        job_name = shapes.word(shapes.mapping(job.get("metadata")).get("name"))
        job_restart = shapes.labels_of(job).get(RESTART_ATTEMPT_KEY)
        if job_restart is not None and restart != job_restart:
            yield Finding(
                kind=FindingKind.POD_IDENTITY,
                reason=(
                    f"pod {pod_name} runs with J = {shapes.word(restart)} but its Job {job_name} "
                    f"is restart attempt {shapes.word(job_restart)}: the pod template was edited"
                ),
            )
        template = shapes.at(job, "spec", "template", "metadata")
        job_a = shapes.mapping(template.get("annotations")).get(ADMISSION_ANNOTATION)
        pod_a = shapes.annotations_of(pod).get(ADMISSION_ANNOTATION)
        if job_a is not None and pod_a != job_a:
            yield Finding(
                kind=FindingKind.POD_IDENTITY,
                reason=(
                    f"pod {pod_name} runs with A = {shapes.word(pod_a)} but its Job {job_name} "
                    f"was made with A = {shapes.word(job_a)}: the pod was edited"
                ),
            )

    def above(self, counted: int | None) -> Iterator[Finding]:
        """Jobs and live pods labelled with a J above the JobSet's count: set by hand."""
        if counted is None:
            return
        for what, restart in self._labelled:
            if restart > counted:
                yield Finding(
                    kind=FindingKind.JOB_IDENTITY
                    if what.startswith("Job")
                    else FindingKind.POD_IDENTITY,
                    reason=(
                        f"{what} {restart}, above the JobSet's status.restarts {counted}: "
                        "J was set by hand"
                    ),
                )


def _counted_restarts(jobset: Mapping[str, Any] | None) -> int | None:
    """JobSet's count of restarts, J; None without a JobSet or a readable count."""
    if jobset is None:
        return None
    value = shapes.mapping(jobset.get("status")).get("restarts", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# What an execution's identity is read from: no runtime-patch entry but ours may set it.
_IDENTITY_ANNOTATIONS: Final = (ADMISSION_ANNOTATION, RESTART_ATTEMPT_KEY)
_IDENTITY_LABELS: Final = (RESTART_ATTEMPT_KEY, JOBSET_UID_KEY, JOBSET_NAME_KEY)


def _check_foreign_patches(trainjob: Mapping[str, Any], name: str) -> Iterator[Finding]:
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


def _trainer_jobs_of(
    jobset: Mapping[str, Any] | None, runtime_now: Mapping[str, Any] | Unread | None
) -> frozenset[str]:
    """The trainer-labelled replicated jobs, from the JobSet (else the runtime as read now)."""
    if jobset is not None:
        spec: Any = jobset.get("spec")
    elif isinstance(runtime_now, Mapping):
        spec = shapes.at(runtime_now, "spec", "template").get("spec")
    else:
        return frozenset()
    return frozenset(
        shapes.word(job.get("name"))
        for job in shapes.mappings(shapes.mapping(spec).get("replicatedJobs"))
        if shapes.at(job, "template", "metadata", "labels").get(ANCESTOR_LABEL) == ANCESTOR_TRAINER
    )


def _check_child_job(job: Mapping[str, Any]) -> Iterator[Finding]:
    """The rules no annotation waives, applied to a trainer child Job as it is now."""
    meta = shapes.mapping(job.get("metadata"))
    if shapes.mapping(meta.get("labels")).get(ANCESTOR_LABEL) != ANCESTOR_TRAINER:
        return  # initializers and MPI workers: the rules check the trainer job's
    name = shapes.word(meta.get("name"))
    for violation in runtime.decide_unwaivable_in_trainer_job(job):
        yield Finding(kind=FindingKind.JOBSET_SPEC, reason=f"Job {name} {violation}")


def _check_jobset_spec(jobset: Mapping[str, Any]) -> Iterator[Finding]:
    """The runtime rules no annotation waives, applied to the live JobSet.

    The runtime may have been edited after start, or the JobSet by hand.
    """
    name = shapes.word(shapes.mapping(jobset.get("metadata")).get("name"))
    for violation in runtime.decide_unwaivable_in_jobset(jobset.get("spec"), path="spec"):
        yield Finding(kind=FindingKind.JOBSET_SPEC, reason=f"JobSet {name} {violation}")


def _check_runtime(
    trainjob: Mapping[str, Any], runtime_now: Mapping[str, Any] | None
) -> Iterator[Finding]:
    """The runtime start checked, compared with the one there now."""
    recorded = shapes.annotations_of(trainjob).get(RUNTIME_SEEN_ANNOTATION)
    if not isinstance(recorded, str):
        return  # started before the record existed, or by hand
    ref = shapes.at(trainjob, "spec", "runtimeRef")
    what = f"{shapes.word(ref.get('kind'))} {shapes.word(ref.get('name'))}"
    now = runtime_seen(runtime_now) if runtime_now is not None else None
    if now == recorded:
        return
    told = "is gone" if runtime_now is None else f"is now {now}"
    yield Finding(
        kind=FindingKind.RUNTIME_CHANGED,
        reason=(
            f"{what} changed since start checked it (UID and generation {recorded}, {told}): "
            "its restart settings may no longer pass the runtime rules; check them, and the "
            "JobSet Trainer builds from it"
        ),
    )


class _Restarts:
    """The highest J among everything seen; values that are not counts are left to the rest."""

    def __init__(self) -> None:
        self.highest: int | None = None

    def see(self, value: Any) -> None:
        if isinstance(value, str):
            try:
                value = parse_counter(value, name="J")
            except IdentityError:
                return
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            self.highest = value if self.highest is None else max(self.highest, value)


class _Executions:
    """Compares each live trainer pod with the recorded execution; picks the next record."""

    def __init__(self, recorded: Execution | None) -> None:
        self.recorded = recorded
        self.latest: Execution | None = None  # the live execution seen, by its first slot
        self.repeated = False

    def see(self, pod: Mapping[str, Any], *, admission: int) -> Iterator[Finding]:
        labels = shapes.at(pod, "metadata", "labels")
        try:
            restart = parse_counter(labels.get(RESTART_ATTEMPT_KEY), name="J")
        except IdentityError:
            return  # the prologue refuses it (exit 125): no execution runs with it
        meta = shapes.mapping(pod.get("metadata"))
        slot = "/".join(
            shapes.word(labels.get(key))
            for key in (REPLICATED_JOB_NAME_KEY, JOB_INDEX_KEY, COMPLETION_INDEX_KEY)
        )
        seen = Execution(r=admission + restart, slot=slot, pod=shapes.word(meta.get("uid")))
        name = shapes.word(meta.get("name"))
        recorded = self.recorded
        if recorded is not None and seen.r < recorded.r:
            self.repeated = True
            yield Finding(
                kind=FindingKind.LOWER_R,
                reason=(
                    f"pod {name} runs with R = A + J = {admission} + {restart} = {seen.r}, "
                    f"below the R = {recorded.r} an earlier execution had: A or J was reset"
                ),
            )
        elif (
            recorded is not None
            and seen.r == recorded.r
            and seen.slot == recorded.slot
            and seen.pod != recorded.pod
        ):
            self.repeated = True
            yield Finding(
                kind=FindingKind.REPEATED_R,
                reason=(
                    f"pod {name} began an execution with R = {seen.r}, which the execution of "
                    f"pod UID {recorded.pod} already had: the job was opened again without a "
                    "raise of A (not by dispatch-unsuspend or the dispatch admission check)"
                ),
            )
        if self.latest is None or seen.slot < self.latest.slot:
            self.latest = seen

    def to_record(self) -> Execution | None:
        """A newer execution to record; None keeps the record (nothing newer, or a finding)."""
        latest, recorded = self.latest, self.recorded
        if self.repeated or latest is None:
            return None
        if recorded is not None and latest.r <= recorded.r:
            return None
        return latest


def decide_annotations(
    trainjob: Mapping[str, Any],
    findings: Sequence[Finding],
    *,
    jobset: Mapping[str, Any] | None,
    observed: Observed | None = None,
) -> dict[str, str] | None:
    """Return the TrainJob annotations the audit's one update sets, or None if none change."""
    current = shapes.annotations_of(trainjob)
    wanted: dict[str, str] = {}
    uid = shapes.mapping(jobset.get("metadata")).get("uid") if jobset is not None else None
    uid_found = any(finding.kind is FindingKind.JOBSET_UID for finding in findings)
    if JOBSET_UID_ANNOTATION not in current and isinstance(uid, str) and uid and not uid_found:
        wanted[JOBSET_UID_ANNOTATION] = uid  # first sight: later JobSets are compared with it
    if observed is not None:
        wanted.update(_observed_annotations(current, observed))
    if findings:
        wanted[FOREIGN_ANNOTATION] = FOREIGN
        # The cause is what this audit saw, so the same findings again write nothing.
        wanted[FOREIGN_CAUSE_ANNOTATION] = build_cause([finding.reason for finding in findings])
    # No findings never removes a flag or its cause: a reset that is over (the foreign pod has
    # finished, the patch was put back) still happened, and docs/design.md §2 leaves the
    # decision to a person, who removes the flag once satisfied (and, to accept a new JobSet,
    # records its UID).
    changes = {key: value for key, value in wanted.items() if current.get(key) != value}
    return changes or None


def _observed_annotations(current: Mapping[str, Any], observed: Observed) -> dict[str, str]:
    """The highest J seen (only ever raised) and a newer execution, as annotations."""
    wanted: dict[str, str] = {}
    if observed.highest_restart is not None:
        try:
            recorded = parse_counter(current.get(HIGHEST_RESTART_ANNOTATION), name="J")
        except IdentityError:
            recorded = -1  # absent or unreadable: the seen value is the record from now on
        if observed.highest_restart > recorded:
            wanted[HIGHEST_RESTART_ANNOTATION] = str(observed.highest_restart)
    if observed.execution is not None:
        wanted[LAST_EXECUTION_ANNOTATION] = observed.execution.text()
    return wanted


def build_cause(reasons: Sequence[str]) -> str:
    """Join finding reasons into the foreign-cause annotation, capped at MAX_CAUSE_CHARS."""
    reasons = list(dict.fromkeys(reasons))
    joined = CAUSE_SEPARATOR.join(reasons)
    if len(joined) <= MAX_CAUSE_CHARS:
        return joined
    kept: list[str] = []
    for reason in reasons:
        more = _more(len(reasons) - len(kept) - 1)
        if len(CAUSE_SEPARATOR.join([*kept, reason, more])) > MAX_CAUSE_CHARS:
            break
        kept.append(reason)
    if not kept:  # one reason alone is too long: only a huge garbage value can make it so
        room = MAX_CAUSE_CHARS - len(CAUSE_SEPARATOR) - len(_more(len(reasons) - 1))
        kept.append(reasons[0][: room - len(_TRIMMED)] + _TRIMMED)
    more = _more(len(reasons) - len(kept))
    return CAUSE_SEPARATOR.join([*kept, more])


def _more(count: int) -> str:
    return f"and {count} more finding{'' if count == 1 else 's'}"


def with_annotations(trainjob: Mapping[str, Any], annotations: Mapping[str, str]) -> dict[str, Any]:
    """Return a deep copy of the TrainJob with `annotations` set in metadata; spec untouched."""
    updated = copy.deepcopy(dict(trainjob))
    metadata = updated.setdefault("metadata", {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
    return updated


def _patched_jobs(
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


def _check_admission(
    value: Any, *, name: str, floor: int | None, kind: FindingKind
) -> Iterator[Finding]:
    """Yield the finding for one A: missing, garbage, or below the floor (a lowered A)."""
    admission = _read_counter(value, name=name, kind=kind)
    if isinstance(admission, Finding):
        yield admission
    elif floor is not None and admission < floor:
        reason = f"{name} is {admission}, below the admission floor {floor}: A may have been reset"
        yield Finding(kind=kind, reason=reason)


def _read_counter(value: Any, *, name: str, kind: FindingKind) -> int | Finding:
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


def _is_live(pod: Mapping[str, Any]) -> bool:
    """A pod that is neither terminating nor finished: its execution may still be running."""
    if shapes.mapping(pod.get("metadata")).get("deletionTimestamp"):
        return False
    return shapes.mapping(pod.get("status")).get("phase") not in _FINISHED_PHASES


def job_as_audited(job: Mapping[str, Any]) -> dict[str, Any]:
    """A TrainJob, JobSet or Job less its managedFields (no audit reads them), to be kept."""
    return shapes.without_managed_fields(job)


def pod_as_audited(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A pod with only what the audit and core.rules.ownership read, for a store of thousands.

    Its names, UID and the labels, annotations and owner references they read; its containers'
    names and token (the one env entry core.rules.ownership reads), its phase, start time and its
    containers' restart counts.
    """
    spec, status = shapes.mapping(pod.get("spec")), shapes.mapping(pod.get("status"))
    containers = [
        {
            "name": container.get("name"),
            "env": [
                e
                for e in shapes.mappings(container.get("env"))
                if e.get("name") == ENV_TOKEN_PREFIX
            ],
        }
        for container in shapes.mappings(spec.get("containers"))
    ]
    statuses = [
        {"name": s.get("name"), "restartCount": s.get("restartCount")}
        for s in shapes.mappings(status.get("containerStatuses"))
    ]
    kept = {key: status[key] for key in ("phase", "startTime") if key in status}
    meta = shapes.mapping(pod.get("metadata"))
    return {
        "metadata": {
            **{key: meta[key] for key in POD_METADATA_READ if key in meta},
            "labels": _only(shapes.labels_of(pod), POD_LABELS_READ),
            "annotations": _only(shapes.annotations_of(pod), POD_ANNOTATIONS_READ),
            "ownerReferences": [
                {key: ref[key] for key in ("uid", "kind", "controller") if key in ref}
                for ref in shapes.mappings(meta.get("ownerReferences"))
            ],
        },
        "spec": {"containers": containers},
        "status": {**kept, "containerStatuses": statuses},
    }


# What the audit and core.rules.ownership read of a pod. JobSet and the Job controller put some 18
# labels and 14 annotations on each pod: kept whole, they were most of a stored pod's memory.
POD_METADATA_READ: Final = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")
POD_LABELS_READ: Final = frozenset(
    {
        JOBSET_NAME_KEY,
        JOBSET_UID_KEY,
        REPLICATED_JOB_NAME_KEY,
        JOB_INDEX_KEY,
        COMPLETION_INDEX_KEY,
        RESTART_ATTEMPT_KEY,
        ownership.BATCH_CONTROLLER_UID_KEY,
    }
)
POD_ANNOTATIONS_READ: Final = frozenset({ADMISSION_ANNOTATION})


def _only(values: Mapping[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if key in keys}
