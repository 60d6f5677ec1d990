"""`python -m tests.bench.admission`: what each Kueue mode costs, against plain Kueue.

Three ClusterQueues on one cluster, alike but for the mode, each in a namespace of its own with
the shipped policies bound as the tests bind them (tests/support/policies.py):

- `bench-plain`, the floor: plain Kueue, no AdmissionCheck and no policy bound in its namespace;
- `bench-policy`, policy mode: no AdmissionCheck, every policy bound, so the API server raises
  A as Kueue opens each TrainJob (raise-on-open.yaml), and `dispatch-admission-controller
  --no-gate` runs as the auditor only, telling each raise, as dist/install-kueue-policy.yaml;
- `bench-check`, check mode: this project's AdmissionCheck, gated by the controller with
  --no-audit (its requests are the gate's alone; the auditor has its own benchmark,
  tests.bench.auditor), every policy bound as dist/install-kueue.yaml installs them.

Each controller is one replica with the shipped Lease and resync timings, --workers as given.
Each round holds every queue (`stopPolicy: Hold`), creates N dispatch TrainJobs in each, and
releases them together, so Kueue reserves quota for N Workloads at once in each queue. No mode
goes first in every round: Kueue's scheduler takes the heads of the queues oldest first (their
creation times, in whole seconds), so the TrainJobs are created interleaved across the queues
and the queues created and released in an order turned by one each round (the rounds at each
N are a multiple of three but at N = 1,000). A watch
notes, by this process's monotonic clock, when each Workload is first seen reserved, with the
check Ready, and Admitted (the API's own times have whole seconds); the figure is the time
from the queue's release to Admitted, p50 and p99 over every Workload of N's rounds. Before a
round's jobs go, every reservation is verified raised exactly once: each TrainJob's floor
(its A) is 1 + its Workload's evictions (schedulingStats) in the two raising modes, and 0 on
the floor. For each N, from each controller's own metrics: the requests it sent per Workload
(each request takes a token of --kube-api-qps, so the rate limiter's count is the request
count); its CPU time and resident memory come from /proc, while idle and over each N's rounds.

    python -m tests.bench.admission                    # starts its own control plane
    python -m tests.bench.admission --kubeconfig KC    # an existing one (python -m tests.up)
    python -m tests.bench.admission --concurrency 1 100 --rounds-scale 0.5   # a part of it

The policies are installed trusting the local control plane's controller identities (the
tests' own, tests/support/policies.py) and are left installed: they bind only labelled
namespaces. This is a benchmark, not a test: nothing here fails on a slow figure (docs/design.md
§4); a floor that is not 1 + evictions is reported, not raised.
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kubernetes import client, config, watch
from prometheus_client.parser import text_string_to_metric_families

from dispatch_k8s.controller.settings import ControllerSettings
from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.rules.errors import Fenced
from tests.bench.steps import cluster_at, say
from tests.cluster.process import free_ports
from tests.cluster.wait import wait_until
from tests.support import policies
from tests.support.kueue_objects import KUEUE, KueueSetup, condition
from tests.support.machine import machine_line
from tests.support.replicas import (
    Replica,
    end,
    launch,
    replica_argv,
    sample_of,
    wait_ready,
)
from tests.support.requests import trainjob_body
from tests.support.shipped import install_runtime

CONCURRENCY: Final = (1, 10, 100, 1000)
# About the same Workloads at N up to 100, each queue first in as many rounds as the others.
ROUNDS: Final = {1: 21, 10: 6, 100: 3, 1000: 1}
TRAINER: Final = ("trainer.kubeflow.org", "v1alpha1")
# One namespace (and ClusterQueue) each: the floor, policy mode, check mode.
PLAIN: Final = "bench-plain"
POLICY: Final = "bench-policy"
CHECK: Final = "bench-check"
QUEUES: Final = (PLAIN, POLICY, CHECK)
# The policies bound in each namespace, as the tests bind them.
BOUND: Final[dict[str, policies.Policies]] = {PLAIN: "none", POLICY: "all", CHECK: "all"}
# Each mode's controller: the auditor alone in policy mode (as the policy bundle ships it), the
# gate alone in check mode. The floor has none.
CONTROLLED: Final = {POLICY: ("--no-gate",), CHECK: ("--no-audit",)}
TICKS: Final = os.sysconf("SC_CLK_TCK")
IDLE_SECONDS: Final = 30.0


@dataclass
class Sightings:
    """When each Workload was first seen reserved and admitted, and its TrainJob opened."""

    released: dict[str, float] = field(default_factory=dict)  # its queue let go of it
    reserved: dict[str, float] = field(default_factory=dict)
    approved: dict[str, float] = field(default_factory=dict)  # our check Ready
    admitted: dict[str, float] = field(default_factory=dict)
    namespace_of: dict[str, str] = field(default_factory=dict)
    job_of: dict[str, str] = field(default_factory=dict)  # the TrainJob's UID, by its owner ref
    opened_job: dict[str, float] = field(default_factory=dict)  # by TrainJob UID
    lock: threading.Lock = field(default_factory=threading.Lock)

    def see(self, workload: dict[str, Any]) -> None:
        now = time.monotonic()
        uid, namespace = workload["metadata"]["uid"], workload["metadata"]["namespace"]
        with self.lock:
            self.namespace_of[uid] = namespace
            for owner in workload["metadata"].get("ownerReferences") or []:
                self.job_of[uid] = owner["uid"]
            if condition(workload, "QuotaReserved") == "True":
                self.reserved.setdefault(uid, now)
            states = workload.get("status", {}).get("admissionChecks") or []
            if any(state.get("state") == "Ready" for state in states):
                self.approved.setdefault(uid, now)
            if condition(workload, "Admitted") == "True":
                self.admitted.setdefault(uid, now)

    def see_job(self, trainjob: dict[str, Any]) -> None:
        """A TrainJob seen open: Kueue opened it (in policy mode, the raise is in that write)."""
        now = time.monotonic()
        if trainjob["spec"].get("suspend") is False:
            with self.lock:
                self.opened_job.setdefault(trainjob["metadata"]["uid"], now)

    @property
    def opened(self) -> dict[str, float]:
        """When each Workload's TrainJob was first seen open (the caller holds the lock)."""
        return {w: self.opened_job[j] for w, j in self.job_of.items() if j in self.opened_job}

    def latencies(
        self, namespace: str, uids: set[str], *, until: str = "admitted", since: str = "released"
    ) -> list[float]:
        """From one sighting to another, for each of `uids` in `namespace` seen at both."""
        with self.lock:
            ends: dict[str, float] = getattr(self, until)
            starts: dict[str, float] = getattr(self, since)
            return [
                ends[uid] - starts[uid]
                for uid in uids
                if self.namespace_of.get(uid) == namespace and uid in ends and uid in starts
            ]


def follow(
    api: client.ApiClient,
    group: tuple[str, str],
    plural: str,
    see: Callable[[dict[str, Any]], None],
    stop: threading.Event,
) -> None:
    """Watch every object of `plural` (the benchmark's namespaces) until `stop`."""
    custom = client.CustomObjectsApi(api)
    version = ""
    while not stop.is_set():
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            custom.list_cluster_custom_object,
            *group,
            plural,
            resource_version=version,
            timeout_seconds=5,
        )
        for event in stream:
            obj = event["object"]
            version = obj["metadata"]["resourceVersion"]
            if obj["metadata"]["namespace"] in QUEUES:
                see(obj)


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


def listed(custom: client.CustomObjectsApi, group: tuple[str, str], queue: str, plural: str) -> Any:
    answer = custom.list_namespaced_custom_object(*group, queue, plural)
    assert isinstance(answer, dict)
    return answer["items"]


def workload_uids(custom: client.CustomObjectsApi, queue: str, count: int) -> set[str] | None:
    """The UIDs of the queue's Workloads once there are `count` of them (None until then)."""
    found = {item["metadata"]["uid"] for item in listed(custom, KUEUE, queue, "workloads")}
    return found if len(found) == count else None


def evictions(workload: Mapping[str, Any]) -> int:
    """How often Kueue evicted the Workload, by its schedulingStats."""
    stats = workload.get("status", {}).get("schedulingStats") or {}
    return sum(int(e.get("count", 1)) for e in stats.get("evictions") or [])


def not_raised_once(custom: client.CustomObjectsApi, queue: str) -> tuple[int, int]:
    """Of the queue's Workloads, those whose TrainJob's floor is not what one raise per
    reservation gives (1 + evictions; 0 on the floor, where nothing raises), and the evictions."""
    floors = {
        job["metadata"]["uid"]: int(
            (job["metadata"].get("annotations") or {}).get(wire.ADMISSION_FLOOR_ANNOTATION, 0)
        )
        for job in listed(custom, TRAINER, queue, "trainjobs")
    }
    wrong = evicted = 0
    for workload in listed(custom, KUEUE, queue, "workloads"):
        owners: list[dict[str, Any]] = workload["metadata"].get("ownerReferences") or []
        times = evictions(workload)
        expected = 0 if queue == PLAIN else 1 + times
        evicted += times
        wrong += any(floors.get(owner["uid"], -1) != expected for owner in owners) or not owners
    return wrong, evicted


@dataclass
class KeptRunning:
    """A controller as its Deployment keeps it: a process that exits 75 (its Lease lapsed,
    docs/kueue.md) is started again with the same arguments and identity, as the kubelet
    restarts the pod's container; it takes its own Lease back at once. Any other exit fails the
    run. What the processes spent and counted is summed: an exited one's as last sampled."""

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
            # Its log's name; its --identity is unchanged.
            name = f"{self.exited[0].identity}-{len(self.exited)}"
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
def kept_running(
    kubeconfig: Path, work: Path, queue: str, extra: Sequence[str]
) -> Iterator[KeptRunning]:
    """The controller of `queue`'s namespace, as its Deployment keeps it; killed at the end."""
    (port,) = free_ports(1)
    argv = replica_argv(kubeconfig, queue, queue, port, extra)
    first = launch(queue, port, work, argv, env=dict(os.environ))
    deployment = KeptRunning(argv, port, work, first)
    try:
        wait_ready(first)
        yield deployment
    finally:
        end(deployment.replica)


def sample_all(deployments: Mapping[str, KeptRunning]) -> dict[str, tuple[float, float]]:
    return {queue: deployment.sample() for queue, deployment in deployments.items()}


def one_round(
    api: client.ApiClient,
    runtime: str,
    sightings: Sightings,
    deployments: Mapping[str, KeptRunning],
    count: int,
    index: int,
) -> tuple[dict[str, list[float]], dict[str, tuple[int, int]]]:
    """N TrainJobs in each queue, released together: each queue's latencies, and its
    Workloads not raised exactly once and their evictions."""
    custom = client.CustomObjectsApi(api)
    turn = index % len(QUEUES)
    order = (*QUEUES[turn:], *QUEUES[:turn])
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
        interleaved = [(queue, names[queue][i]) for i in range(count) for queue in order]
        list(pool.map(lambda pair: create(*pair), interleaved))

    uids = {
        queue: wait_until(
            functools.partial(workload_uids, custom, queue, count),
            what=f"{count} Workloads in {queue}",
            timeout=300,
        )
        for queue in QUEUES
    }
    for queue in order:
        set_hold(custom, queue, held=False)
        with sightings.lock:
            sightings.released.update(dict.fromkeys(uids[queue], time.monotonic()))

    def all_admitted() -> bool | None:
        sample_all(deployments)
        done = sum(
            len(sightings.latencies(q, uids[q], until=until))
            for q in QUEUES
            for until in ("admitted", "opened")
        )
        return done == 2 * count * len(QUEUES) or None

    # Opened, not only Admitted: Kueue opens the TrainJob after it admits the Workload, and in
    # policy mode the raise is made in that opening.
    wait_until(all_admitted, what=f"{count} admissions and openings in each queue", timeout=900)
    latencies = {queue: sightings.latencies(queue, uids[queue]) for queue in QUEUES}
    for queue in QUEUES:
        latencies[f"{queue} opened"] = sightings.latencies(queue, uids[queue], until="opened")
    latencies["approval"] = sightings.latencies(
        CHECK, uids[CHECK], until="approved", since="reserved"
    )
    verified = {queue: not_raised_once(custom, queue) for queue in QUEUES}
    for queue in QUEUES:
        custom.delete_collection_namespaced_custom_object(*TRAINER, queue, "trainjobs")
    for queue in QUEUES:
        wait_until(
            functools.partial(workload_uids, custom, queue, 0),
            what=f"the Workloads of {queue} to go",
            timeout=300,
        )
    return latencies, verified


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def p50_p99(values: Sequence[float]) -> str:
    return f"{percentile(values, 0.5) * 1000:.0f} / {percentile(values, 0.99) * 1000:.0f} ms"


def setup(
    api: client.ApiClient, controllers: Mapping[str, str] | None
) -> tuple[str, list[KueueSetup]]:
    """The runtime, the policies (acting, trusting `controllers`), each queue's namespace
    labelled with those bound there, and its ClusterQueue."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    runtime = install_runtime(api)
    policies.install(api, runtime, controllers=controllers)
    queues = []
    for name in QUEUES:
        core.create_namespace(policies.namespace_body(name, BOUND[name]))
        queue = KueueSetup(custom, name)
        queue.install(cpu=str(max(CONCURRENCY)), with_check=name == CHECK)
        queues.append(queue)
    return runtime, queues


def bench(
    kubeconfig: Path,
    work: Path,
    rounds: dict[int, int],
    workers: int,
    *,
    idle_seconds: float = IDLE_SECONDS,
    controllers: Mapping[str, str] | None = policies.HARNESS_CONTROLLERS,
) -> list[str]:
    """Every round of `rounds` (N: rounds) in the three modes: the tables' lines. The policies
    trust `controllers` (the shipped identities when None)."""
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), client_configuration=configuration
    )
    api = client.ApiClient(configuration)
    runtime, queues = setup(api, controllers)
    sightings, stop = Sightings(), threading.Event()
    for followed in (
        (KUEUE, "workloads", sightings.see),
        (TRAINER, "trainjobs", sightings.see_job),
    ):
        threading.Thread(target=follow, args=(api, *followed, stop), daemon=True).start()
    try:
        # The shipped Lease and resync timings, over the tests' shorter ones (replicas()).
        shipped = ControllerSettings.model_fields
        timings = (
            *("--workers", str(workers)),
            *("--lease-seconds", str(shipped["lease_seconds"].default)),
            *("--resync-seconds", f"{shipped['resync_seconds'].default:g}"),
        )
        with ExitStack() as running:
            deployments = {
                queue: running.enter_context(
                    kept_running(kubeconfig, work, queue, (*timings, *mode))
                )
                for queue, mode in CONTROLLED.items()
            }
            return measure(api, runtime, sightings, deployments, rounds, idle_seconds)
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
    resource, requests per Workload and their mean time: "PUT trainjobs 1.00 of 35 ms"."""
    start, end = request_times(before), request_times(after)
    parts = []
    for key in sorted(end, key=lambda k: -(end[k][0] - start.get(k, (0.0, 0.0))[0])):
        seconds = end[key][0] - start.get(key, (0.0, 0.0))[0]
        count = end[key][1] - start.get(key, (0.0, 0.0))[1]
        if count:
            parts.append(f"{key} {count / gated:.2f} of {seconds / count * 1000:.0f} ms")
    return "; ".join(parts)


def ratio(values: Sequence[float], floor: Sequence[float]) -> str:
    return f"{statistics.median(values) / statistics.median(floor):.2f}"


HEADERS: Final = (
    "| N | Workloads per mode | released to Admitted p50 / p99: plain Kueue (the floor) "
    "| policy mode | check mode | released to opened p50 / p99: the floor | policy mode "
    "| check mode | p50, times the floor, to Admitted: policy / check "
    "| to opened: policy / check |",
    "|---|---|---|---|---|---|---|---|---|---|",
)
COST_HEADERS: Final = (
    "| N | requests per Workload: policy / check | Workloads not raised exactly once (floor "
    "≠ 1 + evictions; 0 on the floor): plain / policy / check | evictions "
    "| check mode: raises / approvals logged per Workload, reserved to approved p50 / p99 "
    "| CPU per Workload: policy / check | peak RSS: policy / check "
    "| Lease lost (exit 75, restarted) |",
    "|---|---|---|---|---|---|---|---|",
)


def measure(
    api: client.ApiClient,
    runtime: str,
    sightings: Sightings,
    deployments: Mapping[str, KeptRunning],
    rounds: dict[int, int],
    idle_seconds: float,
) -> list[str]:
    say(f"idle for {idle_seconds:g} s")
    began, before = time.monotonic(), sample_all(deployments)
    threading.Event().wait(idle_seconds)
    after, wall = sample_all(deployments), time.monotonic() - began
    idle = [
        f"{queue}: {(after[queue][0] - before[queue][0]) / wall * 100:.2f}% of a core, "
        f"RSS {memory_mib(deployment.replica.process.pid, 'VmRSS'):.0f} MiB"
        for queue, deployment in deployments.items()
    ]
    lines, costs = list(HEADERS), list(COST_HEADERS)
    profiles = ["Requests per Workload, and their mean time, by verb and resource:"]
    gate = deployments[CHECK]
    for count, repeat in rounds.items():
        say(f"N={count}: {repeat} rounds")
        before, began = sample_all(deployments), time.monotonic()
        raised, approved = gate.logged("raised admission"), gate.logged("approved")
        exits = {queue: len(d.exited) for queue, d in deployments.items()}
        metrics_before = {queue: d.metrics for queue, d in deployments.items()}
        keys = (*QUEUES, *(f"{queue} opened" for queue in QUEUES), "approval")
        gathered: dict[str, list[float]] = {key: [] for key in keys}
        wrong = dict.fromkeys(QUEUES, 0)
        evicted = 0
        for index in range(repeat):
            latencies, verified = one_round(api, runtime, sightings, deployments, count, index)
            for key, values in latencies.items():
                gathered[key] += values
            for queue, (not_once, evictions_seen) in verified.items():
                wrong[queue] += not_once
                evicted += evictions_seen
        plain, policy, checked = (gathered[queue] for queue in QUEUES)
        opened = [gathered[f"{queue} opened"] for queue in QUEUES]
        lines.append(
            f"| {count} | {len(checked)} | {' | '.join(map(p50_p99, (plain, policy, checked)))} "
            f"| {' | '.join(map(p50_p99, opened))} "
            f"| {ratio(policy, plain)} / {ratio(checked, plain)} "
            f"| {ratio(opened[1], opened[0])} / {ratio(opened[2], opened[0])} |"
        )
        after, wall = sample_all(deployments), time.monotonic() - began
        workloads = len(checked)
        sent = {q: (after[q][1] - before[q][1]) / workloads for q in deployments}
        spent = {q: (after[q][0] - before[q][0]) / workloads * 1000 for q in deployments}
        raises = gate.logged("raised admission") - raised
        approvals = gate.logged("approved") - approved
        lost = [
            f"{queue} at {', '.join(times)}"
            for queue, d in deployments.items()
            if (times := d.exits[exits[queue] :])
        ]
        costs.append(
            f"| {count} | {sent[POLICY]:.1f} / {sent[CHECK]:.1f} "
            f"| {' / '.join(str(wrong[q]) for q in QUEUES)} | {evicted} "
            f"| {raises.total() / workloads:.2f} / {approvals.total() / workloads:.2f}, "
            f"{p50_p99(gathered['approval'])} "
            f"| {spent[POLICY]:.1f} / {spent[CHECK]:.1f} ms "
            f"| {deployments[POLICY].peak_rss:.0f} / {gate.peak_rss:.0f} MiB "
            f"| {'; '.join(lost) or 'no'} |"
        )
        for queue, deployment in deployments.items():
            spent_on = (
                profile(metrics_before[queue], deployment.metrics, workloads)
                if len(deployment.exited) == exits[queue]
                else "not told: the controller restarted"
            )
            profiles.append(f"- N={count}, {queue}: {spent_on}")
        say(lines[-1])
        say(costs[-1])
        say("\n".join(profiles[-len(deployments) :]))
        say(f"over {wall:.0f} s")
    return [*lines, "", *costs, "", *profiles, "", f"controllers idle: {'; '.join(idle)}"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.admission", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, help="an existing cluster (default: start one)")
    parser.add_argument(
        "--rounds-scale",
        type=float,
        default=1.0,
        help="multiply the rounds at each N (default 1: 21, 6, 3 and 1 at N=1, 10, 100, 1000)",
    )
    parser.add_argument(
        "--workers", type=int, default=4, help="the controllers' --workers (default: 4, their own)"
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
            header = f"{machine_line()}; the controllers with --workers {args.workers}"
            lines = bench(kubeconfig, work, rounds, args.workers)
            sys.stdout.write("\n".join([header, "", *lines]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
