"""`python -m tests.bench.admission`: what the admission check costs, against none.

Two ClusterQueues on one cluster, alike but for this project's AdmissionCheck: one gated by
`dispatch-admission-controller` (one replica, --workers as given, the shipped Lease and resync
timings), one without any check. Each round holds both queues (`stopPolicy: Hold`), creates N
dispatch TrainJobs in each, and releases them together, so Kueue reserves quota for N Workloads
at once in each queue. A watch notes, by this process's monotonic clock, when each Workload is
first seen with QuotaReserved and when first seen Admitted (the API's own times have whole
seconds); the figure is the time between, p50 and p99 over every Workload of N's rounds; beside
it, the time from the queue's release to Admitted, the whole of Kueue's work and ours. For each
N, from the controller's own metrics: the requests it sent per Workload gated (each request
takes a token of --kube-api-qps, so the rate limiter's count is the request count), and whether
every reservation was raised once and approved once. The controller runs with --no-audit: its
requests are the gate's alone (the auditor has its own benchmark, tests.bench.auditor). Its CPU
time and resident memory come from /proc: while idle, and over the rounds of each N.

    python -m tests.bench.admission                    # starts its own control plane
    python -m tests.bench.admission --kubeconfig KC    # an existing one (python -m tests.up)
    python -m tests.bench.admission --concurrency 1 100 --rounds-scale 0.5   # a part of it

This is a benchmark, not a test: nothing here fails on a slow figure (docs/design.md §4).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes import client, config, watch
from prometheus_client.parser import text_string_to_metric_families

from dispatch_k8s.controller.settings import ControllerSettings
from dispatch_k8s.core.rules.errors import Fenced
from tests.bench.steps import cluster_at, machine_line, say
from tests.cluster.process import free_ports
from tests.cluster.wait import wait_until
from tests.support.kueue_objects import KUEUE, KueueSetup, condition
from tests.support.replicas import (
    Replica,
    end,
    launch,
    replica_argv,
    sample_of,
    wait_ready,
)
from tests.support.requests import trainjob_body
from tests.support.shipped import REPO

CONCURRENCY: Final = (1, 10, 100, 1000)
ROUNDS: Final = {1: 20, 10: 5, 100: 2, 1000: 1}  # about the same Workloads at N up to 100
TRAINER: Final = ("trainer.kubeflow.org", "v1alpha1")
QUEUES: Final = ("bench-check", "bench-plain")  # one namespace (and ClusterQueue) each
TICKS: Final = os.sysconf("SC_CLK_TCK")
IDLE_SECONDS: Final = 30.0


@dataclass
class Sightings:
    """When each Workload was first seen reserved and first seen admitted."""

    released: dict[str, float] = field(default_factory=dict)  # its queue let go of it
    reserved: dict[str, float] = field(default_factory=dict)
    approved: dict[str, float] = field(default_factory=dict)  # our check Ready
    admitted: dict[str, float] = field(default_factory=dict)
    namespace_of: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def see(self, workload: dict[str, Any]) -> None:
        now = time.monotonic()
        uid, namespace = workload["metadata"]["uid"], workload["metadata"]["namespace"]
        with self.lock:
            self.namespace_of[uid] = namespace
            if condition(workload, "QuotaReserved") == "True":
                self.reserved.setdefault(uid, now)
            states = workload.get("status", {}).get("admissionChecks") or []
            if any(state.get("state") == "Ready" for state in states):
                self.approved.setdefault(uid, now)
            if condition(workload, "Admitted") == "True":
                self.admitted.setdefault(uid, now)

    def latencies(
        self, namespace: str, uids: set[str], *, until: str = "admitted", since: str = "reserved"
    ) -> list[float]:
        """From one sighting to another, for each of `uids` in `namespace` seen at both."""
        ends: dict[str, float] = getattr(self, until)
        starts: dict[str, float] = getattr(self, since)
        with self.lock:
            return [
                ends[uid] - starts[uid]
                for uid in uids
                if self.namespace_of.get(uid) == namespace and uid in ends and uid in starts
            ]


def follow(api: client.ApiClient, sightings: Sightings, stop: threading.Event) -> None:
    """Watch every Workload (both namespaces) until `stop`."""
    custom = client.CustomObjectsApi(api)
    version = ""
    while not stop.is_set():
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            custom.list_cluster_custom_object,
            *KUEUE,
            "workloads",
            resource_version=version,
            timeout_seconds=5,
        )
        for event in stream:
            obj = event["object"]
            version = obj["metadata"]["resourceVersion"]
            if obj["metadata"]["namespace"] in QUEUES:
                sightings.see(obj)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def memory_mib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def set_hold(custom: client.CustomObjectsApi, queue: str, *, held: bool) -> None:
    patch = {"spec": {"stopPolicy": "Hold" if held else "None"}}
    custom.patch_cluster_custom_object(*KUEUE, "clusterqueues", f"{queue}-cq", patch)


def workload_uids(custom: client.CustomObjectsApi, queue: str, count: int) -> set[str] | None:
    """The UIDs of the queue's Workloads once there are `count` of them (None until then)."""
    listed = custom.list_namespaced_custom_object(*KUEUE, queue, "workloads")
    assert isinstance(listed, dict)
    found = {item["metadata"]["uid"] for item in listed["items"]}
    return found if len(found) == count else None


@dataclass
class KeptRunning:
    """The controller as its Deployment keeps it: a process that exits 75 (its Lease lapsed,
    docs/kueue.md) is started again with the same arguments and name, as the kubelet restarts
    the pod's container; it takes its own Lease back at once. Any other exit fails the run.
    What the processes spent and counted is summed: an exited one's as last sampled."""

    argv: list[str]
    port: int
    work: Path
    replica: Replica
    exited: list[Replica] = field(default_factory=list)
    metrics: str = ""  # the running process's /metrics at its last sample
    carried: tuple[float, float] = (0.0, 0.0)  # CPU seconds and requests of exited processes
    last: tuple[float, float] = (0.0, 0.0)  # the running process's, at its last sample
    peak_rss: float = 0.0

    def sample(self) -> tuple[float, float]:
        """CPU seconds and requests sent so far, by every process; restarts one that exited 75."""
        code = self.replica.process.poll()
        if code is None:
            pid = self.replica.process.pid
            status, body = self.replica.get("/metrics")
            try:
                cpu, rss = cpu_seconds(pid), memory_mib(pid, "VmHWM")
            except FileNotFoundError:
                return self.sample()  # it exited meanwhile
            if status == 200:
                self.metrics = body
                self.last = (
                    cpu,
                    sample_of(body, "dispatch_admission_rate_limiter_wait_seconds_count"),
                )
            self.peak_rss = max(self.peak_rss, rss)
        elif code == Fenced.exit_code:
            self.exited.append(self.replica)
            self.carried = (self.carried[0] + self.last[0], self.carried[1] + self.last[1])
            self.last, self.metrics = (0.0, 0.0), ""
            name = f"bench-{len(self.exited)}"  # its log's name; its --identity is unchanged
            self.replica = launch(name, self.port, self.work, self.argv, env=dict(os.environ))
            wait_ready(self.replica)
        else:
            last = self.replica.records()[-3:]
            raise RuntimeError(f"the controller exited ({code}); its last records: {last}")
        return (self.carried[0] + self.last[0], self.carried[1] + self.last[1])

    @property
    def exits(self) -> list[str]:
        """When each exited process lost its Lease, by its log."""
        lost = (
            [r["time"] for r in replica.records() if r["message"] == "lost the leader Lease"]
            for replica in self.exited
        )
        return [times[-1] if times else "?" for times in lost]

    def logged(self, message: str) -> Counter[str]:
        """How often each Workload is named by `message` in the logs of every process."""
        return Counter(
            str(record["workload"])
            for replica in (*self.exited, self.replica)
            for record in replica.records()
            if record.get("message") == message and record.get("kind", "dispatch") == "dispatch"
        )


@contextmanager
def kept_running(kubeconfig: Path, work: Path, extra: Sequence[str]) -> Iterator[KeptRunning]:
    """The controller gating QUEUES[0], as its Deployment keeps it; killed at the end."""
    (port,) = free_ports(1)
    argv = replica_argv(kubeconfig, QUEUES[0], "bench", port, extra)
    first = launch("bench", port, work, argv, env=dict(os.environ))
    deployment = KeptRunning(argv, port, work, first)
    try:
        wait_ready(first)
        yield deployment
    finally:
        end(deployment.replica)


def one_round(
    api: client.ApiClient,
    runtime: str,
    sightings: Sightings,
    deployment: KeptRunning,
    count: int,
    index: int,
) -> dict[str, list[float]]:
    """N TrainJobs in each queue, released together; each queue's latencies."""
    custom = client.CustomObjectsApi(api)
    for queue in QUEUES:
        set_hold(custom, queue, held=True)
    names = {queue: [f"n{count}-r{index}-{i}" for i in range(count)] for queue in QUEUES}

    def create(queue: str, name: str) -> None:
        body = trainjob_body(
            name,
            runtime=runtime,
            namespace=queue,
            queue="queue",
            resources_per_node={"requests": {"cpu": "1"}},
        )
        body["metadata"]["name"] = name
        custom.create_namespaced_custom_object(*TRAINER, queue, "trainjobs", body)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda pair: create(*pair), [(q, n) for q in QUEUES for n in names[q]]))

    uids = {
        queue: wait_until(
            functools.partial(workload_uids, custom, queue, count),
            what=f"{count} Workloads in {queue}",
            timeout=300,
        )
        for queue in QUEUES
    }
    for queue in QUEUES:
        set_hold(custom, queue, held=False)
        with sightings.lock:
            sightings.released.update(dict.fromkeys(uids[queue], time.monotonic()))

    def all_admitted() -> bool | None:
        deployment.sample()
        done = sum(len(sightings.latencies(q, uids[q])) for q in QUEUES)
        return done == count * len(QUEUES) or None

    wait_until(all_admitted, what=f"{count} admissions in each queue", timeout=600)
    latencies = {queue: sightings.latencies(queue, uids[queue]) for queue in QUEUES}
    check = QUEUES[0]
    latencies["approval"] = sightings.latencies(check, uids[check], until="approved")
    latencies["kueue"] = sightings.latencies(check, uids[check], since="approved")
    for queue in QUEUES:
        latencies[f"{queue} whole"] = sightings.latencies(queue, uids[queue], since="released")
    for queue in QUEUES:
        custom.delete_collection_namespaced_custom_object(*TRAINER, queue, "trainjobs")
    for queue in QUEUES:
        wait_until(
            functools.partial(workload_uids, custom, queue, 0),
            what=f"the Workloads of {queue} to go",
            timeout=300,
        )
    return latencies


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def p50_p99(values: Sequence[float]) -> str:
    return f"{percentile(values, 0.5) * 1000:.0f} / {percentile(values, 0.99) * 1000:.0f} ms"


def setup(api: client.ApiClient) -> tuple[str, list[KueueSetup]]:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    runtime = yaml.safe_load((REPO / "pipelines/runtimes/torch-distributed.yaml").read_text())
    try:
        custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
    except client.ApiException as e:
        if e.status != 409:
            raise
    queues = []
    for name in QUEUES:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        queue = KueueSetup(custom, name)
        queue.install(cpu=str(max(CONCURRENCY)), with_check=name == "bench-check")
        queues.append(queue)
    return str(runtime["metadata"]["name"]), queues


def bench(kubeconfig: Path, work: Path, rounds: dict[int, int], workers: int) -> list[str]:
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), client_configuration=configuration
    )
    api = client.ApiClient(configuration)
    runtime, queues = setup(api)
    sightings, stop = Sightings(), threading.Event()
    watcher = threading.Thread(target=follow, args=(api, sightings, stop), daemon=True)
    watcher.start()
    try:
        # The shipped Lease and resync timings, over the tests' shorter ones (replicas()).
        shipped = ControllerSettings.model_fields
        extra = (
            *("--workers", str(workers), "--no-audit"),
            *("--lease-seconds", str(shipped["lease_seconds"].default)),
            *("--resync-seconds", f"{shipped['resync_seconds'].default:g}"),
        )
        with kept_running(kubeconfig, work, extra) as deployment:
            return measure(api, runtime, sightings, deployment, rounds)
    finally:
        stop.set()
        for queue in queues:
            queue.delete()
        core = client.CoreV1Api(api)
        for name in QUEUES:
            core.delete_namespace(name)


REQUESTS: Final = "dispatch_admission_request_duration_seconds"


def request_times(body: str) -> dict[str, tuple[float, float]]:
    """From a /metrics body, by `VERB resource`: the seconds and the count of its requests."""
    totals: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples if family.name == REQUESTS else ():
            key = f"{sample.labels.get('verb')} {sample.labels.get('resource')}"
            totals.setdefault(key, {})[sample.name.removeprefix(REQUESTS)] = sample.value
    return {key: (told.get("_sum", 0.0), told.get("_count", 0.0)) for key, told in totals.items()}


def profile(before: str, after: str, gated: int) -> str:
    """Where a pass's time went between two /metrics bodies of one process: for each verb and
    resource, requests per Workload gated and their mean time: "PUT trainjobs 1.00 of 35 ms"."""
    start, end = request_times(before), request_times(after)
    parts = []
    for key in sorted(end, key=lambda k: -(end[k][0] - start.get(k, (0.0, 0.0))[0])):
        seconds = end[key][0] - start.get(key, (0.0, 0.0))[0]
        count = end[key][1] - start.get(key, (0.0, 0.0))[1]
        if count:
            parts.append(f"{key} {count / gated:.2f} of {seconds / count * 1000:.0f} ms")
    return "; ".join(parts)


def measure(
    api: client.ApiClient,
    runtime: str,
    sightings: Sightings,
    deployment: KeptRunning,
    rounds: dict[int, int],
) -> list[str]:
    say(f"idle for {IDLE_SECONDS:g} s")
    began, (cpu, _) = time.monotonic(), deployment.sample()
    threading.Event().wait(IDLE_SECONDS)
    idle_cpu = (deployment.sample()[0] - cpu) / (time.monotonic() - began)
    idle_rss = memory_mib(deployment.replica.process.pid, "VmRSS")
    lines = [
        "| concurrent reservations | Workloads | with the check p50 / p99 "
        "| of which the controller's approval p50 / p99 | then Kueue's admission p50 "
        "| without a check p50 / p99 | released to Admitted, with / without the check p50 |",
        "|---|---|---|---|---|---|---|",
    ]
    costs = [
        "| concurrent reservations | requests per Workload | raises / approvals per Workload "
        "(Workloads raised / approved other than once) | CPU per Workload | peak RSS "
        "| Lease lost (exit 75, restarted) |",
        "|---|---|---|---|---|---|",
    ]
    profiles = ["Requests per Workload gated, and their mean time, by verb and resource:"]
    for count, repeat in rounds.items():
        say(f"N={count}: {repeat} rounds")
        (cpu, sent), began = deployment.sample(), time.monotonic()
        raised, approved = deployment.logged("raised admission"), deployment.logged("approved")
        exits, metrics_before = len(deployment.exited), deployment.metrics
        keys = (*QUEUES, "approval", "kueue", *(f"{queue} whole" for queue in QUEUES))
        gathered: dict[str, list[float]] = {key: [] for key in keys}
        for index in range(repeat):
            for queue, values in one_round(
                api, runtime, sightings, deployment, count, index
            ).items():
                gathered[queue] += values
        checked, plain = gathered["bench-check"], gathered["bench-plain"]
        lines.append(
            f"| {count} | {len(checked)} | {p50_p99(checked)} | {p50_p99(gathered['approval'])} "
            f"| {statistics.median(gathered['kueue']) * 1000:.0f} ms | {p50_p99(plain)} "
            f"| {statistics.median(gathered['bench-check whole']) * 1000:.0f} / "
            f"{statistics.median(gathered['bench-plain whole']) * 1000:.0f} ms |"
        )
        (cpu_after, sent_after), wall = deployment.sample(), time.monotonic() - began
        spent, gated = cpu_after - cpu, len(checked)
        raises = deployment.logged("raised admission") - raised
        approvals = deployment.logged("approved") - approved
        names = {f"trainjob-n{count}-r{i}-" for i in range(repeat)}
        ours = [w for w in raises | approvals if any(w.startswith(n) for n in names)]
        not_once = (
            sum(1 for w in ours if raises[w] != 1) + gated - len(ours),
            sum(1 for w in ours if approvals[w] != 1) + gated - len(ours),
        )
        costs.append(
            f"| {count} | {(sent_after - sent) / gated:.1f} "
            f"| {raises.total() / gated:.2f} / {approvals.total() / gated:.2f} "
            f"({not_once[0]} / {not_once[1]}) "
            f"| {spent / gated * 1000:.1f} ms ({spent / wall * 100:.1f}% of a core over "
            f"{wall:.0f} s) | {deployment.peak_rss:.0f} MiB "
            f"| {', '.join(deployment.exits[exits:]) or 'no'} |"
        )
        spent_on = (
            profile(metrics_before, deployment.metrics, gated)
            if len(deployment.exited) == exits
            else "not told: the controller restarted"
        )
        profiles.append(f"- N={count}: {spent_on}")
        say(lines[-1])
        say(costs[-1])
        say(profiles[-1])
    return [
        *lines,
        "",
        *costs,
        "",
        *profiles,
        "",
        f"controller idle: {idle_cpu * 100:.2f}% of a core, RSS {idle_rss:.0f} MiB",
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.admission", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, help="an existing cluster (default: start one)")
    parser.add_argument(
        "--rounds-scale",
        type=float,
        default=1.0,
        help="multiply the rounds at each N (default 1: 20, 5, 2 and 1 at N=1, 10, 100, 1000)",
    )
    parser.add_argument(
        "--workers", type=int, default=4, help="the controller's --workers (default: 4, its own)"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        choices=CONCURRENCY,
        default=list(CONCURRENCY),
        help="which N to run (default: all of 1 10 100 1000)",
    )
    args = parser.parse_args(argv)
    rounds = {
        n: max(1, round(r * args.rounds_scale)) for n, r in ROUNDS.items() if n in args.concurrency
    }
    with tempfile.TemporaryDirectory(prefix="dispatch-bench-") as scratch:
        work = Path(scratch)
        with cluster_at(args.kubeconfig, work) as kubeconfig:
            header = f"{machine_line()}; the controller with --workers {args.workers}"
            lines = bench(kubeconfig, work, rounds, args.workers)
            sys.stdout.write("\n".join([header, "", *lines]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
