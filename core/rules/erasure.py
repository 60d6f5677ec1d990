"""A record that bounds R erased or moved back, told from two versions of one TrainJob.

The audit compares what it sees with what it recorded; where the policies are not installed
anyone who may update the TrainJob may erase those records first (remove `last-execution`,
then delete the child Job: the rerun repeats R and a later audit, with nothing to compare,
finds nothing). No version of the TrainJob alone tells that, but two versions do: nothing
this project writes ever moves these records back, so a change between two versions that
does was made by someone else. The controller's auditor sees each version its watch tells
(controller/auditor.py) and calls `decide_erasures` on the one it kept and the one told now;
`restored` then puts the records back where they were before it audits, so what they bound
is checked against them and its one update writes them back beside the flag.

What only rises, and who raises it: `last-execution` (its R; the audit records only a newer
execution), `highest-restart` and `admission-floor` (the audit and every raise only raise
them), `jobset-uid` (replaced by the person accepting a new JobSet, never removed), and
`open-until-generation`, which only a raise of A moves on, in the same update as the floor.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from dispatch_k8s.core.rules import shapes
from dispatch_k8s.core.rules.audit import Execution, Finding, FindingKind
from dispatch_k8s.core.rules.identity import IdentityError, parse_counter
from dispatch_k8s.core.rules.wire import (
    ADMISSION_FLOOR_ANNOTATION,
    HIGHEST_RESTART_ANNOTATION,
    JOBSET_UID_ANNOTATION,
    LAST_EXECUTION_ANNOTATION,
    OPEN_UNTIL_GENERATION_ANNOTATION,
)

RECORDS: Final = (
    LAST_EXECUTION_ANNOTATION,
    HIGHEST_RESTART_ANNOTATION,
    ADMISSION_FLOOR_ANNOTATION,
    JOBSET_UID_ANNOTATION,
    OPEN_UNTIL_GENERATION_ANNOTATION,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Erasure:
    """One record of a TrainJob moved back: the value it had, and what it was left at."""

    trainjob: str  # its name
    annotation: str
    value: str  # as it was before: what `restored` puts back
    left: str | None  # as the erasure left it (None: removed)

    def then(self, later: Erasure) -> Erasure:
        """This erasure and a later one of the same record, as one: from the first value."""
        return Erasure(
            trainjob=self.trainjob, annotation=self.annotation, value=self.value, left=later.left
        )

    @property
    def finding(self) -> Finding:
        """The finding, for the flag's cause and the Warning Event."""
        told = "removed" if self.left is None else f"changed to {self.left!r}"
        reason = (
            f"TrainJob {self.trainjob}: {self.annotation} {self.value!r} was {told}, which "
            "dispatch-k8s never does: a record the audit compares with was erased, so it is "
            "put back and what it bounds is checked against it"
        )
        return Finding(kind=FindingKind.RECORD_ERASED, reason=reason)


def decide_erasures(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[Erasure, ...]:
    """The records `after` holds lower than `before` did, for two versions of one TrainJob."""
    if _uid(before) is None or _uid(before) != _uid(after):
        return ()  # not the same TrainJob: one made again starts with no records
    was, now = shapes.annotations_of(before), shapes.annotations_of(after)
    name = str(shapes.mapping(after.get("metadata")).get("name"))
    return tuple(
        Erasure(
            trainjob=name,
            annotation=annotation,
            value=str(was[annotation]),
            left=_text(now.get(annotation)),
        )
        for annotation in RECORDS
        if _moved_back(annotation, was, now)
    )


def _moved_back(annotation: str, was: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Whether `annotation` is lower in `now` than in `was` (or gone), as only rises are ours."""
    if annotation == LAST_EXECUTION_ANNOTATION:
        old_run, new_run = (
            Execution.parse(was.get(annotation)),
            Execution.parse(now.get(annotation)),
        )
        if old_run is None:
            return False
        if new_run is None or new_run.r < old_run.r:
            return True
        # At the same R only slots are added: one dropped or changed would let its rank run again.
        return new_run.r == old_run.r and any(
            new_run.pods.get(slot) != uid for slot, uid in old_run.pods.items()
        )
    if annotation == JOBSET_UID_ANNOTATION:  # replaced by a person accepting a new JobSet
        return isinstance(was.get(annotation), str) and annotation not in now
    old, new = _counter(was.get(annotation)), _counter(now.get(annotation))
    if old is None:
        return False
    if annotation == OPEN_UNTIL_GENERATION_ANNOTATION:  # moved on only by a raise
        floor_was = _counter(was.get(ADMISSION_FLOOR_ANNOTATION))
        floor_now = _counter(now.get(ADMISSION_FLOOR_ANNOTATION))
        raised = floor_now is not None and (floor_was is None or floor_now > floor_was)
        return not (new == old or (new is not None and new > old and raised))
    return new is None or new < old


def restored(trainjob: Mapping[str, Any], erasures: Iterable[Erasure]) -> dict[str, Any]:
    """A copy of the TrainJob with each erased record put back.

    Only where it is still as the erasure left it, not where something has moved it on since
    (a raise, a newer execution recorded).
    """
    copied = copy.deepcopy(dict(trainjob))
    annotations = copied.setdefault("metadata", {}).setdefault("annotations", {})
    for erasure in erasures:
        if _text(annotations.get(erasure.annotation)) == erasure.left:
            annotations[erasure.annotation] = erasure.value
    return copied


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _uid(trainjob: Mapping[str, Any]) -> str | None:
    uid = shapes.mapping(trainjob.get("metadata")).get("uid")
    return uid if isinstance(uid, str) and uid else None


def _counter(value: Any) -> int | None:
    try:
        return parse_counter(value, name="record")
    except IdentityError:
        return None
