"""Kueue gates: which Workload reservation to raise A for, and the approval tied to it.

An admission-check controller acts only on a Workload with quota reserved, not evicted,
not finished, and its check Pending (Kueue's source): an evicted Workload
still shows QuotaReserved=True with checks reset to Pending until its pods are gone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from dispatch_k8s.core.rules import shapes, wire
from dispatch_k8s.core.rules.decisions import NeedsPerson, Refusal, ResourceVersion
from dispatch_k8s.core.rules.trainjob import foreign_flag

TRAINJOB_KIND: Final = "TrainJob"
READY: Final = "Ready"
PENDING: Final = "Pending"
REJECTED: Final = "Rejected"  # Kueue deactivates the Workload: its quota is released
RETRY: Final = "Retry"  # Kueue evicts the Workload and queues it again, with backoff
MAX_CHECK_MESSAGE: Final = 1024  # characters of a refusal told on the check state
CHECK_MANAGER: Final = wire.ADMISSION_CHECK_CONTROLLER  # field manager of our status writes


@dataclass(frozen=True, slots=True, kw_only=True)
class Reservation:
    """One quota reservation of a Workload, as read before A is raised for it.

    Its record `<Workload UID> <evictions> <QuotaReserved time>` is what a raise for it leaves
    on the TrainJob. The time alone has one-second resolution; the count of Kueue's evictions
    tells apart two reservations of one second (docs/kueue.md: The reservation record).
    """

    workload: str
    uid: str  # a Workload Kueue replaces is another reservation, whatever its times
    owner_uid: str | None  # the TrainJob it belongs to: a same-name replacement is another
    resource_version: ResourceVersion  # the approval is preconditioned on it
    evictions: int  # every eviction Kueue has made of this Workload, whatever its reason
    reserved_at: str  # lastTransitionTime of QuotaReserved

    @property
    def record(self) -> str:
        """What the raise for this reservation records in the TrainJob, for approve."""
        return f"{self.uid} {self.evictions} {self.reserved_at}"


@dataclass(frozen=True, slots=True)
class Skip:
    """Nothing to act on now (not a refusal: a later admission may be)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Replaced(Skip):
    """The TrainJob read by the owner's name is another job of that name: nothing to act on."""


@dataclass(frozen=True, slots=True)
class Finished:
    """The job has finished: no admission of it will ever come to gate."""

    reason: str


def _condition(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in shapes.mappings(shapes.at(workload, "status").get("conditions")):
        if condition.get("type") == kind:
            return condition
    return None


def _is_true(workload: Mapping[str, Any], kind: str) -> bool:
    condition = _condition(workload, kind)
    return condition is not None and condition.get("status") == "True"


def cluster_queue(workload: Mapping[str, Any]) -> str:
    """The ClusterQueue that reserved the Workload's quota; "" before any reservation."""
    name = shapes.at(workload, "status", "admission").get("clusterQueue")
    return name if isinstance(name, str) else ""


def is_finished(workload: Mapping[str, Any]) -> bool:
    """Kueue marked the Workload Finished: its job ended, and no reservation of it is to come."""
    return _is_true(workload, "Finished")


def _check_states(workload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return shapes.mappings(shapes.at(workload, "status").get("admissionChecks"))


def check_entry(workload: Mapping[str, Any], check: str) -> Mapping[str, Any] | None:
    """The Workload's entry for admission check `check`, None if it does not list it."""
    for state in _check_states(workload):
        if state.get("name") == check:
            return state
    return None


def retry_count(entry: Mapping[str, Any]) -> int:
    """How often the check was retried: Kueue adds one each time it resets a Retry to Pending."""
    count = entry.get("retryCount")
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def state_message(message: str, *, previous: str | None) -> str:
    """The message a check state is written with: the state it replaces told last, bounded.

    As Kueue's MultiKueue check tells every transition (`<message>, Previously: "<state>"`,
    the state quoted as Go's %q quotes a plain word), so the message says where it came from
    once Kueue has reset the check (its own "Reset to Pending after eviction. Previously: …").
    """
    if previous is not None:
        message = f"{message}, Previously: {json.dumps(previous, ensure_ascii=False)}"
    if len(message) > MAX_CHECK_MESSAGE:
        message = message[: MAX_CHECK_MESSAGE - 1] + "…"
    return message


def check_state(workload: Mapping[str, Any], check: str) -> str | None:
    """The state of admission check `check` on the Workload, None if it does not list it."""
    entry = check_entry(workload, check)
    return None if entry is None else str(entry.get("state"))


def _owner(workload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for owner in shapes.mappings(shapes.at(workload, "metadata").get("ownerReferences")):
        if (
            owner.get("controller")
            and owner.get("kind") == TRAINJOB_KIND
            and str(owner.get("apiVersion", "")).startswith(f"{wire.TRAINER_GROUP}/")
        ):
            return owner
    return None


def owner_trainjob(workload: Mapping[str, Any]) -> str | None:
    """The name of the TrainJob that controls this Workload, if a TrainJob does."""
    owner = _owner(workload)
    return None if owner is None else str(owner.get("name"))


def owner_replaced(reservation: Reservation, trainjob: Mapping[str, Any]) -> Replaced | None:
    """Why `trainjob`, read by the owner's name, is not the TrainJob the Workload belongs to.

    A TrainJob deleted and made again under the same name is another job with another UID;
    Kueue finishes its predecessor's Workload (OwnerNotFound) or the garbage collector deletes
    it, and a raise of the new job for it would be for a reservation the new job never has.
    """
    uid = trainjob["metadata"].get("uid")
    if uid == reservation.owner_uid:
        return None
    name = trainjob["metadata"]["name"]
    return Replaced(
        f"TrainJob {name} (UID {uid}) is not the one Workload {reservation.workload} belongs "
        f"to (UID {reservation.owner_uid}): it was deleted and made again under the same "
        "name; the old Workload goes with the old job, and the new job gets its own"
    )


def assigned_flavors(workload: Mapping[str, Any]) -> list[str]:
    """The flavors Kueue assigned to the Workload's pod sets, sorted, each once."""
    assignments = shapes.at(workload, "status", "admission").get("podSetAssignments")
    return sorted(
        {
            str(flavor)
            for pod_set in shapes.mappings(assignments)
            for flavor in shapes.mapping(pod_set.get("flavors")).values()
        }
    )


def _admitted_without(workload: Mapping[str, Any], check: str) -> str:
    """Why Kueue admitted a Workload without our check, and what to change.

    Kueue v0.19 applies to an admission the checks whose flavors meet the flavors assigned.
    """
    name = workload["metadata"]["name"]
    queue = shapes.at(workload, "status", "admission").get("clusterQueue") or "its queue"
    flavors = assigned_flavors(workload)
    if not flavors:
        return (
            f"Workload {name} was admitted by ClusterQueue {queue} without admission check "
            f"{check} because its pods request no resource: Kueue assigned it no flavor, and no "
            "check applies to no flavor. Give the job resource requests (resources_per_node, "
            "or requests in the runtime's trainer container) and start it again"
        )
    listed = ", ".join(flavors)
    return (
        f"Workload {name} was admitted by ClusterQueue {queue} without admission check {check} "
        f"for the flavors it was assigned ({listed}): list {check} in the ClusterQueue's "
        f"admissionChecksStrategy, and where that entry has onFlavors, include {listed}"
    )


def decide_reservation(
    workload: Mapping[str, Any], trainjob: Mapping[str, Any], *, check: str
) -> Reservation | Skip | Finished | Refusal:
    """Whether A should be raised for this Workload's current reservation, for `trainjob`."""
    name = workload["metadata"]["name"]
    job = trainjob["metadata"]["name"]
    owner = _owner(workload) or {}
    if owner.get("name") != job:
        return Refusal(
            f"Workload {name} is controlled by {owner.get('name') or 'no TrainJob'}, not "
            f"TrainJob {job}"
        )
    if owner.get("uid") != trainjob["metadata"].get("uid"):
        # Found by the TrainJob's UID label, yet owned by another UID: nothing to trust.
        return Refusal(
            f"Workload {name} is controlled by TrainJob {job} with UID {owner.get('uid')}, "
            f"not UID {trainjob['metadata'].get('uid')}, the one it is labelled for"
        )
    return pending_reservation(workload, check=check)


def pending_reservation(
    workload: Mapping[str, Any], *, check: str
) -> Reservation | Skip | Finished | Refusal:
    """The Workload's current reservation, if it waits on check `check`, whoever owns it."""
    name = workload["metadata"]["name"]
    if workload["metadata"].get("deletionTimestamp"):
        return Skip(f"Workload {name} is being deleted: wait for the one Kueue makes next")
    if is_finished(workload):
        return Finished(f"Workload {name} is finished")
    if _is_true(workload, "Evicted"):
        return Skip(f"Workload {name} is evicted: wait for its next reservation")
    reserved = _condition(workload, "QuotaReserved")
    if reserved is None or reserved.get("status") != "True":
        return Skip(f"Workload {name} has no quota reserved yet")
    state = check_state(workload, check)
    if state is None and _is_true(workload, "Admitted"):
        return Refusal(_admitted_without(workload, check))
    if state is None:
        # A Workload Kueue has only just written may not list its ClusterQueue's checks yet.
        return Skip(f"Workload {name} does not list admission check {check} yet")
    if state != PENDING:
        return Skip(f"Workload {name}: admission check {check} is {state}, not {PENDING}")
    if _is_true(workload, "Admitted"):
        # The check was added to the ClusterQueue after this admission: the execution runs
        # already, and Kueue gates the job's next admission with the check.
        return Skip(
            f"Workload {name} was admitted before admission check {check} applied to it: "
            "nothing to gate until its next admission"
        )
    overriding = _checks_setting_admission(workload, check)
    if overriding:
        return NeedsPerson(
            f"Workload {name}: admission check(s) {', '.join(overriding)} set "
            f"{wire.ADMISSION_ANNOTATION} through podSetUpdates, which Kueue applies after this "
            "project's patch and so would override A: remove it from their podSetUpdates"
        )
    owner = _owner(workload)
    return Reservation(
        workload=name,
        uid=str(workload["metadata"].get("uid")),
        owner_uid=None if owner is None else str(owner.get("uid")),
        resource_version=ResourceVersion(workload["metadata"]["resourceVersion"]),
        evictions=evictions(workload),
        reserved_at=str(reserved.get("lastTransitionTime")),
    )


def evictions(workload: Mapping[str, Any]) -> int:
    """How many times Kueue has evicted the Workload: the sum of its per-reason counts.

    Kueue v0.19 counts each eviction in `status.schedulingStats.evictions` (pkg/workload/evict,
    in the same status patch that sets Evicted) and never lowers or drops a count, so the sum
    rises with every eviction. A garbled count counts as -1: a record that matches nothing.
    """
    stats = shapes.mapping(shapes.at(workload, "status").get("schedulingStats"))
    counts: list[Any] = [entry.get("count") for entry in shapes.mappings(stats.get("evictions"))]
    if not all(type(count) is int and count >= 0 for count in counts):
        return -1
    return sum(counts)


def reservation_record(workload: Mapping[str, Any]) -> str:
    """The record a raise for this Workload's current reservation leaves, as approve sees it."""
    reserved = _condition(workload, "QuotaReserved") or {}
    at = reserved.get("lastTransitionTime")
    return f"{workload['metadata'].get('uid')} {evictions(workload)} {at}"


def _time(value: object) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None  # the API server's times are UTC


def raised_for_reservation(recorded: object, workload: Mapping[str, Any]) -> bool:
    """Whether the TrainJob's raised-for record names the Workload's current reservation.

    A record of the format before the evictions count (`<UID> <QuotaReserved time>`, written
    before an upgrade) still names the reservation when the time matches, unless the Workload
    was re-reserved after an eviction within a second of that time: then the record may be
    the evicted reservation's, and a second raise is the safe side (docs/kueue.md: The
    reservation record).
    """
    if not isinstance(recorded, str):
        return False
    if recorded == reservation_record(workload):
        return True
    uid, _, at = recorded.partition(" ")
    reserved = _condition(workload, "QuotaReserved") or {}
    if " " in at or uid != workload["metadata"].get("uid"):
        return False
    if at != reserved.get("lastTransitionTime"):
        return False
    # Kueue resets Evicted to False in the update that reserves quota again (SetQuotaReservation).
    evicted = _condition(workload, "Evicted")
    if evicted is None:
        return True
    reserved_at, reset_at = _time(at), _time(evicted.get("lastTransitionTime"))
    if reserved_at is None or reset_at is None:
        return False
    return not reserved_at <= reset_at <= reserved_at + timedelta(seconds=1)


def _checks_setting_admission(workload: Mapping[str, Any], check: str) -> list[str]:
    """Other admission checks whose podSetUpdates would set A on the pods."""
    found = []
    for state in _check_states(workload):
        if state.get("name") == check:
            continue
        for update in shapes.mappings(state.get("podSetUpdates")):
            if wire.ADMISSION_ANNOTATION in shapes.mapping(update.get("annotations")):
                found.append(str(state.get("name")))
                break
    return found


def decide_approval(
    workload: Mapping[str, Any], trainjob: Mapping[str, Any], *, check: str, admission: int
) -> Refusal | None:
    """Whether this reservation may be approved: only if A was raised for it, to `admission`."""
    name = workload["metadata"]["name"]
    state = check_state(workload, check)
    if state != PENDING:
        return Refusal(f"Workload {name}: check {check} is {state}, not {PENDING}")
    job = trainjob["metadata"]["name"]
    flag = foreign_flag(trainjob)
    if flag is not None:
        return flag
    annotations = shapes.annotations_of(trainjob)
    recorded = annotations.get(wire.RAISED_FOR_ANNOTATION)
    wanted = reservation_record(workload)
    if not raised_for_reservation(recorded, workload):
        return Refusal(
            f"Workload {name}: A was not raised for this reservation ({wanted}); TrainJob {job} "
            f"records a raise for {recorded or 'none'}: run dispatch-admit for it, then approve "
            "with its outputs"
        )
    floor = annotations.get(wire.ADMISSION_FLOOR_ANNOTATION)
    if floor != str(admission):
        return Refusal(
            f"Workload {name}: --admission {admission} is not the A raised for it "
            f"(TrainJob {job} has {wire.ADMISSION_FLOOR_ANNOTATION} {floor}): approve with the "
            "admission that admit printed"
        )
    return None


def approval_message(admission: int) -> str:
    """What an approval after a raise tells, on the Workload's check state."""
    return f"dispatch: admission count raised to {admission}"


def build_approval(
    workload: Mapping[str, Any],
    *,
    check: str,
    resource_version: ResourceVersion,
    message: str,
    now: str,
) -> dict[str, Any]:
    """A server-side-apply body setting only our check Ready, preconditioned on the read."""
    return build_check_state(
        workload,
        check=check,
        state=READY,
        resource_version=resource_version,
        message=message,
        now=now,
    )


def build_check_state(
    workload: Mapping[str, Any],
    *,
    check: str,
    state: str,
    resource_version: ResourceVersion,
    message: str,
    now: str,
    requeue_after_seconds: int | None = None,
) -> dict[str, Any]:
    """A server-side-apply body setting only our check's state and message, on the read.

    The message tells the state it replaces (`state_message`). `requeue_after_seconds` (with
    Retry): how long Kueue waits before it queues the Workload again; without it Kueue queues
    it again at once.

    `admissionChecks` is a map list keyed by name, so sending our entry alone leaves the
    other checks' entries to their owners (Kueue's source), `retryCount` among them.
    """
    listed = check_entry(workload, check)
    previous = None if listed is None or listed.get("state") is None else str(listed["state"])
    message = state_message(message, previous=previous)
    entry: dict[str, Any] = {
        "name": check,
        "state": state,
        "message": message,
        "lastTransitionTime": now,
    }
    if requeue_after_seconds is not None:
        entry["requeueAfterSeconds"] = requeue_after_seconds
    meta = workload["metadata"]
    return {
        "apiVersion": f"{wire.KUEUE_GROUP}/{wire.KUEUE_VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "resourceVersion": resource_version,
        },
        "status": {"admissionChecks": [entry]},
    }


def build_deactivation(workload: Mapping[str, Any], *, reason: str) -> dict[str, Any] | None:
    """The Workload with spec.active false and why in an annotation; None if already inactive.

    What Kueue does to a Workload whose check is Rejected, for policy mode, where there is no
    check: Kueue evicts it, releases its quota and reserves none again until it is active.
    """
    spec = shapes.at(workload, "spec")
    if spec.get("active", True) is False:
        return None
    meta = workload["metadata"]
    annotations = {
        **shapes.annotations_of(workload),
        wire.DEACTIVATED_ANNOTATION: reason[:MAX_CHECK_MESSAGE],
    }
    return {
        **workload,
        "metadata": {**meta, "annotations": annotations},
        "spec": {**spec, "active": False},
    }
