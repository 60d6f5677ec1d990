"""One replica acts: leader election on a Lease (core/rules/lease.py has the rules)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from loguru import logger

from dispatch_k8s.core.rules import lease, shapes
from dispatch_k8s.core.rules.errors import DispatchError, Fenced, PreconditionFailed
from dispatch_k8s.core.shell import clock
from dispatch_k8s.core.shell.gateway import Gateway


class Elector:
    """Takes, renews and frees one Lease for one identity, and fences this replica's writes.

    Expiry is judged by this replica's monotonic clock from when it last saw the Lease's
    record change, as client-go does: clocks of two machines are never compared. This
    replica leads until its renew deadline after the start of its last successful renewal:
    another candidate waits a whole lease duration from when it saw that renewal, which
    began no earlier, so the difference (a third of the lease) covers a write in flight and
    clocks that run at slightly different rates.
    """

    def __init__(
        self,
        gateway: Gateway,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._gateway = gateway
        self._namespace, self._name, self.identity = namespace, name, identity
        self._lease_seconds = lease_seconds
        self.retry_seconds = float(lease_seconds * lease.RETRY_SHARE)
        self.renew_deadline = float(lease_seconds * lease.RENEW_DEADLINE_SHARE)
        self._clock = clock
        self._observed: tuple[tuple[str, str], float] | None = None
        self._held: dict[str, Any] | None = None
        self._leads_until = -math.inf  # by self._clock

    def leads(self) -> bool:
        """Whether this replica may still act as the leader."""
        return self._clock() < self._leads_until

    def fence(self) -> None:
        """Raise Fenced unless this replica still leads: called before each write it sends."""
        if not self.leads():
            raise Fenced(f"not the leader: Lease {self._name} not renewed within its deadline")

    def try_once(self) -> bool:
        """Read the Lease, take or renew it if this replica may: whether it leads now.

        Both requests share one budget, so an attempt ends by the renew deadline even
        against a server that accepts the connection and never answers.
        """
        began = self._clock()
        if self._leads_until != -math.inf and began >= self._leads_until:
            return False  # a term that lapsed ends: it is never renewed after the fact
        budget = self.renew_deadline
        if self._leads_until > began:
            budget = min(budget, self._leads_until - began)
        try:
            current = self._gateway.read_lease(self._namespace, self._name, timeout=budget)
        except DispatchError as e:
            logger.bind(error=str(e)).warning("cannot read the leader Lease")
            return False
        now = self._clock()
        seen = lease.record(current)
        if self._observed is None or self._observed[0] != seen:
            self._observed = (seen, now)
        holder = lease.holder(current)
        duration = shapes.at(current, "spec").get("leaseDurationSeconds")
        duration = duration if isinstance(duration, int) else self._lease_seconds
        if holder not in ("", self.identity) and now - self._observed[1] < duration:
            return False
        body = lease.claim(
            current,
            namespace=self._namespace,
            name=self._name,
            identity=self.identity,
            duration_seconds=self._lease_seconds,
            now=clock.micro_now(),
        )
        left = budget - (now - began)
        if left <= 0:
            return False
        try:
            written = self._gateway.write_lease(body, timeout=left)
        except PreconditionFailed:
            return False  # another replica wrote it first
        except DispatchError as e:
            logger.bind(error=str(e)).warning("cannot write the leader Lease")
            return False
        if holder != self.identity:
            logger.bind(lease=self._name, previous=holder or None).info("took the leader Lease")
        self._held = written
        self._observed = (lease.record(written), self._clock())
        self._leads_until = began + self.renew_deadline
        return True

    def acquire(self, stop: threading.Event) -> bool:
        """Wait until this replica leads (True) or `stop` is set (False)."""
        while not stop.is_set():
            if self.try_once():
                return True
            stop.wait(self.retry_seconds)
        return False

    def keep(self, stop: threading.Event, lost: threading.Event) -> None:
        """Renew every retry period until `stop`; set `lost` once this replica no longer leads.

        It no longer leads once no renewal succeeded by its deadline.
        """
        while not stop.wait(self.retry_seconds):
            if not self.try_once() and not self.leads():
                logger.bind(lease=self._name).error("lost the leader Lease")
                lost.set()
                return

    def release(self) -> None:
        """Free the Lease if this replica still holds it (a graceful stop), best effort."""
        if self._held is None or lease.holder(self._held) != self.identity or not self.leads():
            return
        try:
            self._gateway.write_lease(
                lease.released(self._held, now=clock.micro_now()), timeout=self.retry_seconds
            )
            logger.bind(lease=self._name).info("released the leader Lease")
        except DispatchError as e:
            logger.bind(error=str(e)).warning("cannot release the leader Lease")
