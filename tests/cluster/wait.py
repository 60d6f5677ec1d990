"""The one way tests wait: poll with a deadline, naming what is awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T | None], *, what: str, timeout: float = 60.0) -> T:
    """Call `check` until it returns something other than None; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while (value := check()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
    return value
