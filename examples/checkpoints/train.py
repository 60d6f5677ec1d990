"""A training loop that knows which execution it is.

docs/concepts.md: Using the epoch in training code.

Run as a TrainJob's trainer command, with the checkpoint volume mounted at --root:

    python train.py --root /checkpoints --steps 1000 --save-every 50

It refuses to start without `DISPATCH_EPOCH` and `DISPATCH_ATTEMPT` (exit 2), starts on the
store (dispatch_checkpoints: the save to resume from), and saves under its own epoch only, also
once more when it is asked to stop (SIGTERM, within the pod's grace period), then exits 143
as a process the signal killed does, never 0 (docs/design.md: a trainer stopped exits
non-zero: a pod preempted that exits 0 completes the Job with nothing restarted). Once a newer
execution has started, the store refuses this one's saves (StaleExecution): it reports that and
steps aside with exit 0, since a newer execution owns the job and this one's end is no failure
to retry. Each event is one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from dispatch_checkpoints import Execution, FilesystemStore, MissingIdentity, StaleExecution

STATE = "state.json"
STOPPED = 128 + signal.SIGTERM  # the exit code of a process SIGTERM killed


def report(event: str, **fields: Any) -> None:
    """One event, as a JSON line on stdout."""
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    """Train from the newest complete save to --steps; the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0], allow_abbrev=False)
    parser.add_argument("--root", type=Path, required=True, help="the shared checkpoint directory")
    parser.add_argument("--steps", type=int, default=1000, help="train until this step")
    parser.add_argument("--save-every", type=int, default=50, help="save every N steps")
    parser.add_argument("--step-seconds", type=float, default=0.1, help="time one step takes")
    args = parser.parse_args(argv)
    try:
        execution = Execution.from_environment()
    except MissingIdentity as e:
        sys.stderr.write(f"train.py: not a dispatch-k8s execution: {e}\n")
        return 2
    stopping = threading.Event()

    def on_term(signum: int, _: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_term)
    store = FilesystemStore(args.root)
    try:
        step = train(store, execution, args, stopping)
    except StaleExecution as e:
        report("stale", epoch=execution.epoch, reason=str(e))
        return 0
    if stopping.is_set():
        report("stopped", epoch=execution.epoch, step=step)
        return STOPPED
    report("done", epoch=execution.epoch, step=step)
    return 0


def train(
    store: FilesystemStore,
    execution: Execution,
    args: argparse.Namespace,
    stopping: threading.Event,
) -> int:
    """Resume, step and save until --steps or SIGTERM; the last step reached."""
    resumed = store.start(execution)
    step = json.loads(store.load(resumed)[STATE])["step"] if resumed else 0
    report("resumed", epoch=execution.epoch, from_epoch=resumed and resumed.epoch, step=step)
    while step < args.steps and not stopping.wait(args.step_seconds):
        step += 1
        if step % args.save_every == 0:
            store.save(execution, step, {STATE: json.dumps({"step": step}).encode()})
            report("saved", epoch=execution.epoch, step=step)
    if stopping.is_set() and step % args.save_every:
        store.save(execution, step, {STATE: json.dumps({"step": step}).encode()})
        report("saved", epoch=execution.epoch, step=step, on="SIGTERM")
    return step


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
