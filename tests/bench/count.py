"""`python -m tests.bench.count STEP ARGS…`: run one step in-process and count its API requests.

Used by the benchmark once per step, never for timing: every HTTP request the step sends goes
through `ApiClient.call_api`, so counting its calls counts requests (retries included). The
count is written to the file named by BENCH_COUNT_FILE when the step exits.
"""

from __future__ import annotations

import atexit
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from kubernetes.client.api_client import ApiClient


def main(argv: list[str]) -> None:
    """Run `dispatch-<argv[0]>` with the rest of argv, counting requests."""
    step, *args = argv
    sent: list[str] = []
    original = ApiClient.call_api

    def counting(self: ApiClient, method: str, url: str, *rest: Any, **options: Any) -> Any:
        sent.append(f"{method} {url.split('?')[0]}")
        return original(self, method, url, *rest, **options)

    ApiClient.call_api = counting  # type: ignore[method-assign]
    out = Path(os.environ["BENCH_COUNT_FILE"])
    atexit.register(lambda: out.write_text("\n".join(sent) + "\n"))
    (script,) = entry_points(group="console_scripts", name=f"dispatch-{step}")
    sys.argv = [f"dispatch-{step}", *args]
    script.load()()


if __name__ == "__main__":
    main(sys.argv[1:])
