"""/metrics over TLS, each scrape authenticated and authorized by the API server.

As controller-runtime's secure metrics serving (the kubebuilder layout since v4): a bearer token
reviewed (TokenReview), its user allowed `get` on /metrics (SubjectAccessReview), a 401 or 403
otherwise; the certificate from --metrics-cert-dir (tls.crt, tls.key: cert-manager's
layout), or made at start and signed by itself, as controller-runtime makes one when it is
given none. The probes stay on --address, plain HTTP, for the kubelet.
"""

from __future__ import annotations

import datetime
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Final

from loguru import logger

from dispatch_k8s.controller import serve
from dispatch_k8s.core.rules import access
from dispatch_k8s.core.rules.errors import DispatchError
from dispatch_k8s.core.shell.gateway import Gateway, kinds

METRICS_PATH: Final = "/metrics"
# How long an answer is trusted, as the API server's delegated authentication and
# authorization cache theirs: a scrape every 15 s costs two reviews every minute, not four.
REMEMBERED_SECONDS: Final = 60.0
REMEMBERED_MAX: Final = 1_000


class Authorizer:
    """The status a scrape gets for its Authorization header: 200, 401 or 403."""

    def __init__(self, gateway: Gateway, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._gateway = gateway
        self._clock = clock
        self._lock = threading.Lock()
        self._answers: dict[str, tuple[float, int]] = {}  # token digest -> (until, status)

    def status(self, authorization: str | None) -> int:
        """200, 401 or 403 for a scrape with this Authorization header; answers remembered."""
        token = access.bearer_token(authorization)
        if token is None:
            return access.UNAUTHENTICATED
        key, now = access.token_key(token), self._clock()
        with self._lock:
            until, known = self._answers.get(key, (0.0, 0))
        if until > now:
            return known
        try:
            answer = self._review(token)
        except DispatchError as e:  # the API server cannot say: no answer is remembered
            logger.bind(error=str(e)).warning("cannot review a scrape's token")
            return access.FORBIDDEN
        with self._lock:
            if len(self._answers) >= REMEMBERED_MAX:
                self._answers.clear()
            self._answers[key] = (now + REMEMBERED_SECONDS, answer)
        return answer

    def _review(self, token: str) -> int:
        user = access.reviewed_user(
            self._gateway.review(kinds.TOKEN_REVIEW, access.token_review(token))
        )
        if user is None:
            return access.UNAUTHENTICATED
        spec = access.access_review(user, path=METRICS_PATH)
        decided = self._gateway.review(kinds.SUBJECT_ACCESS_REVIEW, spec)
        return access.ALLOWED if access.allowed(decided) else access.FORBIDDEN


def tls_context(cert_dir: Path | None) -> ssl.SSLContext:
    """A server context with cert_dir's tls.crt and tls.key, or a certificate made now."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_dir is not None:
        context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
        return context
    certificate, key = self_signed(socket.gethostname())
    load_from_memory(context, certificate + key)
    return context


def load_from_memory(context: ssl.SSLContext, chain: bytes) -> None:
    """Load a PEM certificate and its key into `context` from an anonymous file in memory.

    The shipped pod's root filesystem is read-only and it mounts no writable volume, so there
    is no temporary directory to write them to; OpenSSL reads only from a path, and
    /proc/self/fd/N is one for a memfd, which no other process can open and which goes with
    its last descriptor. The private key never touches a disk.
    """
    descriptor = os.memfd_create("dispatch-metrics-tls", os.MFD_CLOEXEC)
    with open(descriptor, "wb") as chain_file:  # closes the descriptor: the memory goes
        chain_file.write(chain)
        chain_file.flush()
        context.load_cert_chain(f"/proc/self/fd/{descriptor}")


def self_signed(host: str) -> tuple[bytes, bytes]:
    """A certificate for `host` (and localhost) signed by its own key: PEM certificate, key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(host), x509.DNSName("localhost")]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    return (
        certificate.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def serve_metrics(
    address: str, authorizer: Authorizer, context: ssl.SSLContext
) -> ThreadingHTTPServer:
    """Serve /metrics over TLS at HOST:PORT, each scrape authorized; the server."""
    routes = {METRICS_PATH: serve.metrics_body}
    server = serve.server_at(address, routes, authorize=authorizer.status)
    # The handshake is made in each connection's thread (serve._handler), not in accept().
    server.socket = context.wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
    serve.start(server)
    return server
