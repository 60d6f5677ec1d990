"""PyTorch Distributed Checkpoint (DCP) through a fenced store (the `torch` extra).

DCP's own writers commit a save by renaming `.metadata.tmp` to `.metadata`, overwrite by
default, and order nothing: a stale execution's save can become the one everyone resumes
from. Here DCP's FileSystemWriter writes where the store says, and the store commits:

- every rank's writer is pointed at where the store stages this execution's save at this step
  (`staging`: the same on every rank, so no rank tells another); on S3 through an S3 client
  in place of the local filesystem;
- the fence is checked before any rank writes (StaleExecution, before anything is written): on
  a filesystem by every rank as it plans; on S3 by the coordinator alone, in the global plan
  DCP makes before any rank writes (a refusal there reaches every rank), so a save costs one
  read of the head whatever the number of ranks;
- DCP calls finish() on the coordinator only once every rank's shards are written; finish()
  writes `.metadata` as DCP does, then commits through the store's compare-and-swap, which
  refuses a stale execution at the commit too. On S3 the swap is conditioned on the plan's
  read of the head (its ETag): the save's requests are DCP's own and two more, that read and
  the swap, unless another writer changed the head meanwhile.

DCP tells every rank of a failure on any rank as one CheckpointException; `save` raises the
store's refusal inside it, so a stale process can stop on the exception it expects.

    resumed = store.start(execution)
    if resumed is not None:
        dcp.load(state_dict, storage_reader=reader(store, resumed))
    ...
    save(state_dict, store, execution, step)
"""

from __future__ import annotations

import io
import os
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.checkpoint.storage import WriteResult

from dispatch_checkpoints.execution import Execution
from dispatch_checkpoints.filesystem import Checkpoint, FilesystemStore
from dispatch_checkpoints.ordering import NotStarted, OutOfOrder, StaleExecution
from dispatch_checkpoints.s3 import S3Checkpoint, S3Store, Staged

# The stores' refusals, raised as themselves out of DCP's CheckpointException.
REFUSALS: tuple[type[Exception], ...] = (StaleExecution, NotStarted, OutOfOrder, FileExistsError)
METADATA = ".metadata"  # the file DCP's FileSystemWriter.finish() writes last


class FencedWriter(FileSystemWriter):
    """DCP's FileSystemWriter, writing where `store` stages a save and committing through it.

    Give one to `dcp.save(..., storage_writer=...)` on every rank, each made with the same
    execution and step; leave `checkpoint_id` out (the store chooses the location).
    """

    def __init__(
        self,
        store: FilesystemStore | S3Store,
        execution: Execution,
        step: int,
        **options: Any,
    ) -> None:
        self.store, self.execution, self.step = store, execution, step
        self.committed: Checkpoint | S3Checkpoint | None = None
        self.staged: Staged | None = None  # the coordinator's check, on S3
        # Not staged here: a rank refused before dcp.save would leave the others waiting in
        # its collectives; refused in prepare_local_plan, every rank is told.
        staging = store.staging(execution, step)
        if isinstance(store, S3Store):
            # A PUT is durable once answered: there is no file to fsync.
            super().__init__(staging, sync_files=False, **options)
            self.fs = S3Files(store)
            self.path = self.fs.init_path(staging)
        else:
            super().__init__(staging, **options)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """On a filesystem, refuse on every rank before any rank writes.

        Once a newer execution has started; the staging directory is made on each rank's mount.
        """
        if isinstance(self.store, FilesystemStore):
            self.store.stage(self.execution, self.step)
        planned: SavePlan = super().prepare_local_plan(plan)
        return planned

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """On S3, refuse on the coordinator alone, before any rank writes (DCP tells them).

        Once a newer execution has started; the head as read is kept for the commit to swap on.
        """
        if isinstance(self.store, S3Store):
            self.staged = self.store.stage(self.execution, self.step)
        planned: list[SavePlan] = super().prepare_global_plan(plans)
        return planned

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Write DCP's metadata, then commit the save: only the coordinator, once all wrote."""
        super().finish(metadata, results)
        if isinstance(self.store, S3Store):
            files = {METADATA, *(r.storage_data.relative_path for rank in results for r in rank)}
            self.committed = self.store.commit(self.execution, self.step, files, self.staged)
        else:
            self.committed = self.store.commit(self.execution, self.step)


def reader(
    store: FilesystemStore | S3Store, checkpoint: Checkpoint | S3Checkpoint
) -> FileSystemReader:
    """A StorageReader of a committed save, for `dcp.load(..., storage_reader=...)`."""
    if isinstance(store, S3Store) and isinstance(checkpoint, S3Checkpoint):
        location = store.location(checkpoint)
        files = FileSystemReader(location)
        files.fs = S3Files(store)
        files.path = files.fs.init_path(location)
        return files
    if isinstance(store, FilesystemStore) and isinstance(checkpoint, Checkpoint):
        return FileSystemReader(checkpoint.path)
    raise TypeError(f"{checkpoint!r} is not a save of {store!r}")


def save(
    state_dict: dict[str, Any],
    store: FilesystemStore | S3Store,
    execution: Execution,
    step: int,
    **options: Any,
) -> Checkpoint | S3Checkpoint | None:
    """`dcp.save` of `state_dict` as this execution's save at `step`, committed by `store`.

    Call it on every rank (in a process group of the ranks, or in none for one process).
    Returns the committed save on the coordinator, None on the other ranks; raises
    StaleExecution once a newer execution has started, before anything is written or at the
    commit (the save is then never the latest).
    """
    writer = FencedWriter(store, execution, step, **options)
    try:
        dcp_save(state_dict, storage_writer=writer)
    except CheckpointException as e:
        for failure, _ in e.failures.values():
            if isinstance(failure, REFUSALS):
                raise failure from e
        raise
    return writer.committed


class S3Files(FileSystem):
    """What DCP's filesystem writer and reader do to files, done to an S3Store's objects.

    DCP's local FileSystem with every method replaced (its writer and reader are typed to
    hold one); `ls`, which neither calls, is refused.
    """

    def __init__(self, store: S3Store) -> None:
        self.store = store

    @contextmanager
    def create_stream(
        self, path: str | os.PathLike[str], mode: str
    ) -> Generator[io.IOBase, None, None]:
        """A stream of one object: written by one PUT when closed, or read by one GET."""
        if "w" in mode:
            written = _Kept()
            yield written
            self.store.put(str(path), written.kept if written.closed else written.getvalue())
        else:
            yield io.BytesIO(self.store.get(str(path)))

    def concat_path(self, path: str | os.PathLike[str], suffix: str) -> str:
        """The key of `suffix` under the key prefix `path`."""
        return f"{path}/{suffix}"

    def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
        """Copy the object to its new key and remove it."""
        # Only `.metadata.tmp` to `.metadata`, in a staging no other writer uses: the store's
        # commit, not this rename, makes the save visible.
        self.store.put(str(new_path), self.store.get(str(path)))
        self.store.delete(str(path))

    def init_path(self, path: str | os.PathLike[str]) -> str:
        """A key prefix, as given."""
        return str(path)

    def mkdir(self, path: str | os.PathLike[str]) -> None:
        """Nothing: S3 has no directories."""

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Never: DCP is given this only by FencedWriter and reader, never by checkpoint_id."""
        return False

    def exists(self, path: str | os.PathLike[str]) -> bool:
        """Whether the object is there."""
        return self.store.exists(str(path))

    def rm_file(self, path: str | os.PathLike[str]) -> None:
        """Remove the object."""
        self.store.delete(str(path))

    def ls(self, path: str | os.PathLike[str]) -> list[str]:
        """Refused: a save's files are the ones its commit names."""
        raise NotImplementedError(f"listing {path}: a save's files are named by its commit")


class _Kept(io.BytesIO):
    """A buffer whose bytes outlive close(): DCP's writer closes the streams it writes."""

    kept = b""

    def close(self) -> None:
        """Keep the bytes written, then close."""
        if not self.closed:
            self.kept = self.getvalue()
        super().close()


__all__ = ["FencedWriter", "S3Files", "reader", "save"]
