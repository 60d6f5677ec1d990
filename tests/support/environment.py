"""The environment of every process a test starts as the product: the steps, the controller's
replicas, the docs' commands.

A step and the controller read their settings from `DISPATCH_*` variables when a flag is not
given (core/shell/settings/), and a trainer reads its identity from DISPATCH_EPOCH and
DISPATCH_ATTEMPT. A developer's shell, or CI's, may hold any of them: inherited, they would
change what the test runs (a namespace, a dry run) without the test saying so. So such a
process gets the test's own environment (PATH, PYTHONPATH: the code under test) without one
`DISPATCH_*` variable, and then exactly the ones the test names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

PREFIX: Final = "DISPATCH_"


def host_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without its `DISPATCH_*` variables, then `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    env.update(extra or {})
    return env
