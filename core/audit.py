"""The audit (DESIGN §2, "Resets are detected, not prevented"): findings and the one write.

Deciding only: the TrainJob, its JobSet and its pods come in as read; findings and the TrainJob
annotations to write go out. A reset is reported, never repaired: the audit flags the TrainJob
foreign so a person decides, and never stops, deletes or edits the job's spec.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from core.identity import IdentityError, parse_counter
from core.wire import (
    ADMISSION_ANNOTATION,
    ADMISSION_FLOOR_ANNOTATION,
    FOREIGN,
    FOREIGN_ANNOTATION,
    FOREIGN_CAUSE_ANNOTATION,
    JOBSET_UID_ANNOTATION,
    JOBSET_UID_KEY,
    PATCH_MANAGER,
    REPLICATED_JOB_NAME_KEY,
)

# Annotations share a 256 KiB budget per object; a job of many pods could otherwise produce a
# cause the API server refuses (422), and then the flag would never be written at all.
MAX_CAUSE_CHARS: Final = 8192
CAUSE_SEPARATOR: Final = "; "

_TRIMMED: Final = " [trimmed]"
_FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})
_PATCH_JOBS: Final = "trainingRuntimeSpec.template.spec.replicatedJobs"
_POD_ADMISSION: Final = f"template.spec.template.metadata.annotations['{ADMISSION_ANNOTATION}']"


class FindingKind(StrEnum):
    """What a finding is about: a short stable code for results and logs."""

    JOBSET_UID = "jobset-uid"  # J may have been reset: the JobSet was replaced
    ADMISSION_FLOOR = "admission-floor"  # the floor itself is missing or garbage
    RUNTIME_PATCH = "runtime-patch"  # A in this project's runtime patch is missing, garbage, low
    POD_ADMISSION = "pod-admission"  # a live pod's A is missing, garbage or low


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One sign that A or J may have been reset, told in one line a person can act on."""

    kind: FindingKind
    reason: str  # names the object, field and value

    def __str__(self) -> str:
        return self.reason


def decide_findings(
    trainjob: Mapping[str, Any],
    jobset: Mapping[str, Any] | None,
    *,
    pods: Iterable[Mapping[str, Any]],
) -> tuple[Finding, ...]:
    """Return every finding of DESIGN §2 for a TrainJob, its JobSet (None if absent) and pods.

    `pods` is iterated once, so pages of a pod list can be streamed through it.
    """
    name = _word(_mapping(trainjob.get("metadata")).get("name"))
    recorded_uid = _annotations(trainjob).get(JOBSET_UID_ANNOTATION)
    findings: list[Finding] = []
    seen_uids: set[str] = set()  # one finding per foreign JobSet UID, however many pods carry it

    def check_uid(uid: Any) -> None:
        if recorded_uid is None or not isinstance(uid, str) or not uid:
            return  # nothing recorded yet, or no UID to compare (JobSet before v0.11)
        if uid == recorded_uid or uid in seen_uids:
            return
        seen_uids.add(uid)
        reason = f"JobSet UID {uid} is not the recorded {recorded_uid}: J may have been reset"
        findings.append(Finding(kind=FindingKind.JOBSET_UID, reason=reason))

    if recorded_uid is not None and not (isinstance(recorded_uid, str) and recorded_uid):
        # A blanked record would let a replaced JobSet be recorded as if seen for the first time.
        reason = (
            f"TrainJob {name} annotation {JOBSET_UID_ANNOTATION} is {recorded_uid!r}, "
            "not a JobSet UID: the recorded UID was removed"
        )
        findings.append(Finding(kind=FindingKind.JOBSET_UID, reason=reason))
        recorded_uid = None
    if jobset is not None:
        check_uid(_mapping(jobset.get("metadata")).get("uid"))

    read_floor = _read_counter(
        _annotations(trainjob).get(ADMISSION_FLOOR_ANNOTATION),
        name=f"TrainJob {name} annotation {ADMISSION_FLOOR_ANNOTATION}",
        kind=FindingKind.ADMISSION_FLOOR,
    )
    floor: int | None = None  # without a floor a lowered A cannot be told; a garbage A still can
    if isinstance(read_floor, Finding):
        findings.append(read_floor)
    else:
        floor = read_floor

    admitted_jobs: set[str] = set()
    for path, replicated_job in _patched_jobs(trainjob, name, findings):
        admitted_jobs.add(_word(replicated_job.get("name")))
        pod_annotations = _at(replicated_job, "template", "spec", "template", "metadata")
        value = _mapping(pod_annotations.get("annotations")).get(ADMISSION_ANNOTATION)
        where = f"TrainJob {name} {path}.{_POD_ADMISSION}"
        findings.extend(
            _check_admission(value, name=where, floor=floor, kind=FindingKind.RUNTIME_PATCH)
        )

    for pod in pods:
        if not _is_live(pod):
            continue  # terminating or finished: no execution runs with its values any more
        labels = _at(pod, "metadata", "labels")
        check_uid(labels.get(JOBSET_UID_KEY))
        replicated_job_name = labels.get(REPLICATED_JOB_NAME_KEY)
        if replicated_job_name is not None and replicated_job_name not in admitted_jobs:
            continue  # initializers and MPI workers never carry A: the patch sets it on one job
        # A pod without the label is checked: JobSet stamps it on every pod it creates.
        pod_name = _word(_mapping(pod.get("metadata")).get("name"))
        where = f"pod {pod_name} annotation {ADMISSION_ANNOTATION}"
        value = _annotations(pod).get(ADMISSION_ANNOTATION)
        findings.extend(
            _check_admission(value, name=where, floor=floor, kind=FindingKind.POD_ADMISSION)
        )
    return tuple(findings)


def decide_annotations(
    trainjob: Mapping[str, Any],
    findings: Sequence[Finding],
    *,
    jobset: Mapping[str, Any] | None,
) -> dict[str, str] | None:
    """Return the TrainJob annotations the audit's one update sets, or None if none change."""
    current = _annotations(trainjob)
    wanted: dict[str, str] = {}
    uid = _mapping(jobset.get("metadata")).get("uid") if jobset is not None else None
    uid_found = any(finding.kind is FindingKind.JOBSET_UID for finding in findings)
    if JOBSET_UID_ANNOTATION not in current and isinstance(uid, str) and uid and not uid_found:
        wanted[JOBSET_UID_ANNOTATION] = uid  # first sight: later JobSets are compared with it
    if findings:
        wanted[FOREIGN_ANNOTATION] = FOREIGN
        # The cause is what this audit saw, so the same findings again write nothing.
        wanted[FOREIGN_CAUSE_ANNOTATION] = build_cause([finding.reason for finding in findings])
    # No findings never removes a flag or its cause: a reset that is over (the foreign pod has
    # finished, the patch was put back) still happened, and DESIGN §2 leaves the decision to a
    # person, who removes the flag once satisfied (and, to accept a new JobSet, records its UID).
    changes = {key: value for key, value in wanted.items() if current.get(key) != value}
    return changes or None


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
    patches = _at(trainjob, "spec").get("runtimePatches")
    found = False
    for index, patch in enumerate(patches if isinstance(patches, list) else []):
        if not isinstance(patch, Mapping) or patch.get("manager") != PATCH_MANAGER:
            continue
        found = True
        path = f"spec.runtimePatches[{index}].{_PATCH_JOBS}"
        jobset_spec = _at(patch, "trainingRuntimeSpec", "template", "spec")
        replicated_jobs = jobset_spec.get("replicatedJobs")
        if not isinstance(replicated_jobs, list) or not replicated_jobs:
            reason = f"TrainJob {name} {path} is empty: the patch sets A on no pod"
            findings.append(Finding(kind=FindingKind.RUNTIME_PATCH, reason=reason))
            continue
        for job_index, replicated_job in enumerate(replicated_jobs):
            yield f"{path}[{job_index}]", _mapping(replicated_job)
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
    if _mapping(pod.get("metadata")).get("deletionTimestamp"):
        return False
    return _mapping(pod.get("status")).get("phase") not in _FINISHED_PHASES


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _at(obj, "metadata", "annotations")


def _at(obj: Mapping[str, Any], *keys: str) -> Mapping[str, Any]:
    """The mapping at `keys` below `obj`; a missing or malformed step reads as empty."""
    for key in keys:
        obj = _mapping(obj.get(key))
    return obj


def _mapping(value: Any) -> Mapping[str, Any]:
    """`value` if it is a mapping; unset or any other shape reads as empty, never a crash."""
    return value if isinstance(value, Mapping) else {}


def _word(value: Any) -> str:
    return value if isinstance(value, str) and value else repr(value)
