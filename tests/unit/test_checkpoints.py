"""The checkpoint library (checkpoints/): saves ordered by (epoch, step), and an execution
that a newer one has overtaken refused before it writes and at its commit, on a real
filesystem."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import zipfile
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest
from dispatch_checkpoints import (
    Execution,
    FilesystemStore,
    MissingIdentity,
    NotStarted,
    OutOfOrder,
    RepeatedEpoch,
    StaleExecution,
)

OLDER = Execution(3_000_007_000_001, "job.7.0.1.0")
NEWER = Execution(3_000_007_000_002, "job.7.0.2.0")


def state(step: int) -> dict[str, bytes]:
    return {"state.json": json.dumps({"step": step}).encode()}


def test_the_first_execution_has_nothing_to_resume_from(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path)
    assert store.start(OLDER) is None
    assert store.latest() is None


def test_a_newer_execution_resumes_from_the_older_ones_latest_save(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path)
    store.start(OLDER)
    store.save(OLDER, 10, state(10))
    store.save(OLDER, 20, state(20))
    resumed = store.start(NEWER)
    assert resumed is not None
    assert (resumed.epoch, resumed.step) == (OLDER.epoch, 20)
    assert store.load(resumed) == state(20)


def test_once_a_newer_execution_started_the_older_one_may_not_save(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path)
    store.start(OLDER)
    store.save(OLDER, 10, state(10))
    store.start(NEWER)
    with pytest.raises(StaleExecution):
        store.save(OLDER, 1_000, state(1_000))  # far past any step the newer one made
    assert not list((tmp_path / "saves").glob("*s000000001000"))  # refused before writing
    latest = store.latest()
    assert latest is not None
    assert (latest.epoch, latest.step) == (OLDER.epoch, 10)


def test_a_save_written_before_the_newer_start_is_refused_at_its_commit(tmp_path: Path) -> None:
    """The older execution passes its check, the newer one starts while it writes: the
    commit finds the head record changed and is refused; the save is never the latest."""
    store = FilesystemStore(tmp_path)
    store.start(OLDER)
    publish = store._publish

    def newer_starts_meanwhile(*args: object, **kwargs: object) -> Path:
        path = publish(*args, **kwargs)  # type: ignore[arg-type]
        FilesystemStore(tmp_path).start(NEWER)
        return path

    store._publish = newer_starts_meanwhile  # type: ignore[method-assign]
    with pytest.raises(StaleExecution):
        store.save(OLDER, 50, state(50))
    assert FilesystemStore(tmp_path).latest() is None


def test_a_save_is_never_replaced_and_the_latest_only_moves_forward(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path)
    store.start(NEWER)
    store.save(NEWER, 20, state(20))
    with pytest.raises(FileExistsError):
        store.save(NEWER, 20, state(99))
    with pytest.raises(OutOfOrder):
        store.save(NEWER, 10, state(10))
    latest = store.latest()
    assert latest is not None
    assert store.load(latest) == state(20)


def test_a_save_before_start_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotStarted):
        FilesystemStore(tmp_path).save(OLDER, 1, state(1))


def test_a_stale_execution_may_not_start_again(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path)
    store.start(NEWER)
    with pytest.raises(StaleExecution):
        store.start(OLDER)


def test_two_attempts_with_one_epoch_are_refused_every_rank_of_one_is_not(
    tmp_path: Path,
) -> None:
    store = FilesystemStore(tmp_path)
    store.start(OLDER)
    store.start(OLDER)  # another rank of the same execution
    with pytest.raises(RepeatedEpoch, match="two executions may not share an epoch"):
        store.start(Execution(OLDER.epoch, "job.7.9.1.0"))


def test_a_partial_save_is_never_the_latest_and_prune_removes_stale_ones(
    tmp_path: Path,
) -> None:
    store = FilesystemStore(tmp_path)
    store.start(OLDER)
    store.save(OLDER, 10, state(10))
    partial = tmp_path / "saves" / f".partial-e{OLDER.epoch:020d}-s20-abcd"
    partial.mkdir()
    (partial / "state.json").write_text('{"st')  # a writer cut off half-way
    store.start(NEWER)
    latest = store.latest()
    assert latest is not None
    assert latest.step == 10
    for step in (5, 15, 25):
        store.save(NEWER, step, state(step))
    removed = store.prune(keep=2)
    assert partial in removed
    names = sorted(p.name for p in (tmp_path / "saves").iterdir())
    assert names == [f"e{NEWER.epoch:020d}-s{s:012d}" for s in (15, 25)]


def test_prune_never_removes_the_latest_save(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path)
    store.start(OLDER)
    store.save(OLDER, 10, state(10))
    store.start(NEWER)  # nothing saved by the newer one yet
    store.prune(keep=1)
    latest = store.latest()
    assert latest is not None
    assert store.load(latest) == state(10)
    with pytest.raises(ValueError, match="keep must be at least 1"):
        store.prune(keep=0)


def test_file_names_in_a_save_are_plain_names(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path)
    store.start(OLDER)
    with pytest.raises(ValueError, match="plain names"):
        store.save(OLDER, 1, {"../escape": b""})


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"DISPATCH_EPOCH": "12"},
        {"DISPATCH_EPOCH": "x", "DISPATCH_ATTEMPT": "a"},
        {"DISPATCH_EPOCH": "0", "DISPATCH_ATTEMPT": "a"},
        {"DISPATCH_EPOCH": "²", "DISPATCH_ATTEMPT": "a"},
        {"DISPATCH_EPOCH": str(2**63), "DISPATCH_ATTEMPT": "a"},
    ],
    ids=["none", "no-attempt", "not-a-number", "zero", "superscript", "too-large"],
)
def test_an_execution_needs_both_variables(environ: dict[str, str]) -> None:
    with pytest.raises(MissingIdentity):
        Execution.from_environment(environ)


def _race(
    root: Path, execution: Execution, step: int | None, barrier: Barrier, results: Queue[str]
) -> None:
    """Start (step None) or save at `step`, once both racers are ready; put what happened."""
    store = FilesystemStore(root)
    barrier.wait()
    try:
        if step is None:
            store.start(execution)
        else:
            store.save(execution, step, state(step))
    except StaleExecution:
        results.put(f"{execution.epoch} stale")
    else:
        results.put(f"{execution.epoch} done")


def test_a_start_racing_a_stale_commit_in_other_processes_is_linearized(tmp_path: Path) -> None:
    """Real processes, one filesystem: the newer execution's start and the older one's save
    race; the latest save is the older one's only if its commit came first, and the older
    one is told it is stale otherwise."""
    context = multiprocessing.get_context("fork")
    for round_ in range(20):
        root = tmp_path / str(round_)
        FilesystemStore(root).start(OLDER)
        barrier, results = context.Barrier(2), context.Queue()
        racers = [
            context.Process(target=_race, args=(root, OLDER, 10, barrier, results)),
            context.Process(target=_race, args=(root, NEWER, None, barrier, results)),
        ]
        for racer in racers:
            racer.start()
        said = {results.get(timeout=30) for _ in racers}
        for racer in racers:
            racer.join(timeout=30)
        assert f"{NEWER.epoch} done" in said
        latest = FilesystemStore(root).latest()
        if f"{OLDER.epoch} done" in said:
            assert latest is not None
            assert (latest.epoch, latest.step) == (OLDER.epoch, 10)
        else:
            assert f"{OLDER.epoch} stale" in said
            assert latest is None
        # One version of the head record per start and per commit that went through.
        assert len(os.listdir(root / "head")) == 2 + (f"{OLDER.epoch} done" in said)


def test_the_library_is_a_distribution_of_its_own_with_no_dependencies(tmp_path: Path) -> None:
    """A training image installs it without the Kubernetes client: one package, py.typed, and
    no requirement but those of the extras it names (s3: boto3)."""
    source = Path(__file__).resolve().parents[2] / "checkpoints"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", tmp_path, source],
        check=True,
    )
    (built,) = tmp_path.glob("dispatch_k8s_checkpoints-*.whl")
    names = zipfile.ZipFile(built).namelist()
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"dispatch_checkpoints"}
    assert "dispatch_checkpoints/py.typed" in names
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    lines = zipfile.ZipFile(built).read(metadata).decode().splitlines()
    required = [line for line in lines if line.startswith("Requires-Dist:")]
    assert all("; extra ==" in line for line in required), required
