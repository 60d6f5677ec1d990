"""What `dispatch-status` shows of a TrainJob: its mode, A, J, R, identity and records.

Read-only: one record per job from the TrainJob, its JobSet and its Workloads as read, and the
same record as a row of kubectl's kind of table. A value that cannot be read is shown as
missing and its reason listed in `problems`: a status never refuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

from dispatch_k8s.core.rules import shapes, trainjob, wire, workload
from dispatch_k8s.core.rules.audit import Execution
from dispatch_k8s.core.rules.carried import Uncarried
from dispatch_k8s.core.rules.decisions import Refusal
from dispatch_k8s.core.rules.identity import (
    Counts,
    IdentityError,
    attempt_token,
    epoch,
    identity_from_text,
    next_admission,
)

PLAIN: Final = "plain"
QUEUE: Final = "queue"
RUNNING: Final = "Running"
SUSPENDED: Final = "Suspended"
NOT_OPENED: Final = "NotOpened"  # open, but Trainer could not open its JobSet (core.rules.carried)
NOT_HELD: Final = "NotHeld"  # held, but Trainer could not suspend its JobSet (core.rules.carried)
FINISHED: Final = "Finished"
NONE: Final = "<none>"  # as kubectl shows a missing value
COLUMN_GAP: Final = "   "  # kubectl's tabwriter padding
HEADERS: Final = (
    "NAME",
    "MODE",
    "STATE",
    "A",
    "FLOOR",
    "J",
    "HIGHEST-J",
    "R",
    "EPOCH",
    "ATTEMPT",
    "LAST-R",
    "PENDING-RAISE",
    "FOREIGN",
    "RESERVATION",
    "CHECK",
)
T = TypeVar("T")


def describe(
    job: Mapping[str, Any],
    jobset: Mapping[str, Any] | None,
    workloads: Sequence[Mapping[str, Any]],
    *,
    check: str,
    uncarried: Uncarried | None = None,
) -> dict[str, Any]:
    """The status record of `job`, given its JobSet and the Workloads labelled with its UID.

    `uncarried`: what `core.rules.carried` found of an opening or hold Trainer could not carry.
    """
    problems: list[str] = []
    in_patch = _read(trainjob.admission_in_patch(job), problems)
    floor = _read(trainjob.admission_floor(job), problems)
    restart = _read(trainjob.restart_count(jobset), problems)
    highest = _read(trainjob.highest_restart(job), problems)
    queued = trainjob.is_kueue_managed(job)
    current = current_workload(workloads) if queued else None
    pending = pending_raise(job, current)
    state = _state(job) if uncarried is None else NOT_HELD if uncarried.held else NOT_OPENED
    execution = None
    if in_patch is not None and floor is not None and restart is not None and highest is not None:
        counters = Counters(in_patch=in_patch, floor=floor, restart=restart, highest=highest)
        execution = _execution(job, state, pending, counters, problems)
    annotations = shapes.annotations_of(job)
    last = Execution.parse(annotations.get(wire.LAST_EXECUTION_ANNOTATION))
    flagged = trainjob.foreign_flag(job) is not None
    meta = shapes.at(job, "metadata")
    return {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "mode": QUEUE if queued else PLAIN,
        "queue": shapes.labels_of(job).get(wire.QUEUE_LABEL) if queued else None,
        "state": state,
        "notOpened": None if uncarried is None or uncarried.held else uncarried.reason,
        "notHeld": uncarried.reason if uncarried is not None and uncarried.held else None,
        "admission": {"patch": in_patch, "floor": floor},
        "restart": {"current": restart, "highest": highest},
        "execution": execution,
        "lastExecution": None if last is None else dataclasses.asdict(last),
        "pendingRaise": pending,
        "foreign": flagged,
        "foreignCause": annotations.get(wire.FOREIGN_CAUSE_ANNOTATION) if flagged else None,
        "workload": None if current is None else _workload(current, job, check),
        "problems": problems,
    }


def _read(value: T | Refusal, problems: list[str]) -> T | None:
    if isinstance(value, Refusal):
        problems.append(value.reason)
        return None
    return value


def _state(job: Mapping[str, Any]) -> str:
    if trainjob.finished_reason(job) is not None:
        return FINISHED
    return SUSPENDED if shapes.at(job, "spec").get("suspend") is True else RUNNING


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Counters:
    """A and J as the TrainJob and its JobSet record them, each read."""

    in_patch: int
    floor: int
    restart: int  # the JobSet's J: the one the running or next execution has
    highest: int


# The execution each state shows. Not opened, nothing runs: the one its opening raised A for.
# Not held, the one held goes on running.
_WHICH: Final = {
    RUNNING: "running",
    NOT_HELD: "running",
    NOT_OPENED: "opening",
    FINISHED: "last",
}


def _execution(
    job: Mapping[str, Any], state: str, pending: bool, counters: Counters, problems: list[str]
) -> dict[str, Any] | None:
    """The counters, epoch and attempt of the execution running (or last run, or next).

    A suspended job's next execution runs on the raise already made for it, else on the one
    its next opening makes (the raise rule, with the JobSet's J as now).
    """
    admission, restart = counters.in_patch, counters.restart
    which = _WHICH.get(state, "next")
    try:
        if which == "next" and not pending:
            admission = next_admission(
                in_patch=admission,
                floor=counters.floor,
                highest_restart=counters.highest,
                restart=restart,
            )
        recorded = trainjob.recorded_identity(job)
        identity = identity_from_text(
            job_id=recorded[wire.JOB_ID_ANNOTATION],
            generation=recorded[wire.GENERATION_ANNOTATION],
            submission=recorded[wire.SUBMISSION_ANNOTATION],
            attempt=recorded[wire.ATTEMPT_ANNOTATION],
        )
        counts = Counts(admission=admission, restart=restart)
        told = {"epoch": epoch(identity, counts), "attempt": attempt_token(identity, counts)}
    except IdentityError as e:
        problems.append(str(e))
        return None
    return {"which": which, "admission": admission, "restart": restart, "r": counts.r, **told}


def current_workload(workloads: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The Workload Kueue queues the job with now: the newest one not finished nor deleted.

    A TrainJob has one, but for moments while Kueue replaces it; with none live, the newest.
    """
    live = [
        candidate
        for candidate in workloads
        if not workload.is_finished(candidate)
        and not shapes.at(candidate, "metadata").get("deletionTimestamp")
    ]
    newest = sorted(
        live or workloads, key=lambda w: str(shapes.at(w, "metadata").get("creationTimestamp"))
    )
    return newest[-1] if newest else None


def pending_raise(job: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """Whether a raise of A waits for its opening: made while suspended, not yet spent.

    A raise that leaves the job suspended covers an opening up to one generation later
    (core.rules.opening); in queue mode it is for one reservation only, the one it records.
    """
    if shapes.at(job, "spec").get("suspend") is not True:
        return False
    generation = shapes.at(job, "metadata").get("generation")
    annotations = shapes.annotations_of(job)
    record = annotations.get(wire.OPEN_UNTIL_GENERATION_ANNOTATION)
    if not (isinstance(record, str) and record.isascii() and record.isdigit()):
        return False
    if not isinstance(generation, int) or generation > int(record):
        return False
    if not trainjob.is_kueue_managed(job):
        return True
    recorded = annotations.get(wire.RAISED_FOR_ANNOTATION)
    return current is not None and workload.raised_for_reservation(recorded, current)


def _workload(current: Mapping[str, Any], job: Mapping[str, Any], check: str) -> dict[str, Any]:
    return {
        "name": shapes.at(current, "metadata").get("name"),
        "clusterQueue": workload.cluster_queue(current) or None,  # none: no quota reserved
        "raisedFor": workload.raised_for_reservation(
            shapes.annotations_of(job).get(wire.RAISED_FOR_ANNOTATION), current
        ),
        "check": workload.check_state(current, check),
        "finished": workload.is_finished(current),
    }


def row(record: Mapping[str, Any]) -> list[str]:
    """The record as the table's row, in the order of HEADERS."""
    execution = shapes.mapping(record.get("execution"))
    admission, restart = shapes.mapping(record["admission"]), shapes.mapping(record["restart"])
    last, found = shapes.mapping(record.get("lastExecution")), shapes.mapping(record["workload"])
    cells = (
        record["name"],
        record["mode"],
        record["state"],
        admission.get("patch"),
        admission.get("floor"),
        restart.get("current"),
        restart.get("highest"),
        execution.get("r"),
        execution.get("epoch"),
        execution.get("attempt"),
        last.get("r"),
        record["pendingRaise"],
        record["foreign"],
        found.get("clusterQueue"),
        found.get("check"),
    )
    return [_cell(value) for value in cells]


def _cell(value: Any) -> str:
    if value is None:
        return NONE
    return str(value).lower() if isinstance(value, bool) else str(value)


def widths(rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's width: its longest cell, the header's included."""
    return [max(len(cell) for cell in column) for column in zip(HEADERS, *rows, strict=True)]


def line(cells: Sequence[str], column_widths: Sequence[int]) -> str:
    """One line of the table: each cell left-aligned, the last one unpadded."""
    padded = [cell.ljust(width) for cell, width in zip(cells[:-1], column_widths, strict=False)]
    return COLUMN_GAP.join([*padded, cells[-1]])
