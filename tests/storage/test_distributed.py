"""PyTorch Distributed Checkpoint through the fenced stores (checkpoints/dispatch_checkpoints/
distributed.py): dcp.save writes under the execution's epoch and commits through the store's
compare-and-swap, two ranks (gloo on loopback) each write their shards and the coordinator
commits only once both did, dcp.load resumes from latest(), and a stale execution's dcp.save
is refused before it writes and at its commit.

In the storage suite, which runs last: torch is installed in the background by scripts/setup
(tests/cluster/extras.py), so it is imported only once the `torch_installed` fixture waited."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from dataclasses import dataclass
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import pytest
from dispatch_checkpoints import Checkpoint, Execution, FilesystemStore, StaleExecution
from dispatch_checkpoints.s3 import S3Checkpoint, S3Store

from tests.cluster.process import LOOPBACK, free_ports
from tests.cluster.wait import wait_until
from tests.storage.conftest import client_for

pytestmark = [pytest.mark.storage, pytest.mark.usefixtures("torch_installed")]
OLDER = Execution(3_000_007_000_001, "job.7.0.1.0")
NEWER = Execution(3_000_007_000_002, "job.7.0.2.0")
WORLD = 2
RANK_TIMEOUT = 120.0


def model_state(step: int, *, rank: int = 0) -> dict[str, Any]:
    """A small state dict whose values tell the step and rank they were saved at."""
    import torch

    return {
        f"rank{rank}.weight": torch.full((64, 64), float(step * 10 + rank)),
        f"rank{rank}.step": step,
    }


def empty_state(*, rank: int = 0) -> dict[str, Any]:
    import torch

    return {f"rank{rank}.weight": torch.zeros(64, 64), f"rank{rank}.step": -1}


@dataclass(frozen=True, slots=True)
class Place:
    """Where a test's store is, to open it in any process: a directory, or a bucket prefix."""

    root: Path | None = None
    endpoint: str = ""
    bucket: str = ""
    prefix: str = ""

    def open(self, heads: Counter[str] | None = None) -> FilesystemStore | S3Store:
        """The store; on S3, each request its client sends for the head record is counted in
        `heads` by method (the fencing's requests: the rest are the save's own files)."""
        if self.root is not None:
            return FilesystemStore(self.root)
        s3 = client_for(self.endpoint)
        if heads is not None:

            def count(request: Any, **_: Any) -> None:
                if str(request.url).split("?")[0].endswith("/HEAD"):
                    heads.update([request.method])

            s3.meta.events.register("before-send.s3.*", count)
        return S3Store(s3, self.bucket, self.prefix, probe=False)

    def staged(self, execution: Execution, step: int, name: str) -> bool:
        """Whether the file `name` of the execution's save at `step` is written, uncommitted."""
        store = self.open()
        if isinstance(store, FilesystemStore):
            return (store.staging(execution, step) / name).exists()
        return store.exists(f"{store.staging(execution, step)}/{name}")


@pytest.fixture(params=["filesystem", "s3"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    """The test's store: a directory, or a fresh prefix of the run's SeaweedFS bucket."""
    if request.param == "filesystem":
        return Place(root=tmp_path)
    endpoint = request.getfixturevalue("s3_endpoint")
    return Place(
        endpoint=endpoint,
        bucket=request.getfixturevalue("bucket"),
        prefix=request.getfixturevalue("prefix"),
    )


class StartsNewer:
    """A value whose serialization, while dcp.save writes it, starts the newer execution."""

    def __init__(self, place: Place) -> None:
        self.place = place

    def __reduce__(self) -> tuple[Any, ...]:
        self.place.open().start(NEWER)
        return (int, (0,))


class Last:
    """Rank 1's value, serialized once rank 0's shards are written: rank 1 finishes last, and
    then (`overtake`) the newer execution starts."""

    def __init__(self, place: Place, *, overtake: bool) -> None:
        self.place, self.overtake = place, overtake

    def __reduce__(self) -> tuple[Any, ...]:
        wait_until(
            lambda: self.place.staged(OLDER, 20, "__0_0.distcp") or None,
            what="rank 0's shards",
            timeout=RANK_TIMEOUT,
        )
        if self.overtake:
            self.place.open().start(NEWER)
        return (int, (0,))


def test_dcp_save_commits_under_the_epoch_and_dcp_load_resumes_from_latest(place: Place) -> None:
    import torch
    from dispatch_checkpoints.distributed import reader, save
    from torch.distributed.checkpoint.state_dict_loader import load

    store = place.open()
    assert store.start(OLDER) is None
    saved = save(model_state(10), store, OLDER, 10)
    assert saved is not None
    assert (saved.epoch, saved.step) == (OLDER.epoch, 10)
    assert store.latest() == saved
    save(model_state(20), store, OLDER, 20)

    newer = place.open()
    resumed = newer.start(NEWER)
    assert resumed is not None
    assert (resumed.epoch, resumed.step) == (OLDER.epoch, 20)
    loaded = empty_state()
    load(loaded, storage_reader=reader(newer, resumed))
    assert torch.equal(loaded["rank0.weight"], model_state(20)["rank0.weight"])
    assert loaded["rank0.step"] == 20


def test_on_a_filesystem_a_dcp_save_is_one_directory_with_dcps_metadata(tmp_path: Path) -> None:
    from dispatch_checkpoints.distributed import save
    from torch.distributed.checkpoint.state_dict_loader import load

    store = FilesystemStore(tmp_path)
    store.start(OLDER)
    saved = save(model_state(10), store, OLDER, 10)
    assert isinstance(saved, Checkpoint)
    assert sorted(p.name for p in saved.path.iterdir()) == [".metadata", "__0_0.distcp"]
    assert [p.name for p in (tmp_path / "saves").iterdir()] == [saved.path.name]  # no partial
    loaded = empty_state()
    load(loaded, checkpoint_id=saved.path)  # DCP's own reader reads it as it is
    assert loaded["rank0.step"] == 10


def test_a_stale_executions_dcp_save_is_refused_before_it_writes(place: Place) -> None:
    from dispatch_checkpoints.distributed import save

    store = place.open()
    store.start(OLDER)
    kept = save(model_state(10), store, OLDER, 10)
    place.open().start(NEWER)
    with pytest.raises(StaleExecution):
        save(model_state(20), store, OLDER, 20)
    assert store.latest() == kept
    if isinstance(store, FilesystemStore):
        assert not store.staging(OLDER, 20).exists()  # not even its directory was made


def test_a_stale_executions_dcp_save_overtaken_while_writing_is_refused_at_commit(
    place: Place,
) -> None:
    from dispatch_checkpoints.distributed import save

    store = place.open()
    store.start(OLDER)
    kept = save(model_state(10), store, OLDER, 10)
    overtaken = {**model_state(20), "newer": StartsNewer(place)}
    with pytest.raises(StaleExecution):
        save(overtaken, store, OLDER, 20)
    assert store.latest() == kept
    if isinstance(store, FilesystemStore):
        assert store.saved(OLDER.epoch, 20).path.is_dir()  # written whole, never the latest
        assert store.saved(OLDER.epoch, 20).path in store.prune()


def _rank(rank: int, port: int, place: Place, overtake: bool, results: Queue[Any]) -> None:
    """One rank of OLDER: a process group over gloo on loopback, then one fenced dcp.save."""
    import torch.distributed as dist
    from dispatch_checkpoints.distributed import save

    dist.init_process_group(
        "gloo", init_method=f"tcp://{LOOPBACK}:{port}", rank=rank, world_size=WORLD
    )
    try:
        state = model_state(20, rank=rank)
        if rank == 1:  # the last to finish writing: the coordinator must wait for it
            state["last"] = Last(place, overtake=overtake)
        heads: Counter[str] = Counter()
        try:
            saved = save(state, place.open(heads), OLDER, 20)
        except StaleExecution as e:
            results.put((rank, f"stale: {e}", heads))
        else:
            results.put((rank, None if saved is None else (saved.epoch, saved.step), heads))
    finally:
        dist.destroy_process_group()


def run_ranks(place: Place, *, overtake: bool) -> tuple[dict[int, Any], Counter[str]]:
    """Run WORLD ranks of OLDER saving step 20 together; what each told, and the requests for
    the head record all of them sent (on S3), by method."""
    # Forked from this process, which has imported torch: a spawned rank imports it again,
    # half a minute on a busy machine.
    context = multiprocessing.get_context("fork")
    results: Queue[Any] = context.Queue()
    (port,) = free_ports(1)
    ranks = [
        context.Process(target=_rank, args=(rank, port, place, overtake, results))
        for rank in range(WORLD)
    ]
    for process in ranks:
        process.start()
    for process in ranks:  # a rank that fails ends the other's collectives: neither hangs
        process.join(RANK_TIMEOUT)
    assert [process.exitcode for process in ranks] == [0] * WORLD
    told, heads = {}, Counter[str]()
    for _ in ranks:
        rank, result, sent = results.get(timeout=RANK_TIMEOUT)
        told[rank] = result
        heads.update(sent)
    return told, heads


def test_two_ranks_write_their_shards_and_the_coordinator_commits_after_both(
    place: Place,
) -> None:
    import torch
    from dispatch_checkpoints.distributed import reader
    from torch.distributed.checkpoint.state_dict_loader import load

    place.open().start(OLDER)
    told, heads = run_ranks(place, overtake=False)
    store = place.open()
    latest = store.latest()
    assert latest is not None
    assert (latest.epoch, latest.step) == (OLDER.epoch, 20)
    assert told == {0: (OLDER.epoch, 20), 1: None}  # the coordinator committed
    if isinstance(latest, S3Checkpoint):
        assert sorted(latest.files) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
        # The fencing at two ranks as at one: the coordinator's read while it plans and its
        # swap on that read's ETag; the other rank never reads the head.
        assert heads == Counter(GET=1, PUT=1)
    loaded = {**empty_state(rank=0), **empty_state(rank=1)}
    load(loaded, storage_reader=reader(store, latest))
    for rank in range(WORLD):
        weight = f"rank{rank}.weight"
        assert torch.equal(loaded[weight], model_state(20, rank=rank)[weight])


def test_two_ranks_overtaken_while_writing_are_both_refused_at_commit(place: Place) -> None:
    store = place.open()
    store.start(OLDER)
    told, _ = run_ranks(place, overtake=True)
    assert sorted(told) == [0, 1]
    assert all(str(message).startswith("stale: ") for message in told.values()), told
    assert store.latest() is None
