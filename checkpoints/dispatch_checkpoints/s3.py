"""Checkpoints in an S3 bucket, fenced by conditional writes (the `s3` extra: boto3).

    PREFIX/HEAD                                   the head record, replaced only by If-Match
    PREFIX/epochs/<epoch>                         created once (If-None-Match: *) by each start
    PREFIX/saves/e<epoch>-s<step>/<token>/<file>  a save's files, under a name of its own

A save's files go under a token no other writer uses (random; for a save staged by stage(),
as DCP's ranks do, its attempt's hash), so no object of another's is overwritten; the
save becomes visible by the head record's compare-and-swap (PutObject with If-Match on the
ETag read), which names its token and files: the head record is the commit object. The check
before writing reads the head; the commit swaps it on that read's ETag, so a save costs its
files' PUTs and two requests more when nobody else wrote the head meanwhile (a GET and a PUT).
A staged save (stage(), then commit() given what stage() returned) costs the same two.

Some stores accept the conditional headers and ignore them. `S3Store` probes its bucket once
(two create-only PUTs of one key: the second must be refused with 412, and a PUT with a wrong
If-Match too) and refuses to run on a store that fails (UnsafeStore).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from dispatch_checkpoints.execution import Execution
from dispatch_checkpoints.filesystem import RepeatedEpoch
from dispatch_checkpoints.ordering import (
    Head,
    SaveKey,
    check_saving,
    decide_commit,
    decide_start,
)

EPOCH_DIGITS: Final = 20
STEP_DIGITS: Final = 12
PRECONDITION_FAILED: Final = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


class UnsafeStore(RuntimeError):
    """The store ignores conditional writes: fencing cannot hold on it."""


@dataclass(frozen=True, slots=True, order=True)
class S3Checkpoint:
    """One committed save: ordered by epoch, then step; where its files are."""

    epoch: int
    step: int
    token: str
    files: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Read:
    """The head record as read, with the ETag a swap is conditioned on (None: absent)."""

    head: Head
    etag: str | None
    saved: S3Checkpoint | None


@dataclass(frozen=True, slots=True)
class Staged:
    """A save staged by stage(): where its files go, and the head as its check read it.

    Its commit swaps on that read (one read for both, as save() does).
    """

    prefix: str
    read: _Read


class S3Store:
    """Saves ordered by (epoch, step) under one bucket prefix, fenced by the head record."""

    def __init__(self, client: Any, bucket: str, prefix: str = "", *, probe: bool = True) -> None:
        """A store in `bucket` under `prefix`, through a boto3 S3 client.

        With `probe`, checks once that the store honours If-None-Match and If-Match
        (UnsafeStore if not).
        """
        self._s3, self._bucket = client, bucket
        self._prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        if probe:
            self.probe()

    def probe(self) -> None:
        """Refuse a store that accepts conditional writes and ignores them."""
        key = f"{self._prefix}probes/{secrets.token_hex(8)}"
        first = self._put(key, b"1", IfNoneMatch="*")
        if first is None:
            raise UnsafeStore(f"s3://{self._bucket}/{key}: a create-only PUT of a new key failed")
        again = self._put(key, b"2", IfNoneMatch="*")
        wrong = self._put(key, b"3", IfMatch='"0123456789abcdef0123456789abcdef"')
        self._s3.delete_object(Bucket=self._bucket, Key=key)
        if again is not None or wrong is not None:
            raise UnsafeStore(
                f"the store at s3://{self._bucket} ignores "
                + ("If-None-Match" if again is not None else "If-Match")
                + ": a save could overwrite another, so fencing cannot hold; use a store that "
                "honours conditional writes (AWS S3 does)"
            )

    def start(self, execution: Execution) -> S3Checkpoint | None:
        """Record this execution's start and return the save to resume from (None: none yet).

        Raises StaleExecution if a newer execution has started, RepeatedEpoch if another
        attempt started with this epoch.
        """
        self._record_epoch(execution)
        while True:
            read = self._read_head()
            new = decide_start(read.head, execution.epoch)
            if new is None or self._swap(read, new, read.saved):
                return read.saved

    def save(self, execution: Execution, step: int, files: Mapping[str, bytes]) -> S3Checkpoint:
        """Write `files` as this execution's save at `step` and make it the latest.

        Raises StaleExecution before writing, or at the commit, once a newer execution has
        started; OutOfOrder if the step is not above the latest save.
        """
        read = self._read_head()
        check_saving(read.head, execution.epoch)
        key = SaveKey(execution.epoch, step)
        decide_commit(read.head, key)  # out of order: refused before anything is written
        token = secrets.token_hex(8)
        for name, data in files.items():
            if "/" in name or name in ("", ".", ".."):
                raise ValueError(f"a save's file names are plain names, not {name!r}")
            self._s3.put_object(Bucket=self._bucket, Key=self._file(key, token, name), Body=data)
        return self._commit(read, S3Checkpoint(key.epoch, key.step, token, tuple(sorted(files))))

    def stage(self, execution: Execution, step: int) -> Staged:
        """Check that this execution may save at `step`; where it is written before its commit.

        The key prefix is staging()'s, the same for every caller that names the same execution
        and step (the ranks of one save agree on it without talking). Give the result to
        commit(), which then swaps on this check's read of the head.

        Raises StaleExecution once a newer execution has started, NotStarted before this one
        did, OutOfOrder if the step is not above the latest save.
        """
        read = self._read_head()
        check_saving(read.head, execution.epoch)
        decide_commit(read.head, SaveKey(execution.epoch, step))
        return Staged(self.staging(execution, step), read)

    def staging(self, execution: Execution, step: int) -> str:
        """Where stage() puts this execution's save at `step`: nothing is checked."""
        return self._file(SaveKey(execution.epoch, step), _token(execution), "").removesuffix("/")

    def commit(
        self, execution: Execution, step: int, files: Iterable[str], staged: Staged | None = None
    ) -> S3Checkpoint:
        """Make the staged save at `step`, of the named files under staging(), the latest.

        With `staged` (stage()'s answer), the head is swapped on the ETag that check read, and
        read again only if another writer changed it since; without, it is read first.
        Raises StaleExecution once a newer execution has started (the save is never the
        latest), OutOfOrder if the step is no longer above the latest save.
        """
        saved = S3Checkpoint(execution.epoch, step, _token(execution), tuple(sorted(files)))
        return self._commit(self._read_head() if staged is None else staged.read, saved)

    def location(self, checkpoint: S3Checkpoint) -> str:
        """The key prefix a committed save's files are under."""
        key = SaveKey(checkpoint.epoch, checkpoint.step)
        return self._file(key, checkpoint.token, "").removesuffix("/")

    def latest(self) -> S3Checkpoint | None:
        """The save to resume from: the latest committed one."""
        return self._read_head().saved

    def load(self, checkpoint: S3Checkpoint) -> dict[str, bytes]:
        """The files of a save."""
        key = SaveKey(checkpoint.epoch, checkpoint.step)
        return {
            name: self._s3.get_object(
                Bucket=self._bucket, Key=self._file(key, checkpoint.token, name)
            )["Body"].read()
            for name in checkpoint.files
        }

    # --- a staged save's objects, for DCP's writer and reader (distributed.py) -----------

    def put(self, key: str, data: bytes) -> None:
        """Write an object of a staged save (under staging()), which no other writer names."""
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=data)

    def get(self, key: str) -> bytes:
        """An object of a save, whole."""
        body: bytes = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        return body

    def exists(self, key: str) -> bool:
        """Whether an object of a save is there."""
        try:
            self._s3.head_object(Bucket=self._bucket, Key=key)
        except self._s3.exceptions.ClientError as e:
            if str(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")) == "404":
                return False
            raise
        return True

    def delete(self, key: str) -> None:
        """Remove an object of a staged save."""
        self._s3.delete_object(Bucket=self._bucket, Key=key)

    # --- the head record -----------------------------------------------------------------

    def _commit(self, read: _Read, saved: S3Checkpoint) -> S3Checkpoint:
        """Swap `saved` in as the latest save, from the head as `read`.

        Reads the head again until a swap goes through or the commit is refused.
        """
        key = SaveKey(saved.epoch, saved.step)
        while True:
            if self._swap(read, decide_commit(read.head, key), saved):
                return saved
            read = self._read_head()

    def _read_head(self) -> _Read:
        try:
            got = self._s3.get_object(Bucket=self._bucket, Key=f"{self._prefix}HEAD")
        except self._s3.exceptions.NoSuchKey:
            return _Read(Head(), None, None)
        record = json.loads(got["Body"].read())
        saved = record.get("saved")
        checkpoint = None
        if saved is not None:
            checkpoint = S3Checkpoint(
                int(saved["epoch"]), int(saved["step"]), str(saved["token"]), tuple(saved["files"])
            )
        latest = None if checkpoint is None else SaveKey(checkpoint.epoch, checkpoint.step)
        return _Read(Head(fence=int(record["fence"]), latest=latest), got["ETag"], checkpoint)

    def _swap(self, read: _Read, head: Head, saved: S3Checkpoint | None) -> bool:
        """Replace the head record if it is still as read: False if another writer came first."""
        record = {
            "fence": head.fence,
            "saved": None
            if saved is None
            else {
                "epoch": saved.epoch,
                "step": saved.step,
                "token": saved.token,
                "files": list(saved.files),
            },
        }
        condition = {"IfNoneMatch": "*"} if read.etag is None else {"IfMatch": read.etag}
        body = json.dumps(record, sort_keys=True).encode()
        try:
            if self._put(f"{self._prefix}HEAD", body, **condition) is not None:
                return True
        except self._s3.exceptions.ClientError:
            pass  # a 5xx: the swap may have been applied, as a retry refused with 412 may
        # Whether the head now holds this very record: a swap whose answer was lost, or that
        # the client sent again after it went through, did happen. The token makes a commit's
        # record its own; a start's is the same whoever wrote it.
        now = self._s3.get_object(Bucket=self._bucket, Key=f"{self._prefix}HEAD")
        return bool(json.dumps(json.loads(now["Body"].read()), sort_keys=True).encode() == body)

    # --- epochs and saves ----------------------------------------------------------------

    def _record_epoch(self, execution: Execution) -> None:
        key = f"{self._prefix}epochs/{execution.epoch:0{EPOCH_DIGITS}d}"
        if self._put(key, execution.attempt.encode(), IfNoneMatch="*") is not None:
            return
        recorded = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read().decode()
        if recorded != execution.attempt:
            raise RepeatedEpoch(
                f"epoch {execution.epoch} was started by attempt {recorded}, not "
                f"{execution.attempt}: two executions may not share an epoch"
            )

    def _file(self, key: SaveKey, token: str, name: str) -> str:
        save = f"e{key.epoch:0{EPOCH_DIGITS}d}-s{key.step:0{STEP_DIGITS}d}"
        return f"{self._prefix}saves/{save}/{token}/{name}"

    def _put(self, key: str, body: bytes, **condition: str) -> dict[str, Any] | None:
        """PUT once under `condition`; None when the store refused it as unmet.

        Unmet is 412, or 409 for a concurrent conditional write of the same key.
        """
        try:
            answer: dict[str, Any] = self._s3.put_object(
                Bucket=self._bucket, Key=key, Body=body, **condition
            )
        except self._s3.exceptions.ClientError as e:
            error = e.response.get("Error", {})
            status = str(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if error.get("Code") in PRECONDITION_FAILED or status in ("412", "409"):
                return None
            raise
        return answer


def _token(execution: Execution) -> str:
    """A staged save's token: its attempt's, so every rank of it names the same one."""
    return hashlib.sha256(execution.attempt.encode()).hexdigest()[:16]
