"""Every suite, in lanes side by side: `scripts/test` with no arguments (`python -m tests.lanes`).

Each lane is a pytest run of its own, with a local control plane and node of its own: most of a
suite's time is spent waiting for controllers, kubelets and pods, not computing, so lanes side by
side on two cores end in little more than the longest one's time. The node suite, the longest
(the adversarial matrix), is split in two parts whose cells alternate (`--part`, tests/conftest.py),
with the install lifecycles; the rest of the pipelines suite and the images suite make a lane;
the unit suite, the docs site, the control plane's own tests, faults, integration and storage
the last.

Against an existing cluster (DISPATCH_TEST_KUBECONFIG) there is one lane: the suites would share
its cluster-wide objects (the policies, their bindings, the CRDs).

A lane's output goes to its log, printed whole when it ends; a SIGTERM or Ctrl-C is passed on to
every lane, whose pytest then tears its control plane down (tests/conftest.py). The exit code is
the first failing lane's, in LANES' order, or 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Final

from tests.cluster.process import PORTS_ENV, port_shares

EXISTING_CLUSTER_ENV: Final = "DISPATCH_TEST_KUBECONFIG"


@dataclass(frozen=True, slots=True)
class Lane:
    name: str
    paths: tuple[str, ...]


# The install lifecycles start control planes of their own (tests/pipelines/conftest.py): the
# longest file of the pipelines suite, whose lane must leave time for the Argo and Tekton runs
# after the engines' build, they go with the node suite's halves, the lanes that end first.
INSTALLS: Final = "tests/pipelines/test_install_lifecycle.py"
LANES: Final = (
    Lane("node-1", ("tests/node", INSTALLS, "--part", "1/2")),
    Lane("node-2", ("tests/node", INSTALLS, "--part", "2/2")),
    Lane("pipelines", ("tests/pipelines", "tests/images", "--ignore", INSTALLS)),
    Lane(
        "api",
        (
            "tests/unit",
            "tests/docsite",
            "tests/cluster",
            "tests/faults",
            "tests/integration",
            "tests/bench",
            "tests/storage",
        ),
    ),
)


@dataclass(slots=True)
class Running:
    lane: Lane
    process: subprocess.Popen[bytes]
    log: Path
    started: float


def _start(lane: Lane, logs: Path, ports: str) -> Running:
    log = logs / f"{lane.name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest", *lane.paths],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, PORTS_ENV: ports},
        )
    return Running(lane, process, log, time.monotonic())


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _report(running: Running, code: int) -> None:
    minutes = (time.monotonic() - running.started) / 60
    _say(f"\n===== lane {running.lane.name}: exit {code} after {minutes:.1f} min =====")
    with running.log.open("rb") as log:
        while chunk := log.read(1 << 16):
            sys.stdout.buffer.write(chunk)
    sys.stdout.flush()


def main() -> int:
    if os.environ.get(EXISTING_CLUSTER_ENV):
        return subprocess.call([sys.executable, "-m", "pytest"])
    logs = Path(tempfile.mkdtemp(prefix="dispatch-k8s-lanes-"))
    shares = port_shares(len(LANES))  # no two lanes ever choose the same port
    runs = [_start(lane, logs, ports) for lane, ports in zip(LANES, shares, strict=True)]
    _say(f"lanes: {', '.join(r.lane.name for r in runs)}; their logs: {logs}")

    codes: dict[str, int] = {}

    def _pass_on(_signum: int, _frame: FrameType | None) -> None:
        for run in runs:
            if run.lane.name not in codes:  # not yet reaped: its pid is still its own
                run.process.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, _pass_on)
    signal.signal(signal.SIGINT, _pass_on)
    by_pid = {run.process.pid: run for run in runs}
    while len(codes) < len(runs):
        pid, status = os.wait()  # any lane's end (retried after a signal is passed on)
        if (run := by_pid.get(pid)) is not None:
            codes[run.lane.name] = os.waitstatus_to_exitcode(status)
            _report(run, codes[run.lane.name])
    _say("lanes: " + ", ".join(f"{name} exit {code}" for name, code in codes.items()))
    return next((codes[lane.name] for lane in LANES if codes[lane.name]), 0)


if __name__ == "__main__":
    sys.exit(main())
