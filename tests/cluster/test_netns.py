"""The network namespace wrapper (tests/cluster/netns.py) leaves nothing behind when it is
killed: the harness's own death signal reaches the wrapper, and the wrapper's reaches its
program (the Argo and Tekton controllers run this way)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.cluster.process import free_ports
from tests.cluster.wait import wait_until


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"  # ended, not yet reaped by whoever adopted it


def test_a_program_in_its_namespace_ends_when_its_wrapper_is_killed(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    netns = [sys.executable, "-m", "tests.cluster.netns", "--socket", str(tmp_path / "api.sock")]
    wrapper = subprocess.Popen(
        ["unshare", "--net", "--", *netns, "--port", str(port), "--", "sleep", "300"]
    )
    try:
        (program,) = wait_until(
            lambda: _children(wrapper.pid) or None, what="the wrapper's program", timeout=30
        )
        wrapper.send_signal(signal.SIGKILL)
        wrapper.wait(timeout=10)
        wait_until(lambda: _gone(program) or None, what="the program to end", timeout=10)
    finally:
        wrapper.kill()
        wrapper.wait()
