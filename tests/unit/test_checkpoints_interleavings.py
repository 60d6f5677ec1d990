"""Property test of the checkpoint library's ordering on a real filesystem: several executions'
starts, saves and commits, each commit split into its read of the head record and its
compare-and-swap, crashes (saves cut off half-way) and prunes, in every order hypothesis finds.

After every step: the latest save never goes back, is complete, and was never committed after
a newer epoch had started."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dispatch_checkpoints import Execution, FilesystemStore, OutOfOrder, SaveKey, StaleExecution
from dispatch_checkpoints.ordering import Head, NotStarted, decide_commit
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

EXECUTIONS = tuple(Execution(1_000_001_000_000 + r, f"job.1.0.{r}.0") for r in (1, 2, 3))
execution_index = st.integers(min_value=0, max_value=len(EXECUTIONS) - 1)


def state(key: SaveKey) -> dict[str, bytes]:
    return {"state.json": json.dumps([key.epoch, key.step]).encode()}


@dataclass
class Commit:
    """A save published under its final name, on its way to the head record."""

    key: SaveKey
    read: tuple[int, Head] | None = None


class Interleavings(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="checkpoints-"))
        self.store = FilesystemStore(self.root)
        self.commits: list[Commit] = []
        self.highest_started = 0  # the highest epoch whose start returned
        self.seen: SaveKey | None = None  # the latest save as last read
        self.steps = iter(range(1, 10_000))

    def teardown(self) -> None:
        """Each example's store removed: a run makes thousands."""
        shutil.rmtree(self.root)

    @rule(index=execution_index)
    def start(self, index: int) -> None:
        execution = EXECUTIONS[index]
        try:
            self.store.start(execution)
        except StaleExecution:
            assert self.highest_started > execution.epoch
        else:
            assert self.highest_started <= execution.epoch
            self.highest_started = max(self.highest_started, execution.epoch)

    @rule(index=execution_index)
    def publish(self, index: int) -> None:
        """A save checked and written, its commit not yet begun."""
        execution = EXECUTIONS[index]
        key = SaveKey(execution.epoch, next(self.steps))
        try:
            partial = self.store.stage(execution, key.step)
        except (StaleExecution, NotStarted):
            return
        for name, data in state(key).items():
            (partial / name).write_bytes(data)
        self.store._publish(partial, key)
        self.commits.append(Commit(key))

    @rule(data=st.data())
    def read_head(self, data: st.DataObject) -> None:
        if self.commits:
            commit = data.draw(st.sampled_from(self.commits))
            commit.read = self.store._read_head()

    @rule(data=st.data())
    def swap_head(self, data: st.DataObject) -> None:
        ready = [c for c in self.commits if c.read is not None]
        if not ready:
            return
        commit = data.draw(st.sampled_from(ready))
        assert commit.read is not None
        version, head = commit.read
        try:
            new = decide_commit(head, commit.key)
        except (StaleExecution, OutOfOrder, NotStarted):
            self.commits.remove(commit)
            return
        if self.store._write_head(version + 1, new):
            self.commits.remove(commit)
            assert commit.key.epoch >= self.highest_started, "committed after a newer start"
        else:
            commit.read = None  # another writer came first: read again

    @rule(index=execution_index)
    def crash(self, index: int) -> None:
        """A writer cut off half-way through a save."""
        epoch = EXECUTIONS[index].epoch
        partial = self.root / "saves" / f".partial-e{epoch:020d}-s{next(self.steps)}-dead"
        partial.mkdir(parents=True)
        (partial / "state.json").write_bytes(b"[1, ")

    @rule(keep=st.integers(min_value=1, max_value=3))
    def prune(self, keep: int) -> None:
        self.store.prune(keep=keep)

    @invariant()
    def latest_never_goes_back_and_is_complete(self) -> None:
        latest = self.store.latest()
        if latest is None:
            assert self.seen is None
            return
        key = SaveKey(latest.epoch, latest.step)
        assert self.seen is None or key >= self.seen
        assert self.store.load(latest) == state(key)
        self.seen = key


TestInterleavings = Interleavings.TestCase
