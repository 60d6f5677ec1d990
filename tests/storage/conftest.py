"""The storage suite: the checkpoint library's S3 store against a real S3 server (SeaweedFS,
tests/cluster/seaweedfs.py), one server and one bucket for the run, a fresh prefix per test
(SeaweedFS gives each bucket volumes of its own: a bucket per test would use them up)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError

from tests.cluster import extras
from tests.cluster.seaweedfs import SeaweedFS
from tests.cluster.wait import wait_until

pytestmark = pytest.mark.storage
BUCKET = "checkpoints"


def client_for(endpoint: str, **options: Any) -> Any:
    """A boto3 S3 client for the server at `endpoint` (no credentials are checked there)."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="dispatch",
        aws_secret_access_key="dispatch-secret",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, **options),
    )


@contextmanager
def serving(run_dir: Path) -> Iterator[str]:
    """SeaweedFS in `run_dir`: its S3 endpoint, once BUCKET is made and takes a write."""
    with SeaweedFS(run_dir) as server:
        s3 = client_for(server.endpoint)

        def writable() -> bool | None:
            try:
                s3.create_bucket(Bucket=BUCKET)
                s3.put_object(Bucket=BUCKET, Key="ready", Body=b"1")
            except (ClientError, EndpointConnectionError):
                return None
            return True

        wait_until(writable, what="SeaweedFS to take a write", timeout=120)
        yield server.endpoint


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """SeaweedFS for the whole run: its S3 endpoint, once a bucket can be made and written."""
    with serving(Path(tmp_path_factory.mktemp("storage"))) as endpoint:
        yield endpoint


@pytest.fixture
def bucket(s3_endpoint: str) -> str:
    """The run's bucket."""
    return BUCKET


@pytest.fixture
def prefix() -> str:
    """A prefix of the bucket no other test uses."""
    return f"test-{secrets.token_hex(6)}"


@pytest.fixture
def s3(s3_endpoint: str) -> Any:
    """A boto3 S3 client for the test's server."""
    return client_for(s3_endpoint)


@pytest.fixture(scope="session")
def torch_installed() -> None:
    """torch imports: scripts/setup installs it in the background (tests/cluster/extras.py)."""
    extras.wait_for_torch()
