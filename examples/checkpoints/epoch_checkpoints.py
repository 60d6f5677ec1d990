"""Checkpoints ordered by execution: a late save of an older execution never wins.

Each execution of a dispatch-k8s TrainJob sees `DISPATCH_EPOCH`, which only increases from
one execution to the next, and `DISPATCH_ATTEMPT`, unique to it. On a filesystem every
execution shares (a ReadWriteMany volume, NFS, a hostPath on one node), each execution writes
only under its own epoch, and a save becomes visible only by an atomic rename once complete:

    ROOT/epoch-00000003000007000002/step-000000000120/      a complete save
    ROOT/epoch-00000003000007000002/.partial-…/             one being written

A reader resumes from the highest complete step of the highest epoch that has one. No two
executions write the same path and no reader sees half a save, so there is no check-then-write
race to lose: an execution that goes on after a newer one began (a pod in its grace period, a
node cut off and back) only adds saves under its own, lower, epoch, which no reader prefers.

Standard library only: copy it into a training image as it is.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

EPOCH_DIGITS: Final = 20  # an epoch is below 10^20: G x 10^12 + N x 10^6 + R, G below 10^8
STEP_DIGITS: Final = 12
COMPLETE: Final = re.compile(rf"step-(\d{{{STEP_DIGITS}}})")
EPOCH_DIR: Final = re.compile(rf"epoch-(\d{{{EPOCH_DIGITS}}})")


class MissingIdentity(ValueError):
    """The process was not started as a dispatch-k8s execution."""


@dataclass(frozen=True, slots=True)
class Execution:
    """Which execution this process is: its epoch and its attempt."""

    epoch: int
    attempt: str

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Execution:
        """The execution dispatch-k8s started, from its variables; refuses without them."""
        epoch, attempt = environ.get("DISPATCH_EPOCH", ""), environ.get("DISPATCH_ATTEMPT", "")
        if not epoch.isdigit() or not 0 < int(epoch) < 10**EPOCH_DIGITS:
            raise MissingIdentity(f"DISPATCH_EPOCH must be a positive integer, not {epoch!r}")
        if not attempt:
            raise MissingIdentity("DISPATCH_ATTEMPT is not set")
        return cls(int(epoch), attempt)


@dataclass(frozen=True, slots=True, order=True)
class Checkpoint:
    """One complete save: ordered by epoch, then step."""

    epoch: int
    step: int
    path: Path


def save(root: Path, execution: Execution, step: int, files: Mapping[str, bytes]) -> Checkpoint:
    """Write `files` as this execution's save at `step`, visible all at once or not at all.

    Raises FileExistsError if this execution already saved that step: a save is never
    replaced, not even by its own execution.
    """
    epoch_dir = root / f"epoch-{execution.epoch:0{EPOCH_DIGITS}d}"
    epoch_dir.mkdir(parents=True, exist_ok=True)
    safe_attempt = re.sub(r"[^A-Za-z0-9.-]", "_", execution.attempt)
    partial = epoch_dir / f".partial-{safe_attempt}-{step}-{secrets.token_hex(4)}"
    partial.mkdir()
    for name, data in files.items():
        with (partial / name).open("wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    _fsync_dir(partial)
    final = epoch_dir / f"step-{step:0{STEP_DIGITS}d}"
    try:
        # rename(2) onto an existing non-empty directory fails: a save is never replaced.
        partial.rename(final)
    except OSError as e:
        raise FileExistsError(f"{final} is already saved") from e
    _fsync_dir(epoch_dir)
    return Checkpoint(execution.epoch, step, final)


def latest(root: Path) -> Checkpoint | None:
    """The save to resume from: the highest complete step of the highest epoch with one."""
    if not root.is_dir():
        return None
    epochs = sorted(
        (int(match.group(1)), entry)
        for entry in root.iterdir()
        if (match := EPOCH_DIR.fullmatch(entry.name))
    )
    for epoch, directory in reversed(epochs):
        steps = [
            Checkpoint(epoch, int(match.group(1)), entry)
            for entry in directory.iterdir()
            if (match := COMPLETE.fullmatch(entry.name))
        ]
        if steps:
            return max(steps)
    return None


def load(checkpoint: Checkpoint) -> dict[str, bytes]:
    """The files of a complete save."""
    return {entry.name: entry.read_bytes() for entry in checkpoint.path.iterdir()}


def _fsync_dir(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
