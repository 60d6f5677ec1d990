"""Kubernetes Events on a TrainJob: what a raise or a finding tells `kubectl describe`.

Building only; the gateway posts them, best effort: an Event is never a step's one update
and never fails it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from dispatch_k8s.core.rules import wire

COMPONENT: Final = "dispatch-k8s"
RAISED: Final = "AdmissionRaised"
FLAGGED: Final = "FlaggedForeign"
MAX_MESSAGE_CHARS: Final = 1024  # the API server refuses longer Event messages
EventType = Literal["Normal", "Warning"]


def build_event(
    trainjob: Mapping[str, Any],
    *,
    event_type: EventType,
    reason: str,
    message: str,
    step: str,
    now: str,
) -> dict[str, Any]:
    """A core/v1 Event about `trainjob` (as read or as written), from step `step`."""
    meta = trainjob["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": f"{wire.TRAINER_GROUP}/{wire.TRAINER_VERSION}",
            "kind": "TrainJob",
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


def raise_message(*, admission: int, restart: int, workload: str | None = None) -> str:
    """What a raise tells: the new A and the R the next execution starts with."""
    where = f" for the reservation of Workload {workload}" if workload else ""
    return (
        f"A raised to {admission}{where}: the next execution starts with "
        f"R = A + J = {admission} + {restart} = {admission + restart}"
    )
