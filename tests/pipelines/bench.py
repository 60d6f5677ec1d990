"""Benchmark: the shipped Kueue pipelines on the real Argo and Tekton controllers.

docs/development.md: Pipelines on the local cluster.

    .venv/bin/python -m tests.pipelines.bench [--runs N] [--loop-seconds S]

For each engine, N times: a queued TrainJob through `dispatch-kueue`, timed from the submit to
the first line its training pod prints (every pod start-up included: start, the gates, the
training pod); then the job evicted and admitted again, timed while the gates' pod already
runs, with the gate itself (the Workload's quota reserved → its check Ready) timed apart.
Last, the gates going round with no reservation to gate (wait-seconds 1, pause 0) for S
seconds: rounds, CPU per round, and the Workflow's size and pod nodes as it ages.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tests.cluster import engine, kube
from tests.cluster.harness import ControlPlane
from tests.cluster.wait import wait_until
from tests.pipelines.runs import (
    ARGO,
    ARGO_FILES,
    TEKTON_FILES,
    gates,
    gates_running,
    install_shipped,
    start_pipeline,
    start_request,
    started_trainjob,
    submit_workflow,
)
from tests.support.executions import NODE_RUNTIME, RUNS, TRAINER, node_runtime, pods, printed
from tests.support.kueue_objects import KueueSetup, condition
from tests.support.lifecycle import as_dict, read_trainjob
from tests.support.step_identity import install_identity


@dataclass(frozen=True, slots=True)
class Admission:
    """One job through `dispatch-kueue`, in seconds."""

    first_line: float  # from the submit to the first line printed: every pod started
    again_first_line: float  # from the re-activation to the next first line: the loop runs
    again_gate: float  # the Workload's quota reserved (polled) to its check Ready


def _summary(label: str, seconds: list[float]) -> str:
    return (
        f"{label}: median {statistics.median(seconds):.2f} s, "
        f"min {min(seconds):.2f} s, max {max(seconds):.2f} s ({len(seconds)} runs)"
    )


def _gate_seconds(kueue: KueueSetup, uid: str) -> float:
    """Poll the Workload (every 0.2 s): seconds from its reservation to its check Ready."""
    reserved: float | None = None

    def ready() -> float | None:
        nonlocal reserved
        workload = kueue.workload_of(uid)
        if workload is None:
            return None
        if reserved is None and condition(workload, "QuotaReserved") == "True":
            reserved = time.monotonic()
        checks = workload.get("status", {}).get("admissionChecks") or []
        if reserved is not None and any(c.get("state") == "Ready" for c in checks):
            return time.monotonic() - reserved
        return None

    return wait_until(ready, what="the admission gated", timeout=300)


class Bench:
    """One namespace with the shipped pipelines, queues and identity on a running plane."""

    def __init__(self, plane: ControlPlane, work: Path, image: str) -> None:
        self.image = image
        self.api = config.new_client_from_config(config_file=str(plane.kubeconfig))  # type: ignore[no-untyped-call]
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.namespace = f"dispatch-bench-{secrets.token_hex(3)}"
        self.core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace))
        )
        wait_until(
            lambda: self.core.list_namespaced_service_account(self.namespace).items or None,
            what="the default ServiceAccount",
            timeout=60,
        )
        install_identity(self.api, self.namespace, admin_kubeconfig=plane.kubeconfig, work=work)
        install_shipped(self.api, self.namespace, ARGO_FILES + TEKTON_FILES)
        self.kueue = KueueSetup(self.custom, self.namespace)
        self.kueue.install(cpu="1")

    def parameters(self, job_id: str, *, wait: str = "900", pause: str = "5") -> dict[str, str]:
        request = start_request(
            self.namespace, NODE_RUNTIME, train=RUNS, queue=self.kueue.local_queue, job_id=job_id
        )
        request["resources_per_node"] = {"requests": {"cpu": "1"}}
        return {
            "request": json.dumps(request),
            "image": self.image,
            "check": self.kueue.check,
            "wait-seconds": wait,
            "pause-seconds": pause,
        }

    def admission(
        self, submit: Callable[[dict[str, str]], str], trainjob_of: Callable[[str], str]
    ) -> Admission:
        """A first admission (every pod started), then an eviction and a re-admission."""
        began = time.monotonic()
        name = trainjob_of(submit(self.parameters(f"b{secrets.token_hex(3)}")))
        printed(self.core, self.namespace, name, restart=0, admission=1)
        first_line = time.monotonic() - began
        uid = read_trainjob(self.custom, self.namespace, name)["metadata"]["uid"]
        self.kueue.set_active(uid, active=False)
        wait_until(
            lambda: not pods(self.core, self.namespace, name) or None,
            what="the evicted job's pods to go",
            timeout=120,
        )
        began = time.monotonic()
        self.kueue.set_active(uid, active=True)
        gate = _gate_seconds(self.kueue, uid)
        printed(self.core, self.namespace, name, restart=0, admission=2)
        again = time.monotonic() - began
        # Gone, and its pods with it: the next job's pod needs the torch port on this node.
        self.custom.delete_namespaced_custom_object(*TRAINER, self.namespace, "trainjobs", name)
        wait_until(
            lambda: not pods(self.core, self.namespace, name) or None,
            what="the job's pods to go",
            timeout=120,
        )
        return Admission(first_line=first_line, again_first_line=again, again_gate=gate)


def _workflow(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return kube.request(
        api, "GET", f"/apis/{'/'.join(ARGO)}/namespaces/{namespace}/workflows/{name}"
    )


def loop_cost(bench: Bench, plane: ControlPlane, seconds: float) -> str:
    """The gates going round with nothing to gate: rounds, CPU per round, workflow size."""
    # A job that holds the quota, and one that waits behind it: its gates see no reservation.
    holder = submit_workflow(
        bench.api, bench.namespace, "dispatch-kueue", bench.parameters("holder")
    )
    printed(
        bench.core,
        bench.namespace,
        gates_running(bench.api, bench.namespace, holder).trainjob,
        restart=0,
        admission=1,
    )
    waiter = submit_workflow(
        bench.api,
        bench.namespace,
        "dispatch-kueue",
        bench.parameters("waiter", wait="1", pause="0"),
    )
    start = gates_running(bench.api, bench.namespace, waiter)
    listed = as_dict(
        bench.core.list_namespaced_pod(
            bench.namespace, label_selector=f"workflows.argoproj.io/workflow={waiter}"
        )
    )["items"]
    uid = next(p["metadata"]["uid"] for p in listed if "kueue-gates" in p["metadata"]["name"])
    assert plane.node is not None
    cgroups = Path("/sys/fs/cgroup/cpuacct", plane.node.cgroup_root.strip("/"))
    usage = next(cgroups.rglob(f"pod{uid}/cpuacct.usage"))
    rows = []
    began, cpu0, rounds0 = time.monotonic(), int(usage.read_text()), start.quiet
    for checkpoint in (seconds / 4, seconds):
        while time.monotonic() - began < checkpoint:
            threading.Event().wait(1)
        now = gates(bench.api, bench.namespace, waiter)
        assert now is not None
        body = _workflow(bench.api, bench.namespace, waiter)
        rounds = now.quiet - rounds0
        cpu = (int(usage.read_text()) - cpu0) / 1e9
        rows.append(
            f"after {checkpoint:.0f} s: {rounds} rounds ({rounds / checkpoint * 60:.1f}/min), "
            f"{cpu / max(rounds, 1):.2f} s CPU per round, workflow {len(json.dumps(body))} bytes, "
            f"{now.pod_nodes} pod nodes"
        )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.pipelines.bench")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--loop-seconds", type=float, default=240)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="dispatch-k8s-bench-"))
    with ControlPlane(work / "plane", node=True) as plane:
        engines_seconds = plane.start_engines()
        tag = engine.build_step_image()
        assert plane.node is not None
        plane.node.import_images([tag])
        sys.stdout.write(f"engines ready in {engines_seconds:.1f} s\n")
        bench = Bench(plane, work, tag)
        bench.custom.create_cluster_custom_object(
            *TRAINER, "clustertrainingruntimes", node_runtime()
        )

        def argo_submit(parameters: dict[str, str]) -> str:
            return submit_workflow(bench.api, bench.namespace, "dispatch-kueue", parameters)

        def argo_trainjob(run: str) -> str:
            return gates_running(bench.api, bench.namespace, run).trainjob

        def tekton_submit(parameters: dict[str, str]) -> str:
            return start_pipeline(
                bench.api, bench.namespace, "dispatch-kueue", parameters, timeout="0"
            )

        def tekton_trainjob(run: str) -> str:
            return started_trainjob(bench.api, bench.namespace, run)

        for label, submit, trainjob_of in (
            ("Argo", argo_submit, argo_trainjob),
            ("Tekton", tekton_submit, tekton_trainjob),
        ):
            runs = [bench.admission(submit, trainjob_of) for _ in range(args.runs)]
            lines = [
                _summary(f"{label}, submit → first line", [r.first_line for r in runs]),
                _summary(
                    f"{label}, re-activated → next first line", [r.again_first_line for r in runs]
                ),
                _summary(f"{label}, the gate (reserved → Ready)", [r.again_gate for r in runs]),
            ]
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()
        sys.stdout.write("Argo gates with nothing to gate (wait-seconds 1, pause-seconds 0):\n")
        sys.stdout.write(loop_cost(bench, plane, args.loop_seconds) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
