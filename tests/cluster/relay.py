"""Byte relays that carry the API server into a network namespace of its own.

The engines' controllers listen on every interface on ports they will not move
(docs/development.md), so each runs in a network namespace whose only interface is its own
loopback (tests/cluster/netns.py). A Unix socket is the one way in: the filesystem is shared
across namespaces. Outside, `UnixToLoopback` accepts on that socket and connects to the API
server's loopback port; inside, netns.py listens on the same loopback port and connects to the
socket. TLS passes through untouched, so the controller's kubeconfig is the admin one.
The other way, into a namespace (Tekton's webhook, which the API server calls): netns.py
listens on a Unix socket and connects to the namespace's loopback port, and `LoopbackToUnix`
accepts on a free host loopback port and connects to that socket.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Final, Self

LOOPBACK: Final = "127.0.0.1"
CHUNK: Final = 65536


def pump(
    source: socket.socket, sink: socket.socket, *, passes: Callable[[], bool] = lambda: True
) -> None:
    """Copy until `source` ends, then pass the end on; the other direction carries on.

    `passes` is asked before each chunk is sent on: a chunk it says no to is dropped.
    """
    with contextlib.suppress(OSError):
        while data := source.recv(CHUNK):
            if passes():
                sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _serve(connection: socket.socket, dial: Callable[[], socket.socket]) -> None:
    try:
        upstream = dial()
    except OSError:
        connection.close()
        return
    back = threading.Thread(target=pump, args=(upstream, connection), daemon=True)
    back.start()
    pump(connection, upstream)
    back.join()
    connection.close()
    upstream.close()


def relay_forever(listener: socket.socket, dial: Callable[[], socket.socket]) -> None:
    """Accept on `listener` until it is closed; join each connection to a new `dial()`."""
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:  # closed: the relay is done
            return
        threading.Thread(target=_serve, args=(connection, dial), daemon=True).start()


def dial_unix(path: Path) -> Callable[[], socket.socket]:
    """A dialer of the Unix socket at `path`."""

    def dial() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(path))
        return sock

    return dial


def dial_loopback(port: int) -> Callable[[], socket.socket]:
    """A dialer of `port` on 127.0.0.1."""
    return lambda: socket.create_connection((LOOPBACK, port))


class Relay:
    """A listener whose every connection is joined to a new `dial()`, in a daemon thread."""

    def __init__(
        self, listener: socket.socket, dial: Callable[[], socket.socket], path: Path | None
    ) -> None:
        self._listener = listener
        self._path = path  # a Unix socket's, removed on close
        self._thread = threading.Thread(target=relay_forever, args=(listener, dial), daemon=True)

    def start(self) -> Self:
        """Start relaying (in a daemon thread); return self."""
        self._thread.start()
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop accepting (open connections end with their peers) and remove the socket."""
        self._listener.close()
        if self._path is not None:
            self._path.unlink(missing_ok=True)


class UnixToLoopback(Relay):
    """Outside the namespaces: a Unix socket at `path` that leads to 127.0.0.1:`port`."""

    def __init__(self, path: Path, port: int) -> None:
        path.unlink(missing_ok=True)
        self.path = path
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen(64)
        super().__init__(listener, dial_loopback(port), path)


class LoopbackToUnix(Relay):
    """Outside the namespaces: a free port on 127.0.0.1 that leads to the Unix socket at
    `path`, which a namespace serves (netns.py --serve): the way in to what listens there."""

    def __init__(self, path: Path) -> None:
        listener = socket.create_server((LOOPBACK, 0))
        self.port: int = listener.getsockname()[1]
        self.socket = path
        super().__init__(listener, dial_unix(path), None)
