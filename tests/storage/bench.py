"""`python -m tests.storage.bench`: what fencing costs a save and a load, on a filesystem and on S3
(issue 40, part 7; docs/checkpoints.md has the figures).

Each row puts the checkpoint library (fenced) beside the same work without it (unfenced), on
the same bytes, round by round in alternating order so the machine's drift falls on both:

- plain: `FilesystemStore.save` against the same files written and synced into a directory
  renamed into place (the store's own writes, less its head record); `S3Store.save` against a
  PUT of each file. Loads: `store.load(store.latest())` against reading the files back.
- DCP: `dispatch_checkpoints.distributed.save` against `dcp.save` through DCP's own
  FileSystemWriter, on a directory, and on S3 through the same object mapping the library
  gives it (S3Files: a file is an object, a rename a GET, a PUT and a DELETE), unfenced. Loads:
  `dcp.load` through `reader(store, store.latest())` against DCP's FileSystemReader.

One process, one rank. Latency per save and load (p50 and the best round; throughput from the
p50), the fenced side's over the unfenced (of the p50s, and each round's: the two sides of a
round ran one after the other, so drift spares their ratio), and on S3 the requests each side
sends, counted on the client (every HTTP request boto3 sends; it retries none). A warm-up
round of each is left out. SeaweedFS is started on loopback for the run.

    python -m tests.storage.bench                     # 16 MiB in 8 tensors, 15 rounds
    python -m tests.storage.bench --mib 0.0625        # 64 KiB: what a save costs besides its bytes

This is a benchmark, not a test: nothing here fails on a figure.
"""

from __future__ import annotations

import argparse
import random
import secrets
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from dispatch_checkpoints import Execution, FilesystemStore

# The store's own durable writes, so the unfenced side differs from it by the fencing alone.
from dispatch_checkpoints.filesystem import _sync_directory, _write_synced
from dispatch_checkpoints.s3 import S3Store

from tests.cluster import extras
from tests.storage.conftest import BUCKET, client_for, serving
from tests.support.machine import machine_line

EXECUTION: Final = Execution(3_000_007_000_001, "bench.7.0.1.0")
METHODS: Final = ("GET", "PUT", "HEAD", "DELETE")


def say(line: str) -> None:
    """A line of the figures, on stdout: the table can be piped to a file."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@dataclass(slots=True)
class Side:
    """One side of a row: each round's seconds, and the requests of every round together."""

    seconds: list[float] = field(default_factory=list)
    sent: Counter[str] = field(default_factory=Counter)

    def requests(self) -> str:
        """The requests of one round, by method: '7: GET 1, PUT 3, HEAD 2, DELETE 1'."""
        rounds = len(self.seconds)
        if not self.sent:
            return "-"
        each = {m: self.sent[m] / rounds for m in (*METHODS, *sorted(set(self.sent) - {*METHODS}))}
        parts = ", ".join(f"{m} {_number(n)}" for m, n in each.items() if n)
        return f"{_number(sum(each.values()))}: {parts}"


@dataclass(frozen=True, slots=True)
class Row:
    """A save or a load, unfenced and fenced."""

    what: str
    store: str
    size: int  # bytes saved or loaded each round
    unfenced: Side
    fenced: Side

    def line(self) -> str:
        """The row as a line of the docs' table."""
        cells = [self.what, self.store]
        for side in (self.unfenced, self.fenced):
            p50, best = statistics.median(side.seconds), min(side.seconds)
            cells.append(f"{p50 * 1e3:,.1f} ({best * 1e3:,.1f}), {self.size / p50 / 2**20:,.0f}")
        ratio = statistics.median(self.fenced.seconds) / statistics.median(self.unfenced.seconds)
        rounds = sorted(
            f / u for f, u in zip(self.fenced.seconds, self.unfenced.seconds, strict=True)
        )
        spread = f"{rounds[0]:.2f} / {statistics.median(rounds):.2f} / {rounds[-1]:.2f}"
        cells += [f"{ratio:.3f}; {spread}", self.unfenced.requests(), self.fenced.requests()]
        return "| " + " | ".join(cells) + " |"


HEADER: Final = (
    "| | store | unfenced: p50 (best) ms, MiB/s | fenced: p50 (best) ms, MiB/s "
    "| fenced / unfenced: of the p50s; each round's min / median / max "
    "| requests unfenced | requests fenced |\n"
    "|---|---|---|---|---|---|---|"
)


def bench(endpoint: str, work: Path, *, size: int, tensors: int, rounds: int) -> list[Row]:
    """Every row, on a directory under `work` and a fresh prefix of BUCKET at `endpoint`."""
    sent: Counter[str] = Counter()
    s3 = client_for(endpoint)
    s3.meta.events.register("before-send.s3.*", lambda request, **_: sent.update([request.method]))
    prefix = f"bench-{secrets.token_hex(4)}"
    return [
        *plain(s3, sent, work, prefix, size=size, files=tensors, rounds=rounds),
        *distributed(s3, sent, work, prefix, size=size, tensors=tensors, rounds=rounds),
    ]


def plain(
    s3: Any, sent: Counter[str], work: Path, prefix: str, *, size: int, files: int, rounds: int
) -> list[Row]:
    """Plain saves and loads of `files` files of `size` bytes in all."""
    data = {f"shard-{i}": random.Random(i).randbytes(size // files) for i in range(files)}
    unfenced_root, store = work / "plain-unfenced", FilesystemStore(work / "plain-fenced")
    store.start(EXECUTION)

    def written(step: int) -> None:
        partial = unfenced_root / f".partial-{step}"
        partial.mkdir(parents=True)
        for name, body in data.items():
            _write_synced(partial / name, body)
        _sync_directory(partial)
        partial.rename(unfenced_root / f"s{step}")
        _sync_directory(unfenced_root)

    # Every file kept until the last is read, as load() does: bytes let go of one by one are
    # read into memory already mapped, which alone made this side several times faster.
    def read(step: int) -> None:
        files = {name: (unfenced_root / f"s{step}" / name).read_bytes() for name in data}
        assert len(files) == len(data)

    def fenced_read(_: int) -> None:
        latest = store.latest()
        assert latest is not None
        store.load(latest)

    rows = [
        Row(
            "plain save",
            "filesystem",
            size,
            *paired(rounds, Counter(), written, save_to(store, data)),
        ),
        Row(
            "plain load",
            "filesystem",
            size,
            *paired(rounds, Counter(), read, fenced_read, last=True),
        ),
    ]
    objects = S3Store(s3, BUCKET, f"{prefix}/plain-fenced")  # probed once, before any round
    objects.start(EXECUTION)

    def put(step: int) -> None:
        for name, body in data.items():
            s3.put_object(Bucket=BUCKET, Key=f"{prefix}/plain-unfenced/s{step}/{name}", Body=body)

    def got(step: int) -> None:
        keys = {name: f"{prefix}/plain-unfenced/s{step}/{name}" for name in data}
        files = {
            name: s3.get_object(Bucket=BUCKET, Key=k)["Body"].read() for name, k in keys.items()
        }
        assert len(files) == len(data)

    def fenced_got(_: int) -> None:
        latest = objects.latest()
        assert latest is not None
        objects.load(latest)

    return [
        *rows,
        Row("plain save", "S3", size, *paired(rounds, sent, put, save_to(objects, data))),
        Row("plain load", "S3", size, *paired(rounds, sent, got, fenced_got, last=True)),
    ]


def save_to(store: FilesystemStore | S3Store, data: Mapping[str, bytes]) -> Callable[[int], None]:
    def save(step: int) -> None:
        store.save(EXECUTION, step, data)

    return save


def distributed(
    s3: Any, sent: Counter[str], work: Path, prefix: str, *, size: int, tensors: int, rounds: int
) -> list[Row]:
    """DCP saves and loads of a state dict of `tensors` float32 tensors, `size` bytes in all."""
    import torch
    from dispatch_checkpoints.distributed import S3Files, reader, save
    from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    # One process, no process group: DCP says it assumes so, every call.
    warnings.filterwarnings("ignore", message=".*assuming the intent is to (save|load)")
    generator = torch.Generator().manual_seed(0)
    count = size // 4 // tensors
    state = {f"layer{i}.weight": torch.randn(count, generator=generator) for i in range(tensors)}
    target = {name: torch.empty_like(tensor) for name, tensor in state.items()}
    saved = sum(t.numel() * t.element_size() for t in state.values())

    def on_s3(writer_or_reader: Any, objects: S3Store, location: str) -> Any:
        """DCP's writer or reader through the object mapping the library gives it."""
        writer_or_reader.fs = S3Files(objects)
        writer_or_reader.path = writer_or_reader.fs.init_path(location)
        return writer_or_reader

    def fenced_save(store: FilesystemStore | S3Store) -> Callable[[int], None]:
        def one(step: int) -> None:
            save(state, store, EXECUTION, step)

        return one

    def fenced_load(store: FilesystemStore | S3Store) -> Callable[[int], None]:
        def one(_: int) -> None:
            latest = store.latest()
            assert latest is not None
            dcp_load(target, storage_reader=reader(store, latest))

        return one

    directory, store = work / "dcp-unfenced", FilesystemStore(work / "dcp-fenced")
    store.start(EXECUTION)

    def written(step: int) -> None:
        dcp_save(state, storage_writer=FileSystemWriter(directory / f"s{step}"))

    def read(step: int) -> None:
        dcp_load(target, storage_reader=FileSystemReader(directory / f"s{step}"))

    rows = [
        Row(
            "DCP save", "filesystem", saved, *paired(rounds, Counter(), written, fenced_save(store))
        ),
        Row(
            "DCP load",
            "filesystem",
            saved,
            *paired(rounds, Counter(), read, fenced_load(store), last=True),
        ),
    ]
    objects = S3Store(s3, BUCKET, f"{prefix}/dcp-unfenced", probe=False)  # its put/get alone
    fenced = S3Store(s3, BUCKET, f"{prefix}/dcp-fenced")
    fenced.start(EXECUTION)

    def put(step: int) -> None:
        location = f"{prefix}/dcp-unfenced/s{step}"
        writer = FileSystemWriter(location, sync_files=False)  # as FencedWriter's on S3
        dcp_save(state, storage_writer=on_s3(writer, objects, location))

    def got(step: int) -> None:
        location = f"{prefix}/dcp-unfenced/s{step}"
        dcp_load(target, storage_reader=on_s3(FileSystemReader(location), objects, location))

    return [
        *rows,
        Row("DCP save", "S3", saved, *paired(rounds, sent, put, fenced_save(fenced))),
        Row("DCP load", "S3", saved, *paired(rounds, sent, got, fenced_load(fenced), last=True)),
    ]


def paired(
    rounds: int,
    sent: Counter[str],
    unfenced: Callable[[int], None],
    fenced: Callable[[int], None],
    *,
    last: bool = False,
) -> tuple[Side, Side]:
    """Both sides, `rounds` times after a warm-up, in alternating order, each given the step.

    Saves are given steps 1, 2, ... (each saved anew); loads (`last`) the step saved last.
    """
    sides = (Side(), Side())
    for turn in range(rounds + 1):
        step = rounds + 1 if last else turn + 1
        for which in (0, 1) if turn % 2 else (1, 0):
            sent.clear()
            started = time.perf_counter()
            (unfenced, fenced)[which](step)
            seconds = time.perf_counter() - started
            if turn:  # the first turn warms both up
                sides[which].seconds.append(seconds)
                sides[which].sent.update(sent)
    return sides


def _number(n: float) -> str:
    return f"{n:g}" if n == int(n) else f"{n:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, default=16.0, help="MiB a save writes (16)")
    parser.add_argument("--tensors", type=int, default=8, help="tensors, or plain files (8)")
    parser.add_argument("--rounds", type=int, default=15, help="rounds after the warm-up (15)")
    args = parser.parse_args()
    extras.wait_for_torch()
    say(machine_line())
    with (
        tempfile.TemporaryDirectory(prefix="bench-checkpoints-") as work,
        serving(Path(work) / "server") as endpoint,
    ):
        rows = bench(
            endpoint,
            Path(work),
            size=int(args.mib * 2**20),
            tensors=args.tensors,
            rounds=args.rounds,
        )
    say(HEADER)
    for row in rows:
        say(row.line())


if __name__ == "__main__":
    main()
