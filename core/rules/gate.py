"""The admission-check controller's decision for one Workload: raise, approve, or neither.

The same rules as `dispatch-admit` and `dispatch-approve` (`pending_reservation`,
`decide_raise`, `decide_approval`), plus what a long-running controller needs that a
one-shot step does not: a reservation A was already raised for is approved without a
second raise (the controller may have been stopped between the two writes), and a Workload
that is not a dispatch-managed TrainJob is approved at once, nothing raised.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from dispatch_k8s.core.rules import shapes, trainjob, wire, workload
from dispatch_k8s.core.rules.decisions import NeedsPerson, Refusal
from dispatch_k8s.core.rules.workload import Finished, Reservation, Skip


@dataclass(frozen=True, slots=True)
class RaiseFor:
    """A must be raised for this reservation first (trainjob.decide_raise says to what)."""

    reservation: Reservation


@dataclass(frozen=True, slots=True)
class Approve:
    """Mark the check Ready for this reservation, with a message saying why."""

    reservation: Reservation
    admission: int | None  # None: nothing was raised (not a dispatch-managed TrainJob)
    message: str


Gate = RaiseFor | Approve | Skip | Finished | Refusal


def our_checks(workload_obj: Mapping[str, Any], checks: Collection[str]) -> list[str]:
    """The checks of `checks` (ours, by controllerName) that the Workload lists."""
    listed = shapes.mappings(shapes.at(workload_obj, "status").get("admissionChecks"))
    return [str(state["name"]) for state in listed if state.get("name") in checks]


def is_dispatch_managed(job: Mapping[str, Any]) -> bool:
    """A TrainJob `dispatch-start` made, by any of the marks it leaves.

    The marks are the label, the A floor and this project's runtime patch. Any one suffices,
    so a job that lost one of them (its label removed, say) is still raised for, never
    approved with its A unchanged.
    """
    if shapes.labels_of(job).get(wire.MANAGED_BY_LABEL) == wire.MANAGED_BY:
        return True
    if wire.ADMISSION_FLOOR_ANNOTATION in shapes.annotations_of(job):
        return True
    patches = shapes.mappings(shapes.at(job, "spec").get("runtimePatches"))
    return any(patch.get("manager") == wire.PATCH_MANAGER for patch in patches)


def not_dispatch_message(workload_obj: Mapping[str, Any], owner: str | None) -> str:
    """Why a Workload was approved with nothing raised."""
    what = f"TrainJob {owner}" if owner else "its job"
    return (
        f"dispatch: approved without raising an admission count: {what} is not a "
        f"dispatch-managed TrainJob (no {wire.MANAGED_BY_LABEL}={wire.MANAGED_BY} label, "
        "admission floor or dispatch runtime patch)"
    )


def decide_gate(
    workload_obj: Mapping[str, Any], job: Mapping[str, Any] | None, *, check: str
) -> Gate:
    """What to do for the Workload's current reservation on `check`.

    `job` is the TrainJob read by the name of the one that controls the Workload, after the
    Workload (None when no TrainJob controls it, or it is gone). A TrainJob of that name with
    another UID is a replacement: the Workload is skipped, neither raised for nor approved.
    """
    reservation = workload.pending_reservation(workload_obj, check=check)
    if not isinstance(reservation, Reservation):
        return reservation
    replaced = None if job is None else workload.owner_replaced(reservation, job)
    if replaced is not None:
        return replaced
    owner = workload.owner_trainjob(workload_obj)
    if job is None or not is_dispatch_managed(job):
        return Approve(reservation, None, not_dispatch_message(workload_obj, owner))
    for refusal in (trainjob.foreign_flag(job), trainjob.multikueue_refusal(job)):
        if refusal is not None:
            return refusal
    finished = trainjob.finished_reason(job)
    if finished is not None:
        return Finished(finished)
    recorded = shapes.annotations_of(job).get(wire.RAISED_FOR_ANNOTATION)
    if not workload.raised_for_reservation(recorded, workload_obj):
        return RaiseFor(reservation)
    # What dispatch-approve checks (workload.decide_approval) is already known here: the check
    # is Pending, no flag, A raised for this reservation, and the floor read once, canonical.
    floor = trainjob.admission_floor(job)
    if isinstance(floor, Refusal):
        return NeedsPerson(f"TrainJob {owner}: {floor.reason}")
    return Approve(reservation, floor, workload.approval_message(floor))


OnRefusal = Literal["reject", "retry", "wait"]
_REFUSED_STATE: Final[dict[OnRefusal, str]] = {
    "reject": workload.REJECTED,
    "retry": workload.RETRY,
    "wait": workload.PENDING,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """How `retry` retries, as Kueue's ProvisioningRequest check (its RetryStrategy's defaults)."""

    base_seconds: int = 60  # the first retry's delay, doubled at each retry after it
    max_seconds: int = 1800  # no delay longer
    limit_count: int = 3  # retries; the refusal after the last is Rejected


@dataclass(frozen=True, slots=True)
class CheckUpdate:
    """The state, message and (for Retry) delay a refusal gives our check."""

    state: str
    message: str
    requeue_after_seconds: int | None = None


def retry_delay(retry_count: int, backoff: Backoff) -> int | None:
    """Seconds before Kueue queues the Workload again after one more retry; None past the limit.

    Kueue's own (UpdateAdmissionCheckRequeueState over its ProvisioningRequest check): retry
    n = retry_count + 1 waits base·2^(n-1), at most max, and the refusal after limit_count
    retries is Rejected.
    """
    if retry_count >= backoff.limit_count:
        return None
    # base ≥ 1, so from 2^bit_length(max) on the doubling is past max: no huge power computed.
    if retry_count >= backoff.max_seconds.bit_length():
        return backoff.max_seconds
    doubled: int = backoff.base_seconds << retry_count
    return min(doubled, backoff.max_seconds)


KUEUE_BACKOFF: Final = Backoff()


def refused_check(
    refusal: Refusal,
    *,
    on_refusal: OnRefusal,
    retry_count: int = 0,
    backoff: Backoff = KUEUE_BACKOFF,
) -> CheckUpdate:
    """What our check is given for a refusal, `retry_count` being the check state's.

    One a person must resolve gets the configured state (Rejected by default, so its quota is
    not held; Retry until `backoff`'s limit, then Rejected); any other (a drain, a race) stays
    Pending. The reason is the message.
    """
    message = f"dispatch: {refusal.reason}"
    if not isinstance(refusal, NeedsPerson):
        return CheckUpdate(workload.PENDING, message)
    state = _REFUSED_STATE[on_refusal]
    if state != workload.RETRY:
        return CheckUpdate(state, message)
    delay = retry_delay(retry_count, backoff)
    if delay is None:
        limit = f"retried {retry_count} times, the limit being {backoff.limit_count}"
        return CheckUpdate(workload.REJECTED, f"{message} ({limit})")
    return CheckUpdate(workload.RETRY, message, delay)


def active_status(check_obj: Mapping[str, Any], *, now: str) -> dict[str, Any]:
    """The AdmissionCheck's status with its Active condition, to server-side apply.

    True while the controller runs; False when the check asks for what it cannot do (this
    project's check takes no parameters).
    """
    meta = check_obj["metadata"]
    parameters = shapes.at(check_obj, "spec").get("parameters")
    if parameters:
        status, reason = "False", "ParametersNotSupported"
        message = (
            f"dispatch-admission-controller takes no parameters; remove spec.parameters "
            f"({parameters}) from AdmissionCheck {meta['name']}"
        )
    else:
        status, reason = "True", "Active"
        message = "dispatch-admission-controller gates the Workloads of this check"
    condition = {
        "type": "Active",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
        "observedGeneration": meta.get("generation"),
    }
    for current in shapes.mappings(shapes.at(check_obj, "status").get("conditions")):
        if current.get("type") == "Active" and current.get("status") == status:
            condition["lastTransitionTime"] = current.get("lastTransitionTime", now)
    return {
        "apiVersion": f"{wire.KUEUE_GROUP}/{wire.KUEUE_VERSION}",
        "kind": "AdmissionCheck",
        "metadata": {"name": meta["name"]},
        "status": {"conditions": [condition]},
    }


def needs_active_write(check_obj: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the check's Active condition differs from `wanted`'s (else no write)."""
    (condition,) = wanted["status"]["conditions"]
    for current in shapes.mappings(shapes.at(check_obj, "status").get("conditions")):
        if current.get("type") == "Active":
            keys = ("status", "reason", "message", "observedGeneration")
            return any(current.get(key) != condition[key] for key in keys)
    return True


def is_ours(check_obj: Mapping[str, Any]) -> bool:
    """An AdmissionCheck this project's controller serves."""
    return shapes.at(check_obj, "spec").get("controllerName") == wire.ADMISSION_CHECK_CONTROLLER
