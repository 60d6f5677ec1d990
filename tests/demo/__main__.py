"""The demo (README's main job): both lifecycles on the local cluster, as a table.

`python -m tests.demo` starts the local cluster (the control plane and a real node: kubelet,
containerd, kube-scheduler), or uses the cluster of `--kubeconfig`, then drives a plain-mode
and a Kueue-mode TrainJob through the steps. Every execution's own process prints
DISPATCH_EPOCH and DISPATCH_ATTEMPT; the table shows what it printed, read from its log
(pods/log), beside its pod's A and J and whether the formulas give the same.
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

from kubernetes import client, config

from dispatch_k8s.core.rules.identity import Identity
from tests.cluster.engine import BUSYBOX
from tests.cluster.harness import ControlPlane
from tests.cluster.wait import wait_until
from tests.support.executions import (
    FINISHES,
    NODE_RUNTIME,
    RUNS,
    TRAIN,
    TRAINER,
    Printed,
    node_runtime,
    printed,
    start_flags,
)
from tests.support.kueue_objects import KueueSetup, condition
from tests.support.lifecycle import (
    StepRun,
    admit_and_approve,
    as_dict,
    run_stage,
    run_step,
    wait_for_drained_jobset,
)

CLUSTER_START_SECONDS: Final = 60  # the local cluster with its node, warm, here
# What each execution must print, by (request, A, J), written out from docs/design.md's
# formulas (G = 3, N = 7, attempt 1: DISPATCH_EPOCH = G x 10^12 + N x 10^6 + A + J), not
# computed by the code under test.
EXPECTED: Final = {
    ("demo-plain", 1, 0): (3_000007_000001, "demo-plain.7.1.1.0"),
    ("demo-plain", 1, 1): (3_000007_000002, "demo-plain.7.1.1.1"),
    ("demo-plain", 2, 1): (3_000007_000003, "demo-plain.7.1.2.1"),
    ("demo-kueue", 1, 0): (3_000007_000001, "demo-kueue.7.1.1.0"),
    ("demo-kueue", 2, 0): (3_000007_000002, "demo-kueue.7.1.2.0"),
    ("demo-urgent", 1, 0): (3_000007_000001, "demo-urgent.7.1.1.0"),
}


@dataclass(frozen=True, slots=True)
class Row:
    """One execution: where it came from, its pod's A and J, and what its process printed."""

    mode: str
    event: str
    admission: int
    restart: int
    identity: Identity
    printed: Printed

    @property
    def as_formulas_say(self) -> bool:
        wanted = EXPECTED.get((self.identity.job_id, self.admission, self.restart))
        return (self.printed.epoch, self.printed.attempt) == wanted


@dataclass(slots=True)
class Demo:
    """One cluster, one namespace, the steps; rows of what the executions printed."""

    kubeconfig: Path
    api: client.ApiClient
    namespace: str
    image: str
    rows: list[Row] = field(default_factory=list)

    def step(self, name: str, *args: str) -> StepRun:
        """Run a step; a failure stops the demo with the step's own message."""
        run = run_stage(functools.partial(run_step, kubeconfig=self.kubeconfig), name, *args)
        if run.code != 0:
            raise SystemExit(f"dispatch-{name} exited {run.code}: {run.error}")
        return run

    def start(self, identity: Identity, train: str, *extra: str) -> str:
        """dispatch-start with a training command that prints; the TrainJob's name."""
        flags = start_flags(
            self.namespace,
            NODE_RUNTIME,
            *extra,
            train=train,
            job_id=identity.job_id,
            image=self.image,
        )
        return str(self.step("start", *flags).result["name"])

    def see(self, mode: str, event: str, name: str, identity: Identity, *, a: int, j: int) -> None:
        """Record what the execution with A = a and J = j printed, and say it at once."""
        say(f"{mode}: {event}: {identity.job_id} waits for its execution A={a} J={j} to print")
        line = printed(client.CoreV1Api(self.api), self.namespace, name, restart=j, admission=a)
        row = Row(mode, event, a, j, identity, line)
        self.rows.append(row)
        say(
            f"{mode}: {event}: {identity.job_id} printed R={a + j} "
            f"DISPATCH_EPOCH={line.epoch} DISPATCH_ATTEMPT={line.attempt}"
        )

    def table(self) -> str:
        """The executions, one row each."""
        header = (
            f"{'mode':<6} {'job':<12} {'event':<20} {'R':>2} {'A':>2} {'J':>2}  "
            f"{'DISPATCH_EPOCH':<16} {'DISPATCH_ATTEMPT':<24} formulas"
        )
        lines = [header, "-" * len(header)]
        for row in self.rows:
            lines.append(
                f"{row.mode:<6} {row.identity.job_id:<12} {row.event:<20} "
                f"{row.admission + row.restart:>2} {row.admission:>2} {row.restart:>2}  "
                f"{row.printed.epoch:<16} {row.printed.attempt:<24} "
                f"{'agree' if row.as_formulas_say else 'DIFFER'}"
            )
        return "\n".join(lines)

    def verdict(self) -> tuple[bool, str]:
        """Whether every epoch is above the one before it of the same job, and the formulas
        agree with every line printed; and the closing line that says so."""
        last: dict[str, int] = {}
        rising = True
        for row in self.rows:
            job = row.identity.job_id
            rising = rising and row.printed.epoch > last.get(job, 0)
            last[job] = row.printed.epoch
        agree = all(row.as_formulas_say for row in self.rows)
        passed = rising and agree and bool(self.rows)
        return passed, (
            f"{len(self.rows)} executions of {len(last)} jobs; every epoch above the last of its "
            f"job: {'yes' if rising else 'NO'}; every line as the formulas say: "
            f"{'yes' if agree else 'NO'}: {'PASS' if passed else 'FAIL'}"
        )


def say(line: str) -> None:
    """One line of narration, as it happens."""
    sys.stderr.write(f"demo: {line}\n")


def plain_lifecycle(demo: Demo) -> None:
    """Open; the first container exits 1 and JobSet restarts it; hold; Release; hold."""
    identity = Identity(job_id="demo-plain", generation=3, submission=7, attempt=1)
    name = demo.start(identity, TRAIN)
    target = ("--namespace", demo.namespace, "--name", name)
    demo.step("unsuspend", *target)
    demo.see("plain", "open", name, identity, a=1, j=0)
    demo.see("plain", "JobSet restart", name, identity, a=1, j=1)
    demo.step("hold", *target)
    wait_for_drained_jobset(demo.api, demo.namespace, name)
    demo.step("unsuspend", *target)
    demo.see("plain", "release after hold", name, identity, a=2, j=1)
    # Held again, so its pod frees the node's host port 29400 (torch) for the Kueue jobs.
    demo.step("hold", *target)
    wait_for_drained_jobset(demo.api, demo.namespace, name)


def kueue_lifecycle(demo: Demo, kueue: KueueSetup) -> None:
    """Admission, preemption by a higher priority, re-admission once the preemptor is done."""
    low, high = f"{demo.namespace}-low", f"{demo.namespace}-high"
    kueue.install(cpu="1", priorities={low: 10, high: 1000})
    queued = [f"--{key.replace('_', '-')}={value}" for key, value in kueue.queued_request().items()]
    victim = Identity(job_id="demo-kueue", generation=3, submission=7, attempt=1)
    name = demo.start(victim, RUNS, "--priority-class", low, *queued)
    admit_and_approve(demo.step, demo.namespace, name, kueue.check)
    demo.see("kueue", "admitted", name, victim, a=1, j=0)
    custom = client.CustomObjectsApi(demo.api)
    read = custom.get_namespaced_custom_object(*TRAINER, demo.namespace, "trainjobs", name)
    victim_uid = as_dict(read)["metadata"]["uid"]
    urgent = Identity(job_id="demo-urgent", generation=3, submission=7, attempt=1)
    preemptor = demo.start(urgent, FINISHES, "--priority-class", high, *queued)

    def evicted() -> bool | None:
        workload = kueue.workload_of(victim_uid)
        return True if workload and condition(workload, "Evicted") == "True" else None

    wait_until(evicted, what="Kueue to preempt the first job", timeout=120)
    admit_and_approve(demo.step, demo.namespace, preemptor, kueue.check)
    demo.see("kueue", "preemptor admitted", preemptor, urgent, a=1, j=0)
    # The preemptor's command ends and its quota frees: the first job is admitted again.
    admit_and_approve(demo.step, demo.namespace, name, kueue.check)
    demo.see("kueue", "re-admitted", name, victim, a=2, j=0)


@contextlib.contextmanager
def cluster(kubeconfig: Path | None) -> Iterator[Path]:
    """The given cluster, or the local cluster (with its node) for the duration of the demo."""
    if kubeconfig is not None:
        yield kubeconfig
        return
    run_dir = Path(tempfile.mkdtemp(prefix="dispatch-k8s-demo-"))
    say(
        "starting the local cluster: etcd, kube-apiserver, kube-controller-manager, JobSet, "
        "Kueue, Trainer, and a real node (kubelet, containerd, kube-scheduler); about "
        f"{CLUSTER_START_SECONDS} s on two cores"
    )
    with ControlPlane(run_dir, node=True, progress=say) as plane:
        say(f"local cluster ready in {plane.started_seconds:.1f}s")
        yield plane.kubeconfig


def main(argv: list[str]) -> int:
    """Run both lifecycles and print the table of executions."""
    parser = argparse.ArgumentParser(prog="python -m tests.demo")
    parser.add_argument("--kubeconfig", type=Path, default=None)
    parser.add_argument(
        "--image", default=BUSYBOX, help="training image with /bin/sh (default: the local node's)"
    )
    args = parser.parse_args(argv)
    with cluster(args.kubeconfig) as kubeconfig:
        api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        core = client.CoreV1Api(api)
        namespace = f"dispatch-demo-{secrets.token_hex(3)}"
        with contextlib.suppress(client.ApiException):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        with contextlib.suppress(client.ApiException):
            client.CustomObjectsApi(api).create_cluster_custom_object(
                *TRAINER, "clustertrainingruntimes", node_runtime()
            )
        demo = Demo(kubeconfig=kubeconfig, api=api, namespace=namespace, image=args.image)
        kueue = KueueSetup(client.CustomObjectsApi(api), namespace)
        try:
            say("plain mode: open, a JobSet restart (the first container exits 1), hold, release")
            plain_lifecycle(demo)
            say("Kueue mode: admission, preemption by a higher priority, re-admission")
            kueue_lifecycle(demo, kueue)
        finally:
            sys.stdout.write(demo.table() + "\n")
            kueue.delete()
            core.delete_namespace(namespace)
    passed, closing = demo.verdict()
    sys.stdout.write(closing + "\n")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
