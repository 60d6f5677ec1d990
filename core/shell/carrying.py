"""Whether Trainer carried a TrainJob's opening into its JobSet: what `core.rules.carried` reads.

Shared by `unsuspend`, `status` and the auditor. Trainer's Events are read only where the JobSet
and the TrainJob already tell that the opening was not carried: they give the reason, never the
decision.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Final, Literal

from dispatch_k8s.core.rules import carried
from dispatch_k8s.core.rules.carried import Unopened
from dispatch_k8s.core.rules.errors import Transient
from dispatch_k8s.core.shell.gateway import Gateway, watching

# How long unsuspend waits for Trainer to reconcile the opening it wrote: Trainer reconciles a
# TrainJob within moments of its update; longer, and Trainer is down or far behind.
OPEN_WAIT: Final = 30.0
# How long an Unopened decision waits for Trainer's Event, posted just after its status write.
REASON_WAIT: Final = 5.0
INTERVAL: Final = 0.2  # seconds between reads: an opening is usually reconciled within one


def read_carried(
    gateway: Gateway, job: Mapping[str, Any], jobset: Mapping[str, Any] | None
) -> Unopened | Literal["waiting"] | None:
    """`carried.decide_carried` on `job` and `jobset` (read after it).

    Trainer's Events are read only where the opening was not carried.
    """
    decided = carried.decide_carried(job, jobset)
    if not isinstance(decided, Unopened):
        return decided
    meta = job["metadata"]
    failures = gateway.list_trainer_failures(str(meta["namespace"]), str(meta.get("uid")))
    return carried.decide_carried(job, jobset, failures)


def wait_carried(gateway: Gateway, namespace: str, name: str) -> Unopened | None:
    """After an opening: Unopened once Trainer reconciled it and could not open the JobSet.

    None once the JobSet is open (or the job suspended or finished again); Transient when
    Trainer has not reconciled it within OPEN_WAIT.
    """

    def read() -> Unopened | Literal["waiting"] | None:
        job = gateway.read_trainjob(namespace, name)
        return read_carried(gateway, job, gateway.read_jobset(namespace, name))

    found = watching.poll(
        read,
        lambda decided: decided != carried.WAITING,
        timeout=OPEN_WAIT,
        what=f"Trainer to carry the opening of TrainJob {name} into its JobSet (is it running?)",
        interval=INTERVAL,
    )
    if isinstance(found, Unopened) and not found.told:
        # Not opened all the same where the Event does not come: told without Trainer's reason.
        with contextlib.suppress(Transient):
            found = watching.poll(
                read,
                lambda decided: not isinstance(decided, Unopened) or decided.told,
                timeout=REASON_WAIT,
                what=f"Trainer's Event on TrainJob {name}",
                interval=INTERVAL,
            )
    return found if isinstance(found, Unopened) else None
