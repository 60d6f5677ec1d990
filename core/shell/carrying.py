"""Whether Trainer carried a TrainJob's opening or hold into its JobSet: the reads of it.

What `core.rules.carried` decides on, shared by `unsuspend`, `hold`, `status` and the auditor.
Trainer's Events are read only where the JobSet and the TrainJob already tell that the change
was not carried: they give the reason, never the decision.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Final, Literal

from dispatch_k8s.core.rules import carried
from dispatch_k8s.core.rules.carried import Uncarried
from dispatch_k8s.core.rules.errors import NotHeld, NotOpened, Transient
from dispatch_k8s.core.shell.gateway import Gateway, watching

# How long unsuspend and hold wait for Trainer to reconcile the opening or hold they wrote:
# Trainer reconciles a TrainJob within moments of its update; longer, and it is down or far
# behind.
OPEN_WAIT: Final = 30.0
# How long an Uncarried decision waits for Trainer's Event, posted just after its status write.
REASON_WAIT: Final = 5.0
INTERVAL: Final = 0.2  # seconds between reads: an opening is usually reconciled within one


def read_carried(
    gateway: Gateway, job: Mapping[str, Any], jobset: Mapping[str, Any] | None
) -> Uncarried | Literal["waiting"] | None:
    """`carried.decide_carried` on `job` and `jobset` (read after it).

    Trainer's Events are read only where the change was not carried.
    """
    decided = carried.decide_carried(job, jobset)
    if not isinstance(decided, Uncarried):
        return decided
    meta = job["metadata"]
    failures = gateway.list_trainer_failures(str(meta["namespace"]), str(meta.get("uid")))
    return carried.decide_carried(job, jobset, failures)


def wait_carried(gateway: Gateway, namespace: str, name: str) -> None:
    """After an opening or a hold: see that Trainer carried it into the JobSet.

    Returns once the JobSet follows the job (or the job finished); NotOpened (9) or NotHeld
    (10), with Trainer's reason, once Trainer reconciled it and could not write the JobSet;
    Transient when Trainer has not reconciled it within OPEN_WAIT.
    """

    def read() -> Uncarried | Literal["waiting"] | None:
        job = gateway.read_trainjob(namespace, name)
        return read_carried(gateway, job, gateway.read_jobset(namespace, name))

    found = watching.poll(
        read,
        lambda decided: decided != carried.WAITING,
        timeout=OPEN_WAIT,
        what=f"Trainer to carry TrainJob {name}'s spec.suspend into its JobSet (is it running?)",
        interval=INTERVAL,
    )
    if isinstance(found, Uncarried) and not found.told:
        # Not carried all the same where the Event does not come: told without Trainer's reason.
        with contextlib.suppress(Transient):
            found = watching.poll(
                read,
                lambda decided: not isinstance(decided, Uncarried) or decided.told,
                timeout=REASON_WAIT,
                what=f"Trainer's Event on TrainJob {name}",
                interval=INTERVAL,
            )
    if isinstance(found, Uncarried):
        raise NotHeld(found.reason) if found.held else NotOpened(found.reason)
