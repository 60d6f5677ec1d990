"""Benchmark: how long the local cluster and its node take to start, and how long from running
`dispatch-unsuspend` to the first line the training command prints (docs/development.md: The node).

    .venv/bin/python -m tests.node.bench [--runs N]

Each run opens the same TrainJob again (hold, drain, then release), so every figure is a
release of a job whose image the node already has; the step process's own start-up is in it.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client, config

from tests.cluster.harness import ControlPlane
from tests.cluster.wait import wait_until
from tests.support.executions import (
    NODE_RUNTIME,
    RUNS,
    TRAINER,
    node_runtime,
    pods,
    printed,
    start_flags,
)
from tests.support.lifecycle import run_stage, run_step, wait_for_drained_jobset


def _summary(label: str, seconds: list[float]) -> str:
    return (
        f"{label}: median {statistics.median(seconds):.2f} s, "
        f"min {min(seconds):.2f} s, max {max(seconds):.2f} s ({len(seconds)} runs)"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.node.bench")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    with ControlPlane(Path(tempfile.mkdtemp(prefix="dispatch-k8s-bench-")), node=True) as plane:
        assert plane.started_seconds is not None
        assert plane.node_started_seconds is not None
        sys.stdout.write(
            f"local cluster ready in {plane.started_seconds:.1f} s, "
            f"of which the node {plane.node_started_seconds:.1f} s\n"
        )
        api = config.new_client_from_config(config_file=str(plane.kubeconfig))  # type: ignore[no-untyped-call]
        core = client.CoreV1Api(api)
        namespace = f"dispatch-bench-{secrets.token_hex(3)}"
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        with contextlib.suppress(client.ApiException):
            client.CustomObjectsApi(api).create_cluster_custom_object(
                *TRAINER, "clustertrainingruntimes", node_runtime()
            )

        def step(name: str, *flags: str) -> dict[str, object]:
            run = run_stage(lambda *a: run_step(*a, kubeconfig=plane.kubeconfig), name, *flags)
            assert run.code == 0, run.error
            return run.result

        flags = start_flags(namespace, NODE_RUNTIME, train=RUNS)
        name = str(step("start", *flags)["name"])
        target = ("--namespace", namespace, "--name", name)
        steps, first_lines = [], []
        for admission in range(1, args.runs + 1):
            began = time.monotonic()
            step("unsuspend", *target)
            steps.append(time.monotonic() - began)
            printed(core, namespace, name, restart=0, admission=admission)
            first_lines.append(time.monotonic() - began)
            step("hold", *target)
            wait_for_drained_jobset(api, namespace, name)
            # The next pod needs the old one's host port (torch, under hostNetwork).
            wait_until(lambda: not pods(core, namespace, name) or None, what="the pod to go")
        sys.stdout.write(_summary("dispatch-unsuspend itself", steps) + "\n")
        sys.stdout.write(_summary("dispatch-unsuspend to the first line", first_lines) + "\n")
        core.delete_namespace(namespace)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
