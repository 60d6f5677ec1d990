"""What the audit's one update writes on the TrainJob: the flag and its cause, what it saw."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from dispatch_k8s.core.rules import shapes
from dispatch_k8s.core.rules.audit.findings import Finding, FindingKind
from dispatch_k8s.core.rules.identity import IdentityError, parse_counter
from dispatch_k8s.core.rules.wire import (
    FOREIGN,
    FOREIGN_ANNOTATION,
    FOREIGN_CAUSE_ANNOTATION,
    HIGHEST_RESTART_ANNOTATION,
    JOBSET_UID_ANNOTATION,
    LAST_EXECUTION_ANNOTATION,
)

# Annotations share a 256 KiB budget per object; a job of many pods could otherwise produce a
# cause the API server refuses (422), and then the flag would never be written at all.
MAX_CAUSE_CHARS: Final = 8192
CAUSE_SEPARATOR: Final = "; "
MAX_EVENTS: Final = 10  # Warning Events per audit: the cause annotation holds the rest

_TRIMMED: Final = " [trimmed]"


@dataclass(frozen=True, slots=True, kw_only=True)
class Execution:
    """The execution the audit last saw: its R, and its pod in each slot it saw, by UID.

    A slot (replicated job, Job index, completion index) has exactly one pod per execution:
    with backoffLimit 0 a failed pod fails its Job and JobSet restarts with J + 1. So a pod of
    a recorded slot with the same R and another UID is a new execution that repeated R,
    whichever slot it is in (a rank scaled away and back, a pod deleted and made again).
    """

    r: int
    pods: Mapping[str, str]  # slot -> pod UID, in the order first seen

    def text(self) -> str:
        """The annotation value: `{"pods":{slot:uid,...},"r":R}`, slots in the order seen.

        A slot seen later at the same R is appended, so the record as it was stays a prefix of
        the record as it is written next (the guard's keep-last-execution reads it so).
        """
        pods = json.dumps(dict(self.pods), separators=(",", ":"))
        return f'{{"pods":{pods},"r":{self.r}}}'

    def with_pods(self, pods: Mapping[str, str]) -> Execution:
        """The record with the slots of `pods` it does not hold yet appended."""
        added = {slot: uid for slot, uid in pods.items() if slot not in self.pods}
        return Execution(r=self.r, pods={**self.pods, **added})

    @classmethod
    def parse(cls, text: Any) -> Execution | None:
        """The recorded execution; None when nothing (readable) is recorded.

        Records written before slots were kept per execution (`{"pod":UID,"r":R,"slot":S}`)
        read as that one slot's.
        """
        try:
            record = json.loads(text, object_pairs_hook=_first) if isinstance(text, str) else None
        except ValueError:
            return None
        if not isinstance(record, dict):
            return None
        r, pods = record.get("r"), record.get("pods")
        if "pods" not in record:  # the earlier record, of one slot
            slot, pod = record.get("slot"), record.get("pod")
            pods = {slot: pod} if isinstance(slot, str) else None
        if not (isinstance(r, int) and not isinstance(r, bool) and isinstance(pods, dict)):
            return None
        if not all(isinstance(uid, str) for uid in pods.values()):
            return None
        return cls(r=r, pods=pods)


def _first(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose repeated key keeps its first value.

    A slot appended again (the guard's prefix rule lets it through) never changes its pod.
    """
    found: dict[str, Any] = {}
    for key, value in pairs:
        found.setdefault(key, value)
    return found


@dataclass(frozen=True, slots=True, kw_only=True)
class Observed:
    """What the audit saw that its one update records beside any flag."""

    highest_restart: int | None  # the highest J on the JobSet or any pod; None if none seen
    execution: Execution | None  # the execution to record; None leaves the record as it is


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
