"""A bug played in a replica (tests/integration/test_supervised_threads.py): its Workloads watch
thread dies of an unexpected exception on the first Workload it is told once the file named by
DISPATCH_TEST_POISON exists.

Python imports `sitecustomize` as it starts, from the first directory of PYTHONPATH that has
one: a replica started with this directory there runs the real controller with this one
change, against the real API server.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from dispatch_k8s.controller.main import Leading

POISON = Path(os.environ["DISPATCH_TEST_POISON"])
observe = Leading._observe


def poisoned(self: Leading, obj: dict[str, Any]) -> None:
    """Leading._observe, but raising in the Workloads watch once the poison is there."""
    if POISON.exists() and threading.current_thread().name.startswith("workloads"):
        raise RuntimeError(f"played bug: the Workloads watch told {obj['metadata']['name']}")
    observe(self, obj)


Leading._observe = poisoned  # type: ignore[method-assign]
