"""Checkpoints on a POSIX filesystem.

The filesystem is one every execution shares (a ReadWriteMany volume, NFS, a hostPath on one
node):

    ROOT/epochs/00000003000007000002          created once by that execution's start (its attempt)
    ROOT/head/00000000000000000007.json       the head record's versions, each created once
    ROOT/saves/e00000003000007000002-s000000000120/     a complete save
    ROOT/saves/.partial-e…-s…-<attempt>/                one being written (its attempt hashed)

The head record (ordering.py) is a log of versions, each created by link(2) of a file already
written and synced: link fails if the name exists, on local filesystems and NFS alike, so of two
writers that read the same newest version exactly one creates the next, and the other reads
again. Versions are never removed (a removed one could be created again by a writer that read
long ago): one small file per start and per commit.

A save is written under a partial name, its files and directory synced, then renamed to its
final name (rename(2) onto an existing non-empty directory fails: a save is never replaced),
and only then committed, so the latest save is always complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dispatch_checkpoints.execution import Execution
from dispatch_checkpoints.ordering import (
    Head,
    SaveKey,
    StaleExecution,
    check_saving,
    decide_commit,
    decide_start,
)

EPOCH_DIGITS: Final = 20
STEP_DIGITS: Final = 12
VERSION_DIGITS: Final = 20
VERSION: Final = re.compile(rf"(\d{{{VERSION_DIGITS}}})\.json")
SAVE: Final = re.compile(rf"e(\d{{{EPOCH_DIGITS}}})-s(\d{{{STEP_DIGITS}}})")
PARTIAL: Final = re.compile(rf"\.partial-e(\d{{{EPOCH_DIGITS}}})-s\d+-[0-9a-f]+")


class RepeatedEpoch(RuntimeError):
    """Two executions with one epoch: the epoch was given twice, which dispatch-k8s forbids."""


@dataclass(frozen=True, slots=True, order=True)
class Checkpoint:
    """One complete, committed save: ordered by epoch, then step."""

    epoch: int
    step: int
    path: Path


class FilesystemStore:
    """Saves ordered by (epoch, step) under one root directory, fenced by the head record."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._epochs, self._head, self._saves = (self.root / n for n in ("epochs", "head", "saves"))

    def start(self, execution: Execution) -> Checkpoint | None:
        """Record this execution's start and return the save to resume from (None: none yet).

        Raises StaleExecution if a newer execution has started, RepeatedEpoch if another
        attempt started with this epoch. Every rank of an execution may call it.
        """
        self._record_epoch(execution)
        while True:
            version, head = self._read_head()
            new = decide_start(head, execution.epoch)
            if new is None or self._write_head(version + 1, new):
                return self._checkpoint((new or head).latest)

    def save(self, execution: Execution, step: int, files: Mapping[str, bytes]) -> Checkpoint:
        """Write `files` as this execution's save at `step` and make it the latest.

        Raises StaleExecution before writing, or at the commit, once a newer execution has
        started (a save refused at the commit stays on disk, is never the latest and is
        removed by prune()), FileExistsError if this step was saved before.
        """
        partial = self.stage(execution, step)
        for name, data in files.items():
            if "/" in name or name in ("", ".", ".."):
                raise ValueError(f"a save's file names are plain names, not {name!r}")
            _write_synced(partial / name, data)
        return self.commit(execution, step)

    def stage(self, execution: Execution, step: int) -> Path:
        """The directory this execution's save at `step` is written in before its commit.

        Every caller that names the same execution and step is given the same directory (the
        ranks of one save agree on it without talking); it is created if missing. Raises
        StaleExecution once a newer execution has started, NotStarted before this one did.
        """
        check_saving(self._read_head()[1], execution.epoch)
        partial = self.staging(execution, step)
        partial.mkdir(parents=True, exist_ok=True)
        return partial

    def staging(self, execution: Execution, step: int) -> Path:
        """Where stage() puts this execution's save at `step`: nothing is checked or made."""
        mark = hashlib.sha256(execution.attempt.encode()).hexdigest()[:8]
        return self._saves / f".partial-e{execution.epoch:0{EPOCH_DIGITS}d}-s{step}-{mark}"

    def commit(self, execution: Execution, step: int) -> Checkpoint:
        """Make the staged save at `step` (its files written and synced) the latest.

        Raises StaleExecution once a newer execution has started (the save stays on disk, is
        never the latest and is removed by prune()), FileExistsError if this step was saved
        before.
        """
        key = SaveKey(execution.epoch, step)
        final = self._publish(self.staging(execution, step), key)
        while True:
            version, head = self._read_head()
            if self._write_head(version + 1, decide_commit(head, key)):
                return Checkpoint(key.epoch, key.step, final)

    def saved(self, epoch: int, step: int) -> Checkpoint:
        """Where the save of `epoch` at `step` is once committed."""
        return Checkpoint(epoch, step, self._saves / _save_name(SaveKey(epoch, step)))

    def latest(self) -> Checkpoint | None:
        """The save to resume from: the latest committed one."""
        return self._checkpoint(self._read_head()[1].latest)

    def load(self, checkpoint: Checkpoint) -> dict[str, bytes]:
        """The files of a save."""
        return {entry.name: entry.read_bytes() for entry in checkpoint.path.iterdir()}

    def prune(self, keep: int = 2) -> list[Path]:
        """Remove old saves and return what was removed.

        Removed: all but the `keep` newest committed saves, and the saves and partial saves of
        epochs below the fence (their writers are stale). Never the latest save, nor a save of
        the current epoch not yet committed.
        """
        if keep < 1:
            raise ValueError(f"keep must be at least 1, not {keep}")
        head = self._read_head()[1]
        saves = sorted(self._complete_saves())
        committed = [k for k in saves if head.latest is not None and k <= head.latest]
        kept = set(committed[-keep:])
        doomed = [
            self._saves / _save_name(k)
            for k in saves
            if k not in kept
            and (k.epoch < head.fence or (head.latest is not None and k < head.latest))
        ]
        doomed += [
            self._saves / name
            for name in self._names(self._saves)
            if (match := PARTIAL.fullmatch(name)) and int(match.group(1)) < head.fence
        ]
        for path in doomed:
            shutil.rmtree(path, ignore_errors=True)
        return doomed

    # --- the head record -----------------------------------------------------------------

    def _read_head(self) -> tuple[int, Head]:
        versions = [int(m.group(1)) for n in self._names(self._head) if (m := VERSION.fullmatch(n))]
        if not versions:
            return 0, Head()
        newest = max(versions)
        record = json.loads((self._head / f"{newest:0{VERSION_DIGITS}d}.json").read_text())
        latest = record["latest"]
        return newest, Head(
            fence=int(record["fence"]),
            latest=None if latest is None else SaveKey(int(latest[0]), int(latest[1])),
        )

    def _write_head(self, version: int, head: Head) -> bool:
        """Create `version` of the head record: False if another writer created it first."""
        latest = None if head.latest is None else [head.latest.epoch, head.latest.step]
        record = json.dumps({"fence": head.fence, "latest": latest}).encode()
        return _create_once(self._head / f"{version:0{VERSION_DIGITS}d}.json", record)

    # --- epochs and saves ----------------------------------------------------------------

    def _record_epoch(self, execution: Execution) -> None:
        path = self._epochs / f"{execution.epoch:0{EPOCH_DIGITS}d}"
        if _create_once(path, execution.attempt.encode()):
            return
        recorded = path.read_bytes().decode()
        if recorded != execution.attempt:
            raise RepeatedEpoch(
                f"epoch {execution.epoch} was started by attempt {recorded}, not "
                f"{execution.attempt}: two executions may not share an epoch"
            )

    def _publish(self, partial: Path, key: SaveKey) -> Path:
        """Sync the staged save's directory and rename it to its final name."""
        _sync_directory(partial)
        final = self._saves / _save_name(key)
        try:
            partial.rename(final)
        except OSError as e:
            shutil.rmtree(partial, ignore_errors=True)
            raise FileExistsError(f"{final} is already saved") from e
        _sync_directory(self._saves)
        return final

    def _complete_saves(self) -> list[SaveKey]:
        return [
            SaveKey(int(m.group(1)), int(m.group(2)))
            for name in self._names(self._saves)
            if (m := SAVE.fullmatch(name))
        ]

    def _checkpoint(self, key: SaveKey | None) -> Checkpoint | None:
        return None if key is None else self.saved(key.epoch, key.step)

    @staticmethod
    def _names(directory: Path) -> list[str]:
        try:
            return os.listdir(directory)
        except FileNotFoundError:
            return []


def _save_name(key: SaveKey) -> str:
    return f"e{key.epoch:0{EPOCH_DIGITS}d}-s{key.step:0{STEP_DIGITS}d}"


def _create_once(path: Path, data: bytes) -> bool:
    """Create `path` holding `data`, whole or not at all: False if it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.parent / f".staged-{secrets.token_hex(8)}"
    _write_synced(staged, data)
    try:
        os.link(staged, path)
    except FileExistsError:
        return False
    finally:
        staged.unlink()
    _sync_directory(path.parent)
    return True


def _write_synced(path: Path, data: bytes) -> None:
    with path.open("xb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _sync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


__all__ = ["Checkpoint", "FilesystemStore", "RepeatedEpoch", "StaleExecution"]
