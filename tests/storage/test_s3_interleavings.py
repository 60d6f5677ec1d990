"""Property test of the S3 store's ordering on the real server: several executions' starts,
saves (files written, then the head's read and its swap, as separate steps), and saves cut off
before their commit, in every order hypothesis finds. After every step the latest save has not
gone back, loads whole, and was not committed after a newer epoch started."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from dispatch_checkpoints import Execution, OutOfOrder, SaveKey, StaleExecution
from dispatch_checkpoints.ordering import NotStarted, check_saving, decide_commit
from dispatch_checkpoints.s3 import S3Checkpoint, S3Store
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from tests.storage.conftest import BUCKET, client_for

pytestmark = pytest.mark.storage
EXECUTIONS = tuple(Execution(1_000_001_000_000 + r, f"job.1.0.{r}.0") for r in (1, 2, 3))
execution_index = st.integers(min_value=0, max_value=len(EXECUTIONS) - 1)


def state(key: SaveKey) -> dict[str, bytes]:
    return {"state.json": json.dumps([key.epoch, key.step]).encode()}


@dataclass
class Commit:
    """A save whose files are written, on its way to the head record."""

    key: SaveKey
    saved: S3Checkpoint
    read: Any = None


class Interleavings(RuleBasedStateMachine):
    endpoint: ClassVar[str] = ""

    def __init__(self) -> None:
        super().__init__()
        prefix = f"interleavings-{secrets.token_hex(6)}"
        self.store = S3Store(client_for(self.endpoint), BUCKET, prefix, probe=False)
        self.commits: list[Commit] = []
        self.highest_started = 0
        self.seen: SaveKey | None = None
        self.steps = iter(range(1, 10_000))

    @rule(index=execution_index)
    def start(self, index: int) -> None:
        execution = EXECUTIONS[index]
        try:
            self.store.start(execution)
        except StaleExecution:
            assert self.highest_started > execution.epoch
        else:
            self.highest_started = max(self.highest_started, execution.epoch)

    @rule(index=execution_index)
    def write_files(self, index: int) -> None:
        execution = EXECUTIONS[index]
        key = SaveKey(execution.epoch, next(self.steps))
        try:
            check_saving(self.store._read_head().head, execution.epoch)
        except (StaleExecution, NotStarted):
            return
        token = secrets.token_hex(8)
        for name, data in state(key).items():
            self.store._s3.put_object(
                Bucket=self.store._bucket, Key=self.store._file(key, token, name), Body=data
            )
        self.commits.append(Commit(key, S3Checkpoint(key.epoch, key.step, token, ("state.json",))))

    @rule(data=st.data())
    def read_head(self, data: st.DataObject) -> None:
        if self.commits:
            data.draw(st.sampled_from(self.commits)).read = self.store._read_head()

    @rule(data=st.data())
    def swap_head(self, data: st.DataObject) -> None:
        ready = [c for c in self.commits if c.read is not None]
        if not ready:
            return
        commit = data.draw(st.sampled_from(ready))
        try:
            new = decide_commit(commit.read.head, commit.key)
        except (StaleExecution, OutOfOrder, NotStarted):
            self.commits.remove(commit)  # refused: its files stay, never the latest
            return
        if self.store._swap(commit.read, new, commit.saved):
            self.commits.remove(commit)
            assert commit.key.epoch >= self.highest_started, "committed after a newer start"
        else:
            commit.read = None

    @invariant()
    def latest_never_goes_back_and_loads_whole(self) -> None:
        latest = self.store.latest()
        if latest is None:
            assert self.seen is None
            return
        key = SaveKey(latest.epoch, latest.step)
        assert self.seen is None or key >= self.seen
        assert self.store.load(latest) == state(key)
        self.seen = key


def test_every_interleaving_keeps_the_order(s3_endpoint: str) -> None:
    Interleavings.endpoint = s3_endpoint
    run_state_machine_as_test(
        Interleavings, settings=settings(max_examples=25, stateful_step_count=25)
    )
