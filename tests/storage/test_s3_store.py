"""The checkpoint library's S3 store (checkpoints/dispatch_checkpoints/s3.py) on a real S3
server: ordered saves, a stale execution refused before it writes and at its commit, the probe
that refuses a store ignoring conditional writes, and what a save costs in requests."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from dispatch_checkpoints import Execution, OutOfOrder, RepeatedEpoch, StaleExecution
from dispatch_checkpoints.s3 import S3Store, UnsafeStore

from tests.storage.conftest import client_for

pytestmark = pytest.mark.storage
OLDER = Execution(3_000_007_000_001, "job.7.0.1.0")
NEWER = Execution(3_000_007_000_002, "job.7.0.2.0")


def state(step: int) -> dict[str, bytes]:
    return {"state.json": json.dumps({"step": step}).encode()}


def test_a_newer_execution_resumes_from_the_older_ones_latest_save(
    s3: Any, bucket: str, prefix: str
) -> None:
    store = S3Store(s3, bucket, prefix)
    assert store.start(OLDER) is None
    store.save(OLDER, 10, state(10))
    store.save(OLDER, 20, state(20))
    resumed = S3Store(s3, bucket, prefix).start(NEWER)
    assert resumed is not None
    assert (resumed.epoch, resumed.step) == (OLDER.epoch, 20)
    assert store.load(resumed) == state(20)


def test_once_a_newer_execution_started_the_older_one_may_not_save(
    s3: Any, bucket: str, prefix: str
) -> None:
    older, newer = S3Store(s3, bucket, prefix), S3Store(s3, bucket, prefix)
    older.start(OLDER)
    older.save(OLDER, 10, state(10))
    newer.start(NEWER)
    with pytest.raises(StaleExecution):
        older.save(OLDER, 1_000, state(1_000))
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/saves/").get("Contents", [])
    assert not [o for o in listed if "s000000001000" in o["Key"]], "refused before writing"
    latest = newer.latest()
    assert latest is not None
    assert (latest.epoch, latest.step) == (OLDER.epoch, 10)


def test_a_save_written_before_the_newer_start_is_refused_at_its_commit(
    s3: Any, bucket: str, prefix: str
) -> None:
    """The older execution passes its check and writes its files; the newer one starts
    before the commit: the head's ETag changed, the swap is refused, read again: stale."""
    store = S3Store(s3, bucket, prefix)
    store.start(OLDER)
    started = False

    def newer_starts_before_the_commit(request: Any, **_: Any) -> None:
        nonlocal started
        if request.url.endswith("/HEAD") and request.method == "PUT" and not started:
            started = True
            S3Store(client_for(s3.meta.endpoint_url), bucket, prefix, probe=False).start(NEWER)

    s3.meta.events.register("before-send.s3.PutObject", newer_starts_before_the_commit)
    with pytest.raises(StaleExecution):
        store.save(OLDER, 50, state(50))
    assert started
    assert S3Store(s3, bucket, prefix).latest() is None


def test_the_latest_only_moves_forward_and_two_attempts_may_not_share_an_epoch(
    s3: Any, bucket: str, prefix: str
) -> None:
    store = S3Store(s3, bucket, prefix)
    store.start(NEWER)
    store.save(NEWER, 20, state(20))
    with pytest.raises(OutOfOrder):
        store.save(NEWER, 10, state(10))
    with pytest.raises(RepeatedEpoch):
        store.start(Execution(NEWER.epoch, "job.7.9.2.0"))
    with pytest.raises(StaleExecution):
        store.start(OLDER)


def test_a_store_that_ignores_conditional_writes_is_refused(
    s3_endpoint: str, bucket: str, prefix: str
) -> None:
    """What a store that accepts the headers and ignores them does, played by a client that
    drops them before they are sent: the probe's second create-only PUT goes through."""
    s3 = client_for(s3_endpoint)

    def drop_conditions(request: Any, **_: Any) -> None:
        for header in ("If-None-Match", "If-Match"):
            if header in request.headers:
                del request.headers[header]

    s3.meta.events.register("before-send.s3.PutObject", drop_conditions)
    with pytest.raises(UnsafeStore, match="ignores If-None-Match"):
        S3Store(s3, bucket, prefix)


def test_a_save_costs_its_files_and_two_requests_more(s3: Any, bucket: str, prefix: str) -> None:
    """Uncontended: the head read before writing, the files, the head's swap."""
    store = S3Store(s3, bucket, prefix)
    store.start(OLDER)
    sent: Counter[str] = Counter()
    s3.meta.events.register("before-send.s3.*", lambda request, **_: sent.update([request.method]))
    files = {f"shard-{i}": bytes([i]) * 1024 for i in range(4)}
    store.save(OLDER, 1, files)
    assert sent == Counter({"GET": 1, "PUT": len(files) + 1})
