"""/metrics over TLS: each scrape's token reviewed, answers remembered a minute, refusals told.

The reviews' answers are given here as the API server would give them; the API server's own
answers, to real ServiceAccount tokens under the shipped RBAC, are in
tests/pipelines/test_controller_rbac.py.
"""

from __future__ import annotations

import http.client
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from cryptography import x509

from dispatch_k8s.controller import secure_metrics
from dispatch_k8s.core.rules import access
from dispatch_k8s.core.rules.errors import Transient
from dispatch_k8s.core.shell.gateway import kinds
from tests.cluster.process import free_ports
from tests.support.replicas import secure_get

READER, OTHER = "reader-token", "other-token"


class Reviewer:
    """Answers reviews as an API server would: READER may get /metrics, OTHER may not."""

    def __init__(self) -> None:
        self.reviews: list[str] = []
        self.down = False

    def review(self, kind: kinds.Kind, spec: Mapping[str, Any]) -> dict[str, Any]:
        self.reviews.append(kind.name)
        if self.down:
            raise Transient("503")
        if kind is kinds.TOKEN_REVIEW:
            known = {READER: "reader", OTHER: "other"}.get(spec["token"])
            if known is None:
                return {"status": {"authenticated": False}}
            return {"status": {"authenticated": True, "user": {"username": known}}}
        return {"status": {"allowed": spec["user"] == "reader"}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def authorizer(reviewer: Reviewer, clock: Clock) -> secure_metrics.Authorizer:
    return secure_metrics.Authorizer(reviewer, clock=clock)  # type: ignore[arg-type]


def test_each_token_gets_what_the_api_server_says() -> None:
    reviewer, clock = Reviewer(), Clock()
    decide = authorizer(reviewer, clock)
    assert decide.status(None) == access.UNAUTHENTICATED
    assert decide.status("Basic x") == access.UNAUTHENTICATED
    assert reviewer.reviews == [], "no token: nothing to ask"
    assert decide.status("Bearer nobody") == access.UNAUTHENTICATED
    assert decide.status(f"Bearer {OTHER}") == access.FORBIDDEN
    assert decide.status(f"Bearer {READER}") == access.ALLOWED


def test_an_answer_is_remembered_a_minute_then_asked_again() -> None:
    reviewer, clock = Reviewer(), Clock()
    decide = authorizer(reviewer, clock)
    assert decide.status(f"Bearer {READER}") == access.ALLOWED
    asked = len(reviewer.reviews)
    clock.now += secure_metrics.REMEMBERED_SECONDS - 1
    assert decide.status(f"Bearer {READER}") == access.ALLOWED
    assert len(reviewer.reviews) == asked, "a scrape every 15 s is not a review every 15 s"
    clock.now += 2
    decide.status(f"Bearer {READER}")
    assert len(reviewer.reviews) == 2 * asked


def test_an_api_server_that_cannot_answer_refuses_and_nothing_is_remembered() -> None:
    reviewer, clock = Reviewer(), Clock()
    decide = authorizer(reviewer, clock)
    reviewer.down = True
    assert decide.status(f"Bearer {READER}") == access.FORBIDDEN
    reviewer.down = False
    assert decide.status(f"Bearer {READER}") == access.ALLOWED


def test_the_certificate_made_at_start_needs_no_writable_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As in the shipped pod: a read-only root filesystem and no writable volume, so no
    # temporary directory (tempfile's own search is then what fails).
    monkeypatch.setattr(tempfile, "tempdir", "/nonexistent/dispatch-metrics")
    context = secure_metrics.tls_context(None)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


@pytest.fixture
def metrics_server() -> Iterator[int]:
    (port,) = free_ports(1)
    context = secure_metrics.tls_context(None)
    server = secure_metrics.serve_metrics(
        f"127.0.0.1:{port}", authorizer(Reviewer(), Clock()), context
    )
    try:
        yield port
    finally:
        server.shutdown()
        server.server_close()


def test_metrics_are_served_over_tls_to_a_reader_only(metrics_server: int) -> None:
    status, body, certificate = secure_get(metrics_server, "/metrics", READER)
    assert status == 200
    assert b"dispatch_admission_leader" in body
    names = x509.load_der_x509_certificate(certificate).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert "localhost" in names.value.get_values_for_type(x509.DNSName)
    assert secure_get(metrics_server, "/metrics", OTHER)[:2] == (403, b"Forbidden\n")
    assert secure_get(metrics_server, "/metrics", None)[:2] == (401, b"Unauthorized\n")
    assert secure_get(metrics_server, "/healthz", READER)[0] == 404, "the probes stay on --address"


def test_a_plain_http_request_gets_no_metrics(metrics_server: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", metrics_server, timeout=10)
    try:
        connection.request("GET", "/metrics")
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            connection.getresponse()
    finally:
        connection.close()
