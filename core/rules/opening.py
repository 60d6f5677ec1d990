"""An opening no raise covers, and records no raise wrote, from the TrainJob (docs/operations.md).

Every raise of A records in `open-until-generation` the last `metadata.generation` from which
the job may be opened on it (pipelines/policies/guard.yaml): the generation the raise itself
produces when it opens the job (so it is spent at once), one more when it leaves the job
suspended (Kueue writes its pod-set patch in one update and opens in the next). The opening
itself changes the spec, so it moves the generation on by one: a job opened on a raise is
open at a generation of at most the record + 1.

Almost nothing else moves the generation of an open job: Trainer makes `runtimeRef`,
`trainer`, `initializer` and `managedBy` immutable and refuses any `runtimePatches` change
unless the job is suspended before or after the update, and metadata writes (the audit's
records among them) leave the generation alone. The one exception is
`activeDeadlineSeconds`: it can be set on a running job and removed again (its CEL rule binds
only while it is set), each a generation more, which the TrainJob cannot tell from an
opening. `dispatch-start` never sets it, and on expiry Trainer deletes the JobSet (J begins
again), so such an edit is flagged too, and the reason says so (tests/integration/
test_auditor.py shows all of this on the real API server). So an open job past the record + 1
was opened again without a raise (or had its deadline edited while running): its execution
may have begun with an R the job already had. It needs no earlier observation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from dispatch_k8s.core.rules import shapes
from dispatch_k8s.core.rules import trainjob as trainjobs
from dispatch_k8s.core.rules.audit import Finding, FindingKind
from dispatch_k8s.core.rules.wire import (
    ADMISSION_FLOOR_ANNOTATION,
    LAST_EXECUTION_ANNOTATION,
    OPEN_UNTIL_GENERATION_ANNOTATION,
    RAISED_FOR_ANNOTATION,
)

# As guard.yaml reads the record: decimal digits, short enough to be a generation.
_RECORD: Final = re.compile(r"[0-9]{1,18}")
_HOW: Final = (
    "the job was opened without a raise of A (not by dispatch-unsuspend or the dispatch "
    "admission check), so this execution may repeat an R the job already had (or, the one "
    "other way, spec.activeDeadlineSeconds was set or removed while it ran)"
)


def decide_unraised_opening(trainjob: Mapping[str, Any]) -> Finding | None:
    """The finding for an open TrainJob whose generation no raise's record covers, or None."""
    if shapes.at(trainjob, "spec").get("suspend") is True:
        return None  # suspended: no execution runs on this opening
    meta = shapes.mapping(trainjob.get("metadata"))
    generation = meta.get("generation")
    if not isinstance(generation, int) or isinstance(generation, bool):
        return None  # the API server always sets it: an object not read from it
    name = meta.get("name")
    record = shapes.annotations_of(trainjob).get(OPEN_UNTIL_GENERATION_ANNOTATION)
    where = (
        f"TrainJob {name} is open (spec.suspend is not true) at metadata.generation {generation}"
    )
    if not isinstance(record, str) or not _RECORD.fullmatch(record):
        told = "is missing" if record is None else f"is {record!r}, not a generation"
        reason = (
            f"{where}, but {OPEN_UNTIL_GENERATION_ANNOTATION} {told}: no raise of A covers "
            f"the opening: {_HOW}"
        )
        return Finding(kind=FindingKind.UNRAISED_OPENING, reason=reason)
    if int(record) > generation + 1:
        # A raise records the generation it produces, or the one after: never further ahead
        # than that (docstring). A record past it was written by hand to open on later, and
        # bounds nothing.
        reason = (
            f"{where}, but {OPEN_UNTIL_GENERATION_ANNOTATION} {record} is past any generation a "
            f"raise of A records (at most {generation + 1} now): it was written by hand: {_HOW}"
        )
        return Finding(kind=FindingKind.UNRAISED_OPENING, reason=reason)
    if generation <= int(record) + 1:
        return None
    reason = (
        f"{where}, past {OPEN_UNTIL_GENERATION_ANNOTATION} {record} (the last raise of A covers "
        f"an opening from generation {record} at the latest, so up to {int(record) + 1}): {_HOW}"
    )
    return Finding(kind=FindingKind.UNRAISED_OPENING, reason=reason)


def decide_unearned_records(trainjob: Mapping[str, Any]) -> Finding | None:
    """The finding for a suspended TrainJob holding records no raise of A wrote, or None.

    What only a raise (or an execution after one) writes, where no raise was: records forged
    at creation. `start` makes a job with A and its floor at 0 and none of these records;
    every raise writes `open-until-generation` (with A, the floor, and `raised-for` where Kueue
    reserved), and no execution runs before an opening. So without that record, a floor or an
    A above 0, a `raised-for` or a `last-execution` were written by hand: they would bound what
    later raises and audits compare with. And a record past the generation after the current one was
    written by hand too (a raise records at most one ahead: module docstring). `highest-restart`
    and `jobset-uid` are not among them: the audit writes both at first sight, raised or not
    (a forged `jobset-uid` is then not the JobSet's, which is its own finding).
    An open job is `decide_unraised_opening`'s.
    """
    if shapes.at(trainjob, "spec").get("suspend") is not True:
        return None
    meta = shapes.mapping(trainjob.get("metadata"))
    annotations = shapes.annotations_of(trainjob)
    record = annotations.get(OPEN_UNTIL_GENERATION_ANNOTATION)
    generation = meta.get("generation")
    where = f"TrainJob {meta.get('name')}"
    if record is not None:
        if not isinstance(record, str) or not _RECORD.fullmatch(record):
            return None  # unreadable, it covers no opening: decide_unraised_opening's, once open
        if isinstance(generation, int) and not isinstance(generation, bool):
            if int(record) <= generation + 1:
                return None
            reason = (
                f"{where} is suspended at metadata.generation {generation}, but "
                f"{OPEN_UNTIL_GENERATION_ANNOTATION} {record} is past any generation a raise of "
                f"A records (at most {generation + 1} now): it was written by hand"
            )
            return Finding(kind=FindingKind.UNEARNED_RECORD, reason=reason)
        return None
    told = []
    floor, in_patch = trainjobs.admission_floor(trainjob), trainjobs.admission_in_patch(trainjob)
    if isinstance(floor, int) and floor > 0:
        told.append(f"{ADMISSION_FLOOR_ANNOTATION} {floor}")
    if isinstance(in_patch, int) and in_patch > 0:
        told.append(f"A {in_patch} in its runtime patch")
    told += [
        key for key in (RAISED_FOR_ANNOTATION, LAST_EXECUTION_ANNOTATION) if key in annotations
    ]
    if not told:
        return None
    reason = (
        f"{where} holds {', '.join(told)}, but no {OPEN_UNTIL_GENERATION_ANNOTATION}: no raise "
        "of A was made on it, so these were written by hand (forged at creation), and would "
        "bound what later raises and audits compare with"
    )
    return Finding(kind=FindingKind.UNEARNED_RECORD, reason=reason)
