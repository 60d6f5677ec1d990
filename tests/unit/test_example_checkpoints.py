"""The training-code example (examples/checkpoints/train.py), a user of the checkpoint library:
it refuses to run outside an execution, resumes where the previous execution saved, and steps
aside once a newer execution has started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from dispatch_checkpoints import Execution, FilesystemStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "checkpoints"
OLDER = Execution(3_000_007_000_001, "job.7.0.1.0")
NEWER = Execution(3_000_007_000_002, "job.7.1.2.0")
FAST = ("--save-every", "10", "--step-seconds", "0")


def run_train(
    tmp_path: Path, execution: Execution | None, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DISPATCH_")}
    if execution is not None:
        env |= {"DISPATCH_EPOCH": str(execution.epoch), "DISPATCH_ATTEMPT": execution.attempt}
    return subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py"), "--root", str(tmp_path), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def events(ran: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ran.stdout.splitlines()]


def test_train_refuses_to_start_outside_an_execution(tmp_path: Path) -> None:
    ran = run_train(tmp_path, None)
    assert ran.returncode == 2
    assert ran.stderr.strip().splitlines() == [
        "train.py: not a dispatch-k8s execution: DISPATCH_EPOCH must be a positive integer, not ''"
    ]
    assert FilesystemStore(tmp_path).latest() is None


def test_train_resumes_where_the_previous_execution_saved(tmp_path: Path) -> None:
    first = run_train(tmp_path, OLDER, "--steps", "20", *FAST)
    assert first.returncode == 0, first.stderr
    second = run_train(tmp_path, NEWER, "--steps", "30", *FAST)
    assert second.returncode == 0, second.stderr
    said = events(second)
    assert said[0] == {
        "event": "resumed",
        "epoch": NEWER.epoch,
        "from_epoch": OLDER.epoch,
        "step": 20,
    }
    assert said[-1] == {"event": "done", "epoch": NEWER.epoch, "step": 30}


def test_an_execution_a_newer_one_overtook_steps_aside_without_saving(tmp_path: Path) -> None:
    newer = run_train(tmp_path, NEWER, "--steps", "10", *FAST)
    assert newer.returncode == 0, newer.stderr
    older = run_train(tmp_path, OLDER, "--steps", "1000", *FAST)
    assert older.returncode == 0, older.stderr
    (said,) = events(older)
    assert (said["event"], said["epoch"]) == ("stale", OLDER.epoch)
    latest = FilesystemStore(tmp_path).latest()
    assert latest is not None
    assert (latest.epoch, latest.step) == (NEWER.epoch, 10)


def test_stopped_by_sigterm_it_exits_143_not_0(tmp_path: Path) -> None:
    """Exit 0 would make a preempted pod Succeeded and complete the Job (docs/design.md)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DISPATCH_")}
    env |= {"DISPATCH_EPOCH": str(OLDER.epoch), "DISPATCH_ATTEMPT": OLDER.attempt}
    args = ("--steps", "100000", "--save-every", "1000", "--step-seconds", "0.01")
    with subprocess.Popen(
        [sys.executable, str(EXAMPLE / "train.py"), "--root", str(tmp_path), *args],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    ) as running:
        assert running.stdout is not None
        assert json.loads(running.stdout.readline())["event"] == "resumed"
        running.send_signal(signal.SIGTERM)
        said = [json.loads(line) for line in running.stdout]
        assert running.wait(timeout=60) == 128 + signal.SIGTERM
    assert said[-1]["event"] == "stopped", said
