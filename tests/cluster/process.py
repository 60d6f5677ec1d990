"""Child processes of the control plane: free loopback ports, logs to files, clean teardown."""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

LOOPBACK: Final = "127.0.0.1"
STOP_GRACE_SECONDS: Final = 15.0
TAIL_LINES: Final = 40
# Proxy settings of the caller must not reroute loopback traffic of the Go processes
# (kube-apiserver calls webhooks through Go's http.ProxyFromEnvironment).
PROXY_VARIABLES: Final = frozenset(
    {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
    | {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"}
)
PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>
# Ports are chosen from [LOWEST_PORT, start of the kernel's ephemeral range).
LOWEST_PORT: Final = 20000
EPHEMERAL_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
# A run's own share of those ports, "LOW-HIGH" (HIGH excluded): tests.lanes gives each lane
# one, so lanes that start control planes in the same second never choose the same port.
PORTS_ENV: Final = "DISPATCH_TEST_PORTS"


def die_with_parent() -> None:
    """In the child, before exec: get SIGKILL when the harness process dies.

    Components run in their own session (so a terminal's Ctrl-C reaches only the harness, which
    then stops them in order); this keeps a crashed or killed harness from leaving them running.
    Linux ties the signal to the thread that started the child: start components from a thread
    that lives as long as they should (the main thread, in pytest and the `up` command).
    """
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _below_ephemeral() -> int:
    """The first port the kernel hands out to outgoing connections (Linux default 32768)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_range() -> tuple[int, int]:
    """[low, high) of the ports free_ports chooses from: the run's share (PORTS_ENV), else
    every port from LOWEST_PORT to the ephemeral range."""
    share = os.environ.get(PORTS_ENV)
    if share:
        low, _, high = share.partition("-")
        return int(low), int(high)
    return LOWEST_PORT, max(_below_ephemeral(), LOWEST_PORT + 1000)


def port_shares(count: int) -> list[str]:
    """port_range() split into `count` disjoint shares, each a PORTS_ENV value."""
    low, high = port_range()
    size = (high - low) // count
    return [f"{low + i * size}-{low + (i + 1) * size}" for i in range(count)]


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1, chosen at random from port_range().

    Components bind their ports seconds after they are chosen. Ports from below the ephemeral
    range cannot meanwhile become the source port of some outgoing connection, and random choice
    keeps one run's concurrent control planes apart; a clash is still possible, as with
    envtest, and makes the clashing component exit (reported with its log). Runs side by side
    choose from shares of their own (PORTS_ENV): the CI's lanes, which start their control
    planes together once the build they wait for ends, clashed so (one lane's every test then
    failed at the setup of its session's control plane).
    """
    low, high = port_range()
    chosen: list[int] = []
    while len(chosen) < count:
        port = secrets.randbelow(high - low) + low
        if port in chosen:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                continue
        chosen.append(port)
    return chosen


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without proxy settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    env.update(extra or {})
    return env


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a log file (empty if it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass(slots=True)
class Process:
    """One component: its argv, its log file and, once started, its process group."""

    name: str
    argv: Sequence[str]
    log: Path
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    _popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start in a new session so teardown can signal the whole process group."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"$ {' '.join(self.argv)}\n".encode())
            out.flush()
            self._popen = subprocess.Popen(
                list(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_environment(self.env),
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    @property
    def pid(self) -> int | None:
        """The process id, once started."""
        return self._popen.pid if self._popen else None

    def exit_code(self) -> int | None:
        """None while running (or never started), else the exit status."""
        return self._popen.poll() if self._popen else None

    def running(self) -> bool:
        """Started and not yet exited."""
        return self._popen is not None and self._popen.poll() is None

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM the process group, then SIGKILL it if it outlives `grace` seconds."""
        if self._popen is None:
            return
        pgid = self._popen.pid  # the session leader: its pid is the group id
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                self._popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
                self._popen.wait()

    def tail(self, lines: int = TAIL_LINES) -> str:
        """The end of this component's log."""
        return tail(self.log, lines)
