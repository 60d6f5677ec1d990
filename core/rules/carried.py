"""Whether Trainer carried a TrainJob's opening into its JobSet, or could not (docs/operations.md).

Opening a job is one write of the TrainJob (`spec.suspend` false, with the raise of A); what
runs is the JobSet Trainer then writes from it. Trainer (v2.2.1 and v2.3.0 alike, read in
their `pkg/controller/trainjob_controller.go`) rebuilds the JobSet at every reconcile and
applies it; when the API server refuses that (JobSet refuses a changed template of a JobSet
that has run as immutable: the runtime snapshot edited, or deleted after its runtime was),
Trainer posts a Warning Event `TrainJobResourcesCreationFailed` on the TrainJob, its error in
the message, and leaves the JobSet as it was: suspended. It sets no condition for it, but in
the same reconcile it still marks the job resumed (condition `Suspended` False, reason
`Resumed`), the status written after the JobSet's apply was tried.

So an open TrainJob whose `Suspended` condition is False was reconciled open by Trainer; if
its JobSet is then suspended (or missing), the opening was not carried: nothing runs, and will
not until what Trainer names is put right. A JobSet read after the TrainJob that is not
suspended was opened. Until Trainer reconciles the opening the condition is still True (every
opening follows a suspension Trainer reconciled: start creates the job suspended, a hold
drains before the release), and the outcome is not known yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from dispatch_k8s.core.rules import shapes, trainjob, wire

WAITING: Final = "waiting"  # Trainer has not reconciled the opening yet
NO_REASON: Final = (
    f"Trainer's reason was not found among the TrainJob's Events ({wire.TRAINER_FAILED_REASON}): "
    "expired, or not readable with these credentials"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Unopened:
    """An open TrainJob whose opening Trainer could not carry into its JobSet."""

    reason: str  # names the TrainJob, the JobSet's state and Trainer's reason
    told: bool  # Trainer's reason was found (its Event may follow the status by moments)

    def __str__(self) -> str:
        return self.reason


def decide_carried(
    job: Mapping[str, Any],
    jobset: Mapping[str, Any] | None,
    failures: Iterable[Mapping[str, Any]] = (),
) -> Unopened | Literal["waiting"] | None:
    """Unopened when Trainer reconciled the job open and its JobSet is not, WAITING before.

    None when nothing is amiss: the job suspended or finished, or its JobSet open.
    `failures`: Trainer's `TrainJobResourcesCreationFailed` Events on the job (core/v1 as
    listed), the newest of which gives the reason; `jobset` read after `job`.
    """
    if shapes.at(job, "spec").get("suspend") is True or trainjob.finished_reason(job) is not None:
        return None
    if jobset is not None and shapes.at(jobset, "spec").get("suspend") is not True:
        return None
    if not _reconciled_open(job):
        return WAITING
    name = shapes.at(job, "metadata").get("name")
    state = "is missing" if jobset is None else "is still suspended"
    why = trainer_reason(job, failures)
    return Unopened(
        reason=(
            f"TrainJob {name} is not opened: Trainer reconciled it open but its JobSet {name} "
            f"{state}, so nothing runs: {why or NO_REASON}"
        ),
        told=why is not None,
    )


def trainer_reason(job: Mapping[str, Any], failures: Iterable[Mapping[str, Any]]) -> str | None:
    """The message of Trainer's newest failure Event about this very TrainJob (by UID)."""
    uid = shapes.at(job, "metadata").get("uid")
    told = [
        event
        for event in failures
        if event.get("reason") == wire.TRAINER_FAILED_REASON
        and shapes.at(event, "involvedObject").get("uid") == uid
    ]
    if not told:
        return None
    message = max(told, key=_when).get("message")
    return message if isinstance(message, str) and message else None


def _when(event: Mapping[str, Any]) -> str:
    """When an Event was last seen: RFC 3339 in UTC, so its text orders as its time."""
    series = shapes.mapping(event.get("series"))
    for at in (series.get("lastObservedTime"), event.get("lastTimestamp"), event.get("eventTime")):
        if isinstance(at, str) and at:
            return at
    return str(shapes.at(event, "metadata").get("creationTimestamp") or "")


def _reconciled_open(job: Mapping[str, Any]) -> bool:
    for condition in shapes.mappings(shapes.at(job, "status").get("conditions")):
        if condition.get("type") == wire.TRAINER_SUSPENDED_CONDITION:
            return condition.get("status") == "False"
    return False
