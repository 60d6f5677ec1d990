"""Kubernetes Events on a TrainJob or its Workload, as `kubectl describe` shows them.

A raise, an approval, a refusal or a finding.

Building only; the gateway posts them, best effort: an Event is never a step's one update
and never fails it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final, Literal

from dispatch_k8s.core.rules import wire

COMPONENT: Final = "dispatch-k8s"
RAISED: Final = "AdmissionRaised"
FLAGGED: Final = "FlaggedForeign"
MAX_MESSAGE_CHARS: Final = 1024  # the API server refuses longer Event messages
APPROVED: Final = "AdmissionApproved"
REFUSED: Final = "AdmissionRefused"
NOT_OPENED: Final = "NotOpened"  # open, Trainer could not open the JobSet (core.rules.carried)
NOT_HELD: Final = "NotHeld"  # held, Trainer could not suspend the JobSet (core.rules.carried)
EventType = Literal["Normal", "Warning"]
Involved = tuple[str, str]  # the apiVersion and kind of the object an Event is about
TRAINJOB: Final[Involved] = (f"{wire.TRAINER_GROUP}/{wire.TRAINER_VERSION}", "TrainJob")
WORKLOAD: Final[Involved] = (f"{wire.KUEUE_GROUP}/{wire.KUEUE_VERSION}", "Workload")


def build_event(
    subject: Mapping[str, Any],
    *,
    event_type: EventType,
    reason: str,
    message: str,
    step: str,
    now: str,
    name: str | None = None,
    involved: Involved = TRAINJOB,
) -> dict[str, Any]:
    """A core/v1 Event about `subject` (as read or as written), from step `step`.

    `subject` is a TrainJob unless `involved` names its kind; the Event is named `name`, or by
    the API server when None.
    """
    meta = subject["metadata"]
    api_version, kind = involved
    naming = {"name": name} if name is not None else {"generateName": f"{meta['name']}."}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {**naming, "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": api_version,
            "kind": kind,
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": event_type,
        "reason": reason,
        "message": message[:MAX_MESSAGE_CHARS],
        "source": {"component": f"{COMPONENT}/{step}"},
        "reportingComponent": f"{wire.DOMAIN}/{step}",
        "reportingInstance": f"{COMPONENT}-{step}",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def raise_event_name(trainjob_name: str, record: str) -> str:
    """The one name of the Event that tells the raise made for reservation `record`.

    Whichever replica posts it first makes it; any other gets 409 AlreadyExists, so the raise
    is told once however often it is posted (again by the replica that approves it, in case
    the one that raised died before its Event). Hex of the record's SHA-256: a TrainJob name
    (a DNS label) plus 17 characters stays a valid Event name.
    """
    digest = hashlib.sha256(record.encode()).hexdigest()[:16]
    return f"{trainjob_name}.{digest}"


def uncarried_event_name(trainjob: Mapping[str, Any]) -> str:
    """The one name of the Event that tells an opening or hold of `trainjob` was not carried.

    One a generation (each opening and each hold is one), so each replica and resync posts it
    once: any later post gets 409 AlreadyExists.
    """
    meta = trainjob["metadata"]
    record = f"not-opened/{meta.get('uid')}/{meta.get('generation')}"
    return raise_event_name(str(meta["name"]), record)


def raise_message(*, admission: int, restart: int, workload: str | None = None) -> str:
    """What a raise tells: the new A and the R the next execution starts with."""
    where = f" for the reservation of Workload {workload}" if workload else ""
    return (
        f"A raised to {admission}{where}: the next execution starts with "
        f"R = A + J = {admission} + {restart} = {admission + restart}"
    )
