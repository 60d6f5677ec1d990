"""The demo (README's main job): both lifecycles on the local control plane, as a table.

`python -m tests.demo` starts the local control plane (tests/cluster), or uses the cluster of
`--kubeconfig`, then drives a plain-mode and a Kueue-mode TrainJob through the steps, playing
the kubelet, and prints what each execution saw: R, A, J, DISPATCH_EPOCH, DISPATCH_ATTEMPT.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import secrets
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import yaml
from kubernetes import client, config

from core import wire
from tests.cluster.harness import ControlPlane
from tests.integration.lifecycle import (
    Execution,
    Kubelet,
    StepRun,
    admit_and_approve,
    as_dict,
    run_stage,
    run_step,
    wait_for_drained_jobset,
)
from tests.kueue_objects import KueueSetup, condition
from tests.wait import wait_until

RUNTIME: Final = Path(__file__).resolve().parents[1] / "pipelines/runtimes/torch-distributed.yaml"
TRAINER: Final = (wire.TRAINER_GROUP, wire.TRAINER_VERSION)


@dataclass(slots=True)
class Demo:
    """One cluster, one namespace, the steps and a kubelet; rows of what executions saw."""

    kubeconfig: Path
    api: client.ApiClient
    namespace: str
    rows: list[tuple[str, str, Execution]] = field(default_factory=list)

    def step(self, name: str, *args: str) -> StepRun:
        """Run a step; a failure stops the demo with the step's own message."""
        run = run_stage(functools.partial(run_step, kubeconfig=self.kubeconfig), name, *args)
        if run.code != 0:
            raise SystemExit(f"dispatch-{name} exited {run.code}: {run.error}")
        return run

    def start(self, job_id: str, submission: int, *extra: str) -> str:
        """dispatch-start with a small request (G=1, attempt 0); the TrainJob's name."""
        request = {
            "namespace": self.namespace,
            "runtime-name": "dispatch-torch-distributed",
            "job-id": job_id,
            "generation": "1",
            "submission": str(submission),
            "attempt": "0",
            "image": "registry.example/trainer:1",
            "command": "python",
        }
        flags = [f"--{key}={value}" for key, value in request.items()]
        return str(self.step("start", *flags, *extra).result["name"])

    def see(self, mode: str, event: str, kubelet: Kubelet, name: str, **wanted: int) -> Execution:
        """Record the execution that the pod of attempt `restart` with A=`admission` sees."""
        execution = kubelet.execute(kubelet.wait_for_pod(name, **wanted))
        self.rows.append((mode, event, execution))
        return execution

    def table(self) -> str:
        """The executions, one row each."""
        header = f"{'mode':<6} {'event':<24} {'R':>3} {'A':>3} {'J':>3}  {'epoch':<16} attempt"
        lines = [header, "-" * len(header)]
        for mode, event, e in self.rows:
            lines.append(
                f"{mode:<6} {event:<24} {e.r:>3} {e.admission:>3} {e.restart:>3}  "
                f"{e.epoch:<16} {e.attempt}"
            )
        return "\n".join(lines)


def plain_lifecycle(demo: Demo, kubelet: Kubelet) -> None:
    """Open, a JobSet restart, hold, Release."""
    name = demo.start("demo-plain", 1)
    target = ("--namespace", demo.namespace, "--name", name)
    demo.step("unsuspend", *target)
    first = kubelet.wait_for_pod(name, restart=0, admission=1)
    demo.see("plain", "open", kubelet, name, restart=0, admission=1)
    kubelet.set_phase(first, "Failed")
    demo.see("plain", "JobSet restart", kubelet, name, restart=1, admission=1)
    demo.step("hold", *target)
    wait_for_drained_jobset(demo.api, demo.namespace, name)
    demo.step("unsuspend", *target)
    demo.see("plain", "release after hold", kubelet, name, restart=1, admission=2)


def kueue_lifecycle(demo: Demo, kubelet: Kubelet, kueue: KueueSetup) -> None:
    """Admission, preemption by a higher priority, re-admission."""
    low, high = f"{demo.namespace}-low", f"{demo.namespace}-high"
    kueue.install(cpu="1", priorities={low: 10, high: 1000})
    queued = [f"--{key.replace('_', '-')}={value}" for key, value in kueue.queued_request().items()]
    name = demo.start("demo-kueue", 2, "--priority-class", low, *queued)
    admit_and_approve(demo.step, demo.namespace, name, kueue.check)
    demo.see("kueue", "admitted", kubelet, name, restart=0, admission=1)
    custom = client.CustomObjectsApi(demo.api)
    victim = custom.get_namespaced_custom_object(*TRAINER, demo.namespace, "trainjobs", name)
    victim_uid = as_dict(victim)["metadata"]["uid"]
    preemptor = demo.start("demo-urgent", 3, "--priority-class", high, *queued)

    def evicted() -> bool | None:
        workload = kueue.workload_of(victim_uid)
        return True if workload and condition(workload, "Evicted") == "True" else None

    wait_until(evicted, what="Kueue to preempt the first job", timeout=120)
    admit_and_approve(demo.step, demo.namespace, preemptor, kueue.check)
    demo.see("kueue", "preemptor admitted", kubelet, preemptor, restart=0, admission=1)
    custom.delete_namespaced_custom_object(*TRAINER, demo.namespace, "trainjobs", preemptor)
    admit_and_approve(demo.step, demo.namespace, name, kueue.check)
    demo.see("kueue", "re-admitted", kubelet, name, restart=0, admission=2)


@contextlib.contextmanager
def cluster(kubeconfig: Path | None) -> Iterator[Path]:
    """The given cluster, or a local control plane for the duration of the demo."""
    if kubeconfig is not None:
        yield kubeconfig
        return
    with ControlPlane(Path(tempfile.mkdtemp(prefix="dispatch-k8s-demo-"))) as plane:
        sys.stderr.write(f"control plane ready in {plane.started_seconds:.1f}s\n")
        yield plane.kubeconfig


def main(argv: list[str]) -> int:
    """Run both lifecycles and print the table of executions."""
    parser = argparse.ArgumentParser(prog="python -m tests.demo")
    parser.add_argument("--kubeconfig", type=Path, default=None)
    args = parser.parse_args(argv)
    with cluster(args.kubeconfig) as kubeconfig:
        api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        core = client.CoreV1Api(api)
        namespace = f"dispatch-demo-{secrets.token_hex(3)}"
        with contextlib.suppress(client.ApiException):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        with contextlib.suppress(client.ApiException):
            client.CustomObjectsApi(api).create_cluster_custom_object(
                *TRAINER, "clustertrainingruntimes", yaml.safe_load(RUNTIME.read_text())
            )
        demo = Demo(kubeconfig=kubeconfig, api=api, namespace=namespace)
        kubelet = Kubelet(api, namespace)
        kueue = KueueSetup(client.CustomObjectsApi(api), namespace)
        try:
            plain_lifecycle(demo, kubelet)
            kueue_lifecycle(demo, kubelet, kueue)
        finally:
            sys.stdout.write(demo.table() + "\n")
            kueue.delete()
            core.delete_namespace(namespace)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
