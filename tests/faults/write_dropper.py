"""A loopback HTTPS proxy that breaks a step's first write: it loses the write's answer (the
write applied and the step cannot know it did), or the write itself (the API server went
between the step's read and its write).

It terminates TLS with the API server's own certificate (it names 127.0.0.1; the step checks
it against the cluster CA as before), forwards each request over a new TLS connection as the
admin, and relays the answers unread, until the first write (POST, PUT, PATCH, DELETE): that
one is forwarded (`forward_write`) and its answer awaited and discarded, or not forwarded at
all; either way the step's connection is reset.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Final

import yaml

from tests.support.proxy import LOOPBACK, reset

WRITES: Final = frozenset({b"POST", b"PUT", b"PATCH", b"DELETE"})
ANSWER_WAIT: Final = 10.0  # seconds for the API server to answer the write it applies


class WriteDropper:
    """Accepts on a free loopback port; `dropped` tells whether a write's answer was lost."""

    def __init__(self, pki: Path, target_port: int, *, forward_write: bool) -> None:
        self._target = (LOOPBACK, target_port)
        self._forward_write = forward_write
        self._serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._serving.load_cert_chain(pki / "apiserver.crt", pki / "apiserver.key")
        self._upstream = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self._upstream.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        self._listener = socket.create_server((LOOPBACK, 0))
        self.port = self._listener.getsockname()[1]
        self.dropped = threading.Event()

    def __enter__(self) -> WriteDropper:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        with contextlib.suppress(OSError, ssl.SSLError):
            client = self._serving.wrap_socket(raw, server_side=True)
            upstream = self._upstream.wrap_socket(
                socket.create_connection(self._target), server_hostname=LOOPBACK
            )
            answered = threading.Event()
            dropping = threading.Event()
            threading.Thread(
                target=self._relay, args=(upstream, client, dropping, answered), daemon=True
            ).start()
            reader = client.makefile("rb")
            while request := _read_request(reader):
                method = request.split(b" ", 1)[0]
                if method in WRITES and not self.dropped.is_set():
                    if self._forward_write:
                        dropping.set()
                        upstream.sendall(request)
                        answered.wait(ANSWER_WAIT)
                    self.dropped.set()
                    reset(client)  # the TLS socket owns the connection now, not `raw`
                    upstream.close()
                    return
                upstream.sendall(request)

    @staticmethod
    def _relay(
        upstream: ssl.SSLSocket,
        client: ssl.SSLSocket,
        dropping: threading.Event,
        answered: threading.Event,
    ) -> None:
        with contextlib.suppress(OSError, ssl.SSLError):
            while data := upstream.recv(65536):
                if dropping.is_set():
                    answered.set()  # the write was applied (or refused): its answer is lost
                    return
                client.sendall(data)


def _read_request(reader: BinaryIO) -> bytes:
    """One HTTP/1.1 request as sent (headers and a Content-Length body); b"" at the end."""
    head = b""
    while (line := reader.readline()) not in (b"\r\n", b""):
        head += line
    if not head:
        return b""
    length = 0
    for header in head.split(b"\r\n")[1:]:
        name, _, value = header.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    return head + b"\r\n" + (reader.read(length) if length else b"")


@contextlib.contextmanager
def dropping_a_write(
    kubeconfig: Path, pki: Path, work: Path, *, forward_write: bool
) -> Iterator[tuple[WriteDropper, Path]]:
    """The proxy, and a kubeconfig that goes through it (same CA, no credentials of its own)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    port = int(cluster["server"].rsplit(":", 1)[1])
    with WriteDropper(pki, port, forward_write=forward_write) as proxy:
        cluster["server"] = f"https://{LOOPBACK}:{proxy.port}"
        path = work / "dropping.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        yield proxy, path
