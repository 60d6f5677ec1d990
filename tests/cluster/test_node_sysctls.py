"""Two nodes on one machine: the host's own sysctl values come back only when the last one
stops, whichever order they stop in (a fake /proc/sys: nothing real is changed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster import node

CHANGED = {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}
PID_MAX = 4194304  # Linux's largest pid_max: no process has a higher pid
HOST = {"vm/overcommit_memory": "0", "kernel/panic": "1", "kernel/panic_on_oops": "0"}


@pytest.fixture
def proc_sys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proc-sys"
    for name, value in HOST.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{value}\n")
    monkeypatch.setattr(node, "PROC_SYS", root)
    monkeypatch.setattr(node, "SYSCTL_RECORD", tmp_path / "run" / "sysctls.json")
    return root


def values(root: Path) -> dict[str, str]:
    return {name: (root / name).read_text().strip() for name in node.SYSCTLS}


def kubelet_starts(root: Path) -> None:
    for name, value in CHANGED.items():
        (root / name).write_text(value)


@pytest.mark.parametrize("first_to_stop", ["a", "b"])
def test_the_host_values_return_when_the_last_node_stops(
    proc_sys: Path, tmp_path: Path, first_to_stop: str
) -> None:
    nodes = {"a": node.Node(tmp_path / "a"), "b": node.Node(tmp_path / "b")}
    nodes["a"].save_sysctls()
    kubelet_starts(proc_sys)
    nodes["b"].save_sysctls()  # sees the values a's kubelet set
    nodes[first_to_stop].restore_sysctls()
    assert values(proc_sys) == CHANGED, "the other node still runs"
    nodes["b" if first_to_stop == "a" else "a"].restore_sysctls()
    assert values(proc_sys) == HOST
    assert not node.SYSCTL_RECORD.exists()


def test_a_crashed_run_s_record_still_restores_the_host_values(
    proc_sys: Path, tmp_path: Path
) -> None:
    crashed = node.Node(tmp_path / "crashed")
    crashed.save_sysctls()
    kubelet_starts(proc_sys)
    record = json.loads(node.SYSCTL_RECORD.read_text())
    record["holders"][0]["pid"] = PID_MAX + 1  # its harness is gone; the values stay changed
    node.SYSCTL_RECORD.write_text(json.dumps(record))
    later = node.Node(tmp_path / "later")
    later.save_sysctls()
    later.restore_sysctls()
    assert values(proc_sys) == HOST
