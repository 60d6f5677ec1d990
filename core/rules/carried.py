"""Whether Trainer carried a TrainJob's opening or hold into its JobSet, or could not.

Opening a job, and holding it, is one write of the TrainJob (`spec.suspend` false with the
raise of A, or true); what runs is the JobSet Trainer then writes from it. Trainer (v2.2.1 and
v2.3.0 alike, read in their `pkg/controller/trainjob_controller.go`) rebuilds the JobSet
whenever the TrainJob or the JobSet is suspended and applies it; when the API server refuses
that (JobSet refuses a changed template as immutable: the runtime snapshot edited, or deleted
after its runtime was), Trainer posts a Warning Event `TrainJobResourcesCreationFailed` on the
TrainJob, its error in the message, and leaves the JobSet as it was. It sets no condition for
it, but in the same reconcile it still sets the `Suspended` condition from `spec.suspend`
(False, reason `Resumed`, on an opening; True on a hold), the status written after the
JobSet's apply was tried.

So a TrainJob whose `Suspended` condition agrees with its `spec.suspend` was reconciled by
Trainer; if its JobSet then does not (suspended or missing under an open job, not suspended
under a held one), the change was not carried: an open job runs nothing, a held one goes on
running, until what Trainer names is put right (docs/operations.md). A JobSet read after the
TrainJob that agrees with it was carried. Until Trainer reconciles the change the condition
still tells the state before it (every opening follows a suspension Trainer reconciled: start
creates the job suspended, a hold drains before the release; a hold follows an opening), and
the outcome is not known yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from dispatch_k8s.core.rules import shapes, trainjob, wire

WAITING: Final = "waiting"  # Trainer has not reconciled the opening or hold yet
NO_REASON: Final = (
    f"Trainer's reason was not found among the TrainJob's Events ({wire.TRAINER_FAILED_REASON}): "
    "expired, or not readable with these credentials"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Uncarried:
    """A TrainJob's opening or hold that Trainer could not carry into its JobSet."""

    held: bool  # a hold not carried (the JobSet still runs); else an opening (nothing runs)
    reason: str  # names the TrainJob, the JobSet's state and Trainer's reason
    told: bool  # Trainer's reason was found (its Event may follow the status by moments)

    def __str__(self) -> str:
        return self.reason


def decide_carried(
    job: Mapping[str, Any],
    jobset: Mapping[str, Any] | None,
    failures: Iterable[Mapping[str, Any]] = (),
) -> Uncarried | Literal["waiting"] | None:
    """Uncarried when Trainer reconciled the job's spec.suspend and its JobSet does not follow.

    WAITING before Trainer reconciled it; None when nothing is amiss: the job finished, or its
    JobSet as the job asks (a held job's JobSet suspended or missing, an open job's open).
    `failures`: Trainer's `TrainJobResourcesCreationFailed` Events on the job (core/v1 as
    listed), the newest of which gives the reason; `jobset` read after `job`.
    """
    if trainjob.finished_reason(job) is not None:
        return None
    held = shapes.at(job, "spec").get("suspend") is True
    suspended = jobset is None or shapes.at(jobset, "spec").get("suspend") is True
    if suspended == held:
        return None
    if not _reconciled(job, held=held):
        return WAITING
    name = shapes.at(job, "metadata").get("name")
    if held:
        what = f"is not held: Trainer reconciled the hold but its JobSet {name} is not suspended"
        outcome = "what it runs goes on"
    else:
        state = "is missing" if jobset is None else "is still suspended"
        what = f"is not opened: Trainer reconciled it open but its JobSet {name} {state}"
        outcome = "nothing runs"
    why = trainer_reason(job, failures)
    return Uncarried(
        held=held,
        reason=f"TrainJob {name} {what}, so {outcome}: {why or NO_REASON}",
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


def _reconciled(job: Mapping[str, Any], *, held: bool) -> bool:
    """Trainer's `Suspended` condition tells `held`: it reconciled the job's spec.suspend."""
    for condition in shapes.mappings(shapes.at(job, "status").get("conditions")):
        if condition.get("type") == wire.TRAINER_SUSPENDED_CONDITION:
            return condition.get("status") == ("True" if held else "False")
    return False
