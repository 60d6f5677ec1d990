"""A loopback TCP proxy a test controls: it forwards to the API server until told to cut.

TLS passes through untouched (the API server's certificate names 127.0.0.1), so a step whose
kubeconfig points at the proxy talks to the real server and meets real connection faults.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import yaml

from tests.cluster.relay import pump

LOOPBACK = "127.0.0.1"


class Proxy:
    """Accepts on a free loopback port; `cut` resets every open connection at once. Faults
    for the connections it accepts from then on: `resetting` (a reset at once), `stalled`
    (accepted, never answered: a half-open peer), `latency` (seconds added to every chunk).
    `partition` makes every open connection a black hole too, as a link that stops carrying
    packets without a reset would: what is sent then is never delivered, even later."""

    def __init__(self, target_port: int) -> None:
        self._target = (LOOPBACK, target_port)
        self._listener = socket.create_server((LOOPBACK, 0))
        self.port = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self.resetting = False
        self.stalled = False
        self.latency = 0.0
        self._dropping = False
        self._delay = threading.Event()  # never set: waiting on it is a plain delay

    def __enter__(self) -> Proxy:
        self._accepting.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._listener.close()
        self.cut()

    def connections(self) -> int:
        """How many client connections are open now."""
        with self._lock:
            return len(self._open) // 2

    def partition(self) -> None:
        """From now on nothing passes: open connections carry nothing, new ones are stalled."""
        self.stalled = True
        self._dropping = True

    def cut(self) -> None:
        """Reset every open connection, as a dropped link or a restarted server would."""
        with self._lock:
            for sock in self._open:
                reset(sock)
            self._open.clear()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if self.resetting:
                reset(client)
                continue
            if self.stalled:
                with self._lock:
                    self._open.add(client)  # read by no one, answered never; closed at exit
                continue
            upstream = socket.create_connection(self._target)
            with self._lock:
                self._open |= {client, upstream}
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=pump, args=(source, sink), kwargs={"passes": self._passes}, daemon=True
                ).start()

    def _passes(self) -> bool:
        """Whether a chunk goes on, once `latency` has passed (relay.pump asks per chunk)."""
        if self.latency:
            self._delay.wait(self.latency)
        return not self._dropping


def reset(sock: socket.socket) -> None:
    """Close with a reset (RST), as a dropped link or a killed server would."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # shutdown, not close alone: it wakes a pump thread blocked in recv
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


@contextlib.contextmanager
def proxied(kubeconfig: Path, work: Path) -> Iterator[tuple[Proxy, Path]]:
    """A proxy to the kubeconfig's server, and a copy of the kubeconfig that goes through it."""
    config = yaml.safe_load(kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]["server"]
    port = int(server.rsplit(":", 1)[1])
    with Proxy(port) as proxy:
        config["clusters"][0]["cluster"]["server"] = f"https://{LOOPBACK}:{proxy.port}"
        path = work / "proxied.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        yield proxy, path
