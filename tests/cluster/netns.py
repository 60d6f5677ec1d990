"""Run a program in a network namespace of its own that reaches the API server only.

    unshare --net -- python -m tests.cluster.netns --socket S --port P [--serve U=Q] -- PROG ARGS

Inside the new namespace: bring its loopback up, listen on 127.0.0.1:P, relay every
connection to the Unix socket S (which tests/cluster/relay.py's UnixToLoopback leads to the
API server), and run PROG. Whatever PROG listens on, on any interface, is reachable from
this namespace only: nothing of it is on the host's interfaces. Each `--serve U=Q` listens on
the Unix socket U and relays every connection to 127.0.0.1:Q inside: the one way in, for a
listener the API server must reach (relay.py's LoopbackToUnix leads a host loopback port to U).
Exits with PROG's status.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from tests.cluster.process import die_with_parent
from tests.cluster.relay import LOOPBACK, dial_loopback, dial_unix, relay_forever


def main(argv: list[str]) -> int:
    """Entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.netns")
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--serve", action="append", default=[], metavar="SOCKET=PORT")
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("no program to run")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    listener = socket.create_server((LOOPBACK, args.port))
    served = []
    for serve in args.serve:
        path, _, port = serve.rpartition("=")
        Path(path).unlink(missing_ok=True)
        inbound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        inbound.bind(path)
        inbound.listen(64)
        served.append((inbound, dial_loopback(int(port))))
    # The harness signals the whole process group: PROGRAM gets the TERM itself, and this
    # process waits for it to end rather than leaving it behind. A handler, not SIG_IGN:
    # an ignored signal would stay ignored in PROGRAM across exec.
    signal.signal(signal.SIGTERM, lambda _signal, _frame: None)
    # Killed with the harness (its own death signal), this process takes PROGRAM with it.
    # Started before the relay's thread: preexec_fn is safe only while one thread runs.
    program_process = subprocess.Popen(program, preexec_fn=die_with_parent)
    for each, dial in [(listener, dial_unix(args.socket)), *served]:
        threading.Thread(target=relay_forever, args=(each, dial), daemon=True).start()
    return program_process.wait()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
