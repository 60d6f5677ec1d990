"""The training-code example (examples/checkpoints): saves ordered by execution, so a late
save of an older execution never replaces a newer one, and no reader sees half a save."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from epoch_checkpoints import Execution, MissingIdentity, latest, load, save

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "checkpoints"
OLDER = Execution(3_000_007_000_001, "job.7.0.1.0")
NEWER = Execution(3_000_007_000_002, "job.7.1.2.0")


def state(step: int) -> dict[str, bytes]:
    return {"state.json": json.dumps({"step": step}).encode()}


def test_a_late_save_of_an_older_execution_loses_to_the_newer_executions_save(
    tmp_path: Path,
) -> None:
    save(tmp_path, OLDER, 10, state(10))
    resumed = latest(tmp_path)
    assert resumed is not None
    assert (resumed.epoch, resumed.step) == (OLDER.epoch, 10)
    save(tmp_path, NEWER, 20, state(20))
    save(tmp_path, OLDER, 30, state(30))  # the older one goes on, past the newer one's step
    found = latest(tmp_path)
    assert found is not None
    assert (found.epoch, found.step) == (NEWER.epoch, 20)
    assert load(found) == state(20)


def test_until_the_newer_execution_saves_the_older_ones_newest_save_is_resumed(
    tmp_path: Path,
) -> None:
    save(tmp_path, OLDER, 10, state(10))
    (tmp_path / f"epoch-{NEWER.epoch:020d}").mkdir()  # begun, nothing saved yet
    save(tmp_path, OLDER, 30, state(30))
    found = latest(tmp_path)
    assert found is not None
    assert (found.epoch, found.step) == (OLDER.epoch, 30)


def test_a_save_being_written_is_never_resumed_from(tmp_path: Path) -> None:
    save(tmp_path, OLDER, 10, state(10))
    partial = tmp_path / f"epoch-{NEWER.epoch:020d}" / ".partial-job.7.1.2.0-20-abcd"
    partial.mkdir(parents=True)
    (partial / "state.json").write_text('{"st')  # a writer cut off half-way
    found = latest(tmp_path)
    assert found is not None
    assert found.epoch == OLDER.epoch


def test_a_save_is_never_replaced_not_even_by_its_own_execution(tmp_path: Path) -> None:
    save(tmp_path, NEWER, 20, state(20))
    with pytest.raises(FileExistsError):
        save(tmp_path, NEWER, 20, state(99))
    found = latest(tmp_path)
    assert found is not None
    assert load(found) == state(20)


def test_epochs_compare_as_numbers_not_as_names(tmp_path: Path) -> None:
    save(tmp_path, Execution(9, "a"), 5, state(5))
    save(tmp_path, Execution(10, "b"), 1, state(1))
    found = latest(tmp_path)
    assert found is not None
    assert found.epoch == 10


@pytest.mark.parametrize(
    "environ",
    [{}, {"DISPATCH_EPOCH": "12"}, {"DISPATCH_EPOCH": "x", "DISPATCH_ATTEMPT": "a"}],
    ids=["none", "no-attempt", "epoch-not-a-number"],
)
def test_an_execution_needs_both_variables(environ: dict[str, str]) -> None:
    with pytest.raises(MissingIdentity):
        Execution.from_environment(environ)


def run_train(
    tmp_path: Path, environ: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DISPATCH_")}
    return subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py"), "--root", str(tmp_path), *args],
        env={**env, **environ},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_train_refuses_to_start_outside_an_execution(tmp_path: Path) -> None:
    ran = run_train(tmp_path, {})
    assert ran.returncode == 2
    assert ran.stderr.strip().splitlines() == [
        "train.py: not a dispatch-k8s execution: DISPATCH_EPOCH must be a positive integer, not ''"
    ]
    assert latest(tmp_path) is None


def test_train_resumes_where_the_previous_execution_saved(tmp_path: Path) -> None:
    flags = ("--steps", "20", "--save-every", "10", "--step-seconds", "0")
    first = run_train(
        tmp_path, {"DISPATCH_EPOCH": str(OLDER.epoch), "DISPATCH_ATTEMPT": "a"}, *flags
    )
    assert first.returncode == 0, first.stderr
    second = run_train(
        tmp_path,
        {"DISPATCH_EPOCH": str(NEWER.epoch), "DISPATCH_ATTEMPT": "b"},
        "--steps",
        "30",
        "--save-every",
        "10",
        "--step-seconds",
        "0",
    )
    events = [json.loads(line) for line in second.stdout.splitlines()]
    assert events[0] == {
        "event": "resumed",
        "epoch": NEWER.epoch,
        "from_epoch": OLDER.epoch,
        "step": 20,
    }
    assert events[-1] == {"event": "done", "epoch": NEWER.epoch, "step": 30}
