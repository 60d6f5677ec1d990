"""The gateway's error mapping and retry rules: every status a step can meet, every connection
error class, a read against a write (docs/design.md §3: exit codes; a write that may have applied is
never sent again)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import urllib3
import yaml

from dispatch_k8s.core.rules.errors import (
    DispatchError,
    Forbidden,
    NotFound,
    PreconditionFailed,
    Refused,
    Transient,
)
from dispatch_k8s.core.shell.gateway import api_errors
from dispatch_k8s.core.shell.gateway.api_errors import ApiError

BIN = Path(sys.executable).parent


def api_error(status: int, message: str = "", reason: str = "Reason") -> ApiError:
    body = json.dumps({"kind": "Status", "message": message}).encode()
    return ApiError.from_body(status, reason, body)


@pytest.mark.parametrize(
    ("status", "message", "mapped"),
    [
        (401, "Unauthorized", Forbidden),
        (403, 'trainjobs "x" is forbidden: User "u" cannot update', Forbidden),
        (403, 'admission webhook "vtrainjob.kb.io" denied the request: no', Refused),
        (403, "ValidatingAdmissionPolicy 'guard' denied request: dispatch-k8s guard x", Refused),
        (404, 'trainjobs "x" not found', NotFound),
        (409, "the object has been modified", PreconditionFailed),
        (410, "The provided continue parameter is too old", Transient),
        (
            422,
            "the server rejected our request due to an error in our request: test operation",
            PreconditionFailed,
        ),
        (422, "spec.suspend: Invalid value", Refused),
        (429, "Too many requests", Transient),
        (500, "Internal error", Transient),
        (503, "The server is currently unable to handle the request", Transient),
        (504, "Timeout: request did not complete within 60s", Transient),
    ],
    ids=lambda value: str(value)[:24],
)
def test_each_status_maps_to_its_exit_code(
    status: int, message: str, mapped: type[DispatchError]
) -> None:
    error = api_errors.error_for(api_error(status, message), "update TrainJob team-a/x")
    assert type(error) is mapped
    assert str(error).startswith(f"update TrainJob team-a/x: {status} Reason: ")
    assert "\n" not in str(error)


def test_a_webhook_that_could_not_be_called_is_told_from_other_server_errors() -> None:
    message = (
        'Internal error occurred: failed calling webhook "w.example.test": failed to call '
        'webhook: Post "https://127.0.0.1:1/x?timeout=5s": dial tcp 127.0.0.1:1: connect: '
        "connection refused"
    )
    assert api_errors.is_webhook_failure(message)
    assert not api_errors.is_webhook_failure("Internal error occurred: etcdserver: timeout")


def test_a_body_that_is_not_json_still_gives_a_one_line_message() -> None:
    error = ApiError.from_body(502, "Bad Gateway", b"<html>\nproxy\n</html>")
    mapped = api_errors.error_for(error, "get TrainJob team-a/x")
    assert isinstance(mapped, Transient)
    assert str(mapped) == "get TrainJob team-a/x: 502 Bad Gateway: Bad Gateway"


def _refused() -> urllib3.exceptions.HTTPError:
    return urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]


def _max_retries(reason: Exception) -> urllib3.exceptions.HTTPError:
    return urllib3.exceptions.MaxRetryError(None, "/apis", reason)  # type: ignore[arg-type]


# (error, retried as a read, retried as a write): a write is sent again only where the
# server cannot have applied it.
RETRIES: list[tuple[str, Callable[[], Exception], bool, bool]] = [
    ("429", lambda: api_error(429), True, True),
    ("500", lambda: api_error(500), True, False),
    ("503", lambda: api_error(503), True, False),
    ("504", lambda: api_error(504), True, False),
    ("409", lambda: api_error(409), False, False),
    ("403", lambda: api_error(403), False, False),
    ("404", lambda: api_error(404), False, False),
    ("refused", _refused, True, True),
    ("refused-after-urllib3-retries", lambda: _max_retries(_refused()), True, True),
    (
        "connect-timeout",
        lambda: urllib3.exceptions.ConnectTimeoutError(None, "timed out"),
        True,
        True,
    ),
    (
        "read-timeout",
        lambda: urllib3.exceptions.ReadTimeoutError(None, "/apis", "timed out"),  # type: ignore[arg-type]
        True,
        False,
    ),
    ("reset", lambda: urllib3.exceptions.ProtocolError("Connection reset by peer"), True, False),
    (
        "reset-after-urllib3-retries",
        lambda: _max_retries(urllib3.exceptions.ProtocolError("reset")),
        True,
        False,
    ),
    ("ssl", lambda: urllib3.exceptions.SSLError("bad certificate"), True, False),
]


@pytest.mark.parametrize(("name", "make", "read", "write"), RETRIES, ids=[r[0] for r in RETRIES])
def test_reads_are_retried_and_writes_only_where_nothing_was_applied(
    name: str, make: Callable[[], Exception], read: bool, write: bool
) -> None:
    assert api_errors.retryable(make(), write=False) is read
    assert api_errors.retryable(make(), write=True) is write


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr("dispatch_k8s.core.shell.gateway.api_errors.time.sleep", slept.append)
    return slept


@pytest.mark.parametrize(("name", "make", "read", "write"), RETRIES, ids=[r[0] for r in RETRIES])
@pytest.mark.parametrize("is_write", [False, True], ids=["read", "write"])
def test_a_request_is_sent_as_often_as_the_rules_say_then_mapped(
    name: str,
    make: Callable[[], Exception],
    read: bool,
    write: bool,
    is_write: bool,
    no_backoff: list[float],
) -> None:
    sent: list[int] = []

    def request() -> None:
        sent.append(1)
        raise make()

    with pytest.raises(DispatchError) as raised:
        api_errors.with_retries(request, what="update TrainJob team-a/x", write=is_write)
    retried = write if is_write else read
    assert len(sent) == (api_errors.ATTEMPTS if retried else 1)
    assert no_backoff == [0.5, 1.0, 2.0][: len(sent) - 1], "backoff doubles between attempts"
    assert "\n" not in str(raised.value)
    if not isinstance(make(), ApiError):
        assert isinstance(raised.value, Transient)
        assert "API server unreachable" in str(raised.value)


def test_a_retried_read_that_then_answers_returns_the_answer(no_backoff: list[float]) -> None:
    answers: list[Exception | str] = [api_error(503), _refused(), "the object"]

    def request() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert api_errors.with_retries(request, what="get TrainJob team-a/x") == "the object"
    assert no_backoff == [0.5, 1.0]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the block ends


def test_a_kubeconfig_naming_a_closed_loopback_port_is_exit_75_within_seconds(
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    server = f"https://127.0.0.1:{_closed_port()}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [
            {"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }
    kubeconfig.write_text(yaml.safe_dump(config))
    began = time.monotonic()
    done = subprocess.run(
        [str(BIN / "dispatch-hold"), "--kubeconfig", str(kubeconfig), "--name", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    took = time.monotonic() - began
    assert done.returncode == 75, done.stderr
    assert "Traceback" not in done.stderr
    last = json.loads(done.stderr.strip().splitlines()[-1])
    assert "API server unreachable" in last["message"]
    assert took < 15, f"{took:.1f}s: 4 attempts with 0.5+1+2 s of backoff and a start-up"
