"""The S3 server's conditional writes themselves, before the store relies on them: a create-only
PUT (If-None-Match: *) of an existing key and a PUT whose If-Match names an old ETag are
refused with 412, and of concurrent writers of one key exactly one wins (a writer answered 5xx
may have won: the key then holds its body)."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest
from botocore.exceptions import ClientError

pytestmark = pytest.mark.storage
RACERS = 16


def status_of(error: ClientError) -> int:
    return int(error.response["ResponseMetadata"]["HTTPStatusCode"])


def test_a_create_only_put_of_an_existing_key_is_refused(s3: Any, bucket: str, prefix: str) -> None:
    key = f"{prefix}/k"
    s3.put_object(Bucket=bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert status_of(refused.value) == 412
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"first"


def test_a_put_conditioned_on_an_old_etag_is_refused(s3: Any, bucket: str, prefix: str) -> None:
    key = f"{prefix}/k"
    first = s3.put_object(Bucket=bucket, Key=key, Body=b"1")["ETag"]
    second = s3.put_object(Bucket=bucket, Key=key, Body=b"2", IfMatch=first)["ETag"]
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key=key, Body=b"3", IfMatch=first)
    assert status_of(refused.value) == 412
    s3.put_object(Bucket=bucket, Key=key, Body=b"4", IfMatch=second)
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"4"


def race(s3: Any, writes: list[dict[str, Any]]) -> list[str]:
    """Send `writes` (put_object keyword arguments) at once; how each ended: won, lost
    (412, or 409 for a concurrent conditional write) or unknown (a 5xx: it may have been
    applied, as a client that sends it again will learn)."""

    def put(arguments: dict[str, Any]) -> str:
        try:
            s3.put_object(**arguments)
        except ClientError as e:
            if status_of(e) in (409, 412):
                return "lost"
            if status_of(e) >= 500:
                return "unknown"
            raise
        return "won"

    with concurrent.futures.ThreadPoolExecutor(len(writes)) as pool:
        return list(pool.map(put, writes))


def the_one_written(s3: Any, bucket: str, key: str, ended: list[str], bodies: list[bytes]) -> None:
    """At most one won, and what the key holds is the winner's, or one unknown's if none won."""
    assert ended.count("won") <= 1, ended
    stored = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    if "won" in ended:
        assert stored == bodies[ended.index("won")], ended
    else:
        assert stored in [b for b, e in zip(bodies, ended, strict=True) if e == "unknown"], ended


def test_of_concurrent_create_only_puts_of_one_key_exactly_one_wins(
    s3: Any, bucket: str, prefix: str
) -> None:
    for round_ in range(5):
        key = f"{prefix}/race-{round_}"
        bodies = [str(i).encode() for i in range(RACERS)]
        writes = [
            {"Bucket": bucket, "Key": key, "Body": body, "IfNoneMatch": "*"} for body in bodies
        ]
        the_one_written(s3, bucket, key, race(s3, writes), bodies)


def test_of_concurrent_swaps_on_one_etag_exactly_one_wins(
    s3: Any, bucket: str, prefix: str
) -> None:
    head = f"{prefix}/head"
    etag = s3.put_object(Bucket=bucket, Key=head, Body=b"0")["ETag"]
    for round_ in range(5):
        bodies = [f"{round_}-{i}".encode() for i in range(RACERS)]
        writes = [{"Bucket": bucket, "Key": head, "Body": body, "IfMatch": etag} for body in bodies]
        the_one_written(s3, bucket, head, race(s3, writes), bodies)
        etag = s3.head_object(Bucket=bucket, Key=head)["ETag"]
