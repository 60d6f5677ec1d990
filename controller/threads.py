"""The threads of the leader's term, supervised: one that dies ends the process.

A watch thread that dies of an unexpected exception (or returns before its term ends) would
leave the leader holding the Lease and doing nothing, with /healthz at 200. Each thread is
started through a Supervisor instead: on such an end it logs the traceback and sets `died`,
and the controller then fails /healthz, releases the Lease and exits 1 (a bug), so that its
Deployment starts it again and a standby takes over meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from loguru import logger


class Supervisor:
    """Starts the term's threads; `died` is set once one of them ends before `ended`."""

    def __init__(self, ended: threading.Event) -> None:
        self.ended = ended
        self.died = threading.Event()

    def spawn(self, name: str, target: Callable[..., None], *args: Any) -> threading.Thread:
        """Start `target(*args)` as daemon thread `name`, supervised."""

        def supervised() -> None:
            try:
                target(*args)
            except BaseException:
                logger.exception(f"thread {name} died")
                self.died.set()
                return
            if not self.ended.is_set():
                logger.error(f"thread {name} ended while its term runs")
                self.died.set()

        thread = threading.Thread(target=supervised, name=name, daemon=True)
        thread.start()
        return thread
