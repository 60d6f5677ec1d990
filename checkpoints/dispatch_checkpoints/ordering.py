"""The ordering of saves, as pure rules over the head record every store keeps.

A store keeps one head record, replaced only by compare-and-swap (a new version is written
only if the version it was computed from is still the newest), holding two things:

- the fence: the highest epoch that has started. An execution starts by raising it to its own
  epoch; once it is raised, no execution of a lower epoch may start or commit again.
- the latest save: the (epoch, step) everyone resumes from, moved only forward.

Both an execution's start (which also reads where to resume from) and a save's commit are one
swap of that record, so they are ordered: a commit computed before a newer execution's start
finds the record changed, reads it again and is refused. In no interleaving does the latest
save go back, or name a save committed after a newer epoch started.
"""

from __future__ import annotations

from dataclasses import dataclass


class StaleExecution(RuntimeError):
    """A newer execution has started: this one must stop saving (and should stop)."""


class OutOfOrder(RuntimeError):
    """A save that is not above the latest one: the latest save only moves forward."""


class NotStarted(RuntimeError):
    """A save by an execution that has not started on this store (call start() first)."""


@dataclass(frozen=True, slots=True, order=True)
class SaveKey:
    """A save's place in the order: by epoch, then step."""

    epoch: int
    step: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Head:
    """The head record: the highest epoch started, and the save everyone resumes from."""

    fence: int = 0
    latest: SaveKey | None = None


def decide_start(head: Head, epoch: int) -> Head | None:
    """The head once `epoch` has started, None if it needs no change.

    Raises StaleExecution if a newer epoch started first.
    """
    if head.fence > epoch:
        raise StaleExecution(f"epoch {head.fence} has started; epoch {epoch} is stale")
    if head.fence == epoch:
        return None
    return Head(fence=epoch, latest=head.latest)


def check_saving(head: Head, epoch: int) -> None:
    """Refuse a save of `epoch` before it is written: stale, or never started here."""
    if head.fence > epoch:
        raise StaleExecution(f"epoch {head.fence} has started; epoch {epoch} may not save")
    if head.fence < epoch:
        raise NotStarted(f"epoch {epoch} has not started on this store: call start() first")


def decide_commit(head: Head, key: SaveKey) -> Head:
    """The head with `key` as the latest save, or why it may not be."""
    check_saving(head, key.epoch)
    if head.latest is not None and key <= head.latest:
        raise OutOfOrder(
            f"step {key.step} of epoch {key.epoch} is not above the latest save "
            f"(step {head.latest.step} of epoch {head.latest.epoch})"
        )
    return Head(fence=head.fence, latest=key)
