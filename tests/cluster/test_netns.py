"""The network namespace wrapper (tests/cluster/netns.py) leaves nothing behind when it is
killed: the harness's own death signal reaches the wrapper, and the wrapper's reaches its
program (the Argo and Tekton controllers run this way); and `--serve` is the way in."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.cluster.process import free_ports
from tests.cluster.relay import LOOPBACK, LoopbackToUnix
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


def test_serve_is_the_one_way_in_from_the_host_loopback(tmp_path: Path) -> None:
    """What listens inside on every interface is reached from the host only through `--serve`
    and LoopbackToUnix (the way the API server reaches Tekton's webhook)."""
    api_port, inside = free_ports(2)
    socket_path = tmp_path / "in.sock"
    netns = [sys.executable, "-m", "tests.cluster.netns", "--socket", str(tmp_path / "api.sock")]
    server = [sys.executable, "-m", "http.server", str(inside), "--directory", str(tmp_path)]
    (tmp_path / "here").write_text("inside\n")
    serve = [f"--serve={socket_path}={inside}"]
    wrapper = subprocess.Popen(
        ["unshare", "--net", "--", *netns, f"--port={api_port}", *serve, "--", *server],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with LoopbackToUnix(socket_path) as way_in:

            def read(port: int) -> str | None:
                try:
                    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/here", timeout=5) as r:
                        return str(r.read().decode())
                except OSError:
                    return None

            assert wait_until(lambda: read(way_in.port), what="the server inside", timeout=30)
            assert read(way_in.port) == "inside\n"
            assert read(inside) is None  # not on the host's own loopback
    finally:
        wrapper.kill()
        wrapper.wait()
