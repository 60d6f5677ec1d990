"""Events posted as client-go's recorder posts them: best effort, never failing the work.

An Event tells what a step or the controller did; whether it could be posted changes nothing
that was done, so every failure here is logged and passed over.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from dispatch_k8s.core.rules import events
from dispatch_k8s.core.rules.errors import Fenced, OutOfTime
from dispatch_k8s.core.shell import clock
from dispatch_k8s.core.shell.gateway import kinds
from dispatch_k8s.core.shell.gateway.api_errors import ApiError, why_unreachable
from dispatch_k8s.core.shell.gateway.transport import Transport

EVENT_TIMEOUT: Final = 5  # seconds: an Event is best effort and must not hold a step up


def post_event(
    transport: Transport,
    subject: Mapping[str, Any],
    *,
    event_type: events.EventType,
    reason: str,
    message: str,
    step: str,
    name: str | None,
    involved: events.Involved,
) -> bool:
    """POST one Event, best effort: a failure is logged, never raised.

    About a TrainJob, or the kind `involved` names. An Event given a `name` that exists
    already was posted before: told, so True. Under a dry run none is posted.
    """
    import urllib3
    from loguru import logger

    if transport.dry_run != "none":  # nothing was done: there is nothing to tell
        return False
    event = events.build_event(
        subject,
        event_type=event_type,
        reason=reason,
        message=message,
        step=step,
        now=clock.now(),
        name=name,
        involved=involved,
    )
    path = kinds.EVENT.path(event["metadata"]["namespace"])
    try:
        transport.json("POST", path, body=event, timeout=EVENT_TIMEOUT)
    except ApiError as e:
        if name is not None and e.status == 409:
            return True
        logger.bind(status=e.status).warning(
            f"cannot record Event {event['reason']}: {e.status} {e.message}"
        )
        return False
    except urllib3.exceptions.HTTPError as e:
        logger.warning(f"cannot record Event {event['reason']}: {why_unreachable(e)}")
        return False
    except Fenced:
        return False  # this replica no longer leads: the next leader records it
    except OutOfTime as e:  # the step's work is done: the Event is not worth failing it
        logger.warning(f"cannot record Event {event['reason']}: {e}")
        return False
    return True
