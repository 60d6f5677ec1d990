"""`python -m tests.bench.auditor`: how fast the controller's auditor detects, and what it costs.

N managed TrainJobs (default 1,000) with P pods each (default 10) in one namespace. Each is
made as `dispatch-start` makes it and opened as `dispatch-unsuspend` opens it (A = 1), so the
real Trainer, JobSet and Job controllers make its JobSet, its Job and its first pod; the
benchmark adds the other P - 1, each in a slot of its own, owned by that Job (no kubelet
runs: every pod stays Pending, live). One controller replica audits the namespace. Once it has
recorded every job's execution, the benchmark measures, by its own monotonic clock:

- idle: the controller's CPU over --idle-seconds, and its RSS;
- detection latency, --samples of each, each on a job of its own, from the change to this
  process's watch seeing the TrainJob flagged with the finding's words:
  - JobSet replaced: the JobSet deleted; from this process's watch seeing Trainer's new one
    (`J may have been reset`);
  - a pod with a repeated R: a second pod in the first slot with the same A and J (a pod
    replaced); from the answer to its creation (`… already had`);
  - an opening without a raise: suspended and opened again by hand; from the answer to the
    opening (`… at metadata.generation …`, the unraised-opening finding);
- churn: --churn-seconds of pod writes (an annotation) at --churn-rate a second over all the
  pods, each one a change the auditor must audit, with the same detection samples run
  meanwhile; the controller's CPU over it and its peak RSS (VmHWM) at the end.

    python -m tests.bench.auditor                            # starts its own control plane
    python -m tests.bench.auditor --kubeconfig KC            # an existing one
    python -m tests.bench.auditor --trainjobs 100 --pods 10  # smaller

The namespace (`dispatch-bench-auditor-<time>`) is deleted at the end. This is a benchmark,
not a test: nothing here fails on a slow figure.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes import client, config, watch

from dispatch_k8s.core.rules import decisions, trainjob, wire
from tests.bench.admission import cpu_seconds, memory_mib, p50_p99
from tests.bench.steps import cluster_at, say
from tests.cluster.wait import wait_until
from tests.support.lifecycle import JOBSET, TRAINER, as_dict
from tests.support.machine import machine_line
from tests.support.replicas import Replica, replicas
from tests.support.requests import trainjob_body
from tests.support.shipped import REPO

WORKERS: Final = 8  # concurrent requests while the jobs are made
RESYNC: Final = ("--resync-seconds", "60")  # the controller's default
SETUP_TIMEOUT: Final = 3600.0
FLAG_TIMEOUT: Final = 120.0
CHURN_ANNOTATION: Final = "bench.dispatch.phpboyscout.uk/tick"
CASES: Final = {
    "JobSet replaced": "J may have been reset",
    "pod with a repeated R": "already had",
    "opening without a raise": "at metadata.generation",
}


@dataclass
class Sightings:
    """What this process's watches saw: each JobSet's first sight by UID, each flag's time."""

    jobsets: dict[str, float] = field(default_factory=dict)  # JobSet UID -> first seen
    flagged: dict[str, tuple[float, str]] = field(default_factory=dict)  # TrainJob -> when, cause
    recorded: set[str] = field(default_factory=set)  # TrainJobs with an execution recorded
    lock: threading.Lock = field(default_factory=threading.Lock)

    def see_trainjob(self, job: dict[str, Any]) -> None:
        now = time.monotonic()
        annotations = job["metadata"].get("annotations") or {}
        name = job["metadata"]["name"]
        with self.lock:
            if wire.LAST_EXECUTION_ANNOTATION in annotations:
                self.recorded.add(name)
            if annotations.get(wire.FOREIGN_ANNOTATION) == "true" and name not in self.flagged:
                self.flagged[name] = (now, annotations.get(wire.FOREIGN_CAUSE_ANNOTATION, ""))

    def see_jobset(self, jobset: dict[str, Any]) -> None:
        now = time.monotonic()
        with self.lock:
            self.jobsets.setdefault(jobset["metadata"]["uid"], now)


def follow(
    lister: Callable[..., Any],
    args: Sequence[Any],
    see: Callable[[dict[str, Any]], None],
    stop: threading.Event,
) -> None:
    """Watch a collection until `stop`, from its current state on."""
    version = ""
    while not stop.is_set():
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            lister, *args, resource_version=version, timeout_seconds=5
        )
        try:
            for event in stream:
                obj = as_dict(event["object"])
                version = obj["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    see(obj)
        except client.ApiException as e:
            if e.status != 410:
                raise
            version = ""


class Bench:
    """The benchmark's namespace and its jobs on one cluster."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.batch = client.BatchV1Api(api)
        self.sightings = Sightings()
        self.stop = threading.Event()

    def watch(self) -> None:
        sources: list[tuple[Callable[..., Any], tuple[Any, ...], Callable[[dict[str, Any]], None]]]
        sources = [
            (
                self.custom.list_namespaced_custom_object,
                (*TRAINER, self.namespace, "trainjobs"),
                self.sightings.see_trainjob,
            ),
            (
                self.custom.list_namespaced_custom_object,
                (*JOBSET, self.namespace, "jobsets"),
                self.sightings.see_jobset,
            ),
        ]
        for lister, args, see in sources:
            threading.Thread(
                target=follow, args=(lister, args, see, self.stop), daemon=True
            ).start()

    # --- making the jobs ---------------------------------------------------------------

    def setup(self, count: int, pods: int) -> list[str]:
        """The namespace, the runtime, and `count` open TrainJobs with `pods` pods each."""
        self.core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace))
        )
        runtime = yaml.safe_load((REPO / "pipelines/runtimes/torch-distributed.yaml").read_text())
        try:
            self.custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
        except client.ApiException as e:
            if e.status != 409:
                raise
        names = [f"bench-{index:05d}" for index in range(count)]
        say(f"creating and opening {count} TrainJobs")
        began = time.monotonic()
        self._each(names, lambda name: self._open(name, runtime["metadata"]["name"]))
        say(f"  {time.monotonic() - began:.0f} s; waiting for their Jobs' first pods")
        firsts = self._first_pods(names)
        say(f"  {time.monotonic() - began:.0f} s; adding {pods - 1} pods to each")
        self._each(names, lambda name: self._more_pods(firsts[name], pods))
        say(f"  {time.monotonic() - began:.0f} s: {count} TrainJobs, {count * pods} pods")
        return names

    def _each(self, names: Sequence[str], do: Callable[[str], None]) -> None:
        with ThreadPoolExecutor(WORKERS) as pool:
            for _ in pool.map(do, names):
                pass

    def _open(self, name: str, runtime: str) -> None:
        """Create the TrainJob as start does, then raise A and open it as unsuspend does."""
        body = trainjob_body(name, runtime=runtime, namespace=self.namespace)
        body["metadata"]["name"] = name
        self.custom.create_namespaced_custom_object(*TRAINER, self.namespace, "trainjobs", body)
        for _ in range(10):
            job = as_dict(
                self.custom.get_namespaced_custom_object(
                    *TRAINER, self.namespace, "trainjobs", name
                )
            )
            decision = trainjob.decide_raise(job, None)
            assert not isinstance(decision, decisions.Refusal), decision
            raised = trainjob.with_admission(job, decision, suspend=False)
            try:
                self.custom.replace_namespaced_custom_object(
                    *TRAINER, self.namespace, "trainjobs", name, raised
                )
                return
            except client.ApiException as e:
                if e.status != 409:  # Trainer wrote its status in between: read again
                    raise
        raise AssertionError(f"could not open {name}")

    def _first_pods(self, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        wanted = set(names)
        found: dict[str, dict[str, Any]] = {}

        def all_there() -> bool | None:
            for pod in self._pods():
                job = (pod["metadata"].get("labels") or {}).get(wire.JOBSET_NAME_KEY)
                if job in wanted and pod["metadata"].get("ownerReferences"):
                    found.setdefault(job, pod)
            if len(found) == len(wanted):
                return True
            self.stop.wait(5.0)  # each look lists every pod: not five times a second
            return None

        wait_until(all_there, what=f"{len(wanted)} first pods", timeout=SETUP_TIMEOUT)
        return found

    def _pods(self) -> Iterator[dict[str, Any]]:
        token = None
        while True:
            page = as_dict(
                self.core.list_namespaced_pod(self.namespace, limit=500, _continue=token)
            )
            yield from page["items"]
            token = page["metadata"].get("continue")
            if not token:
                return

    def _more_pods(self, first: dict[str, Any], pods: int) -> None:
        for index in range(1, pods):
            self.create_pod(sibling(first, index=index, suffix=f"c{index}"))

    def create_pod(self, body: Any) -> None:  # the client takes a dict for a V1Pod
        for attempt in range(5):
            try:
                self.core.create_namespaced_pod(self.namespace, body)
                return
            except client.ApiException as e:
                if e.status == 409:
                    return
                if e.status not in (429, 500, 503, 504) or attempt == 4:
                    raise
                self.stop.wait(1.0)  # the API server was overloaded: a moment

    def wait_recorded(self, names: Sequence[str]) -> float:
        began = time.monotonic()

        def recorded() -> bool | None:
            with self.sightings.lock:
                return len(self.sightings.recorded & set(names)) == len(names) or None

        wait_until(recorded, what="the controller to record every execution", timeout=SETUP_TIMEOUT)
        return time.monotonic() - began

    # --- the changes to detect ---------------------------------------------------------

    def replace_jobset(self, name: str) -> float:
        old = self.custom.get_namespaced_custom_object(*JOBSET, self.namespace, "jobsets", name)
        old_uid = as_dict(old)["metadata"]["uid"]
        self.custom.delete_namespaced_custom_object(
            *JOBSET, self.namespace, "jobsets", name, propagation_policy="Background"
        )

        def rebuilt() -> float | None:
            try:
                now = as_dict(
                    self.custom.get_namespaced_custom_object(
                        *JOBSET, self.namespace, "jobsets", name
                    )
                )
            except client.ApiException:
                return None
            uid = now["metadata"]["uid"]
            if uid == old_uid:
                return None
            with self.sightings.lock:
                return self.sightings.jobsets.get(uid)

        return wait_until(rebuilt, what=f"Trainer to rebuild JobSet {name}", timeout=FLAG_TIMEOUT)

    def repeat_pod(self, name: str) -> float:
        listed = as_dict(
            self.core.list_namespaced_pod(
                self.namespace, label_selector=f"{wire.JOBSET_NAME_KEY}={name}"
            )
        )
        first = next(
            pod
            for pod in listed["items"]
            if (pod["metadata"].get("labels") or {}).get(wire.COMPLETION_INDEX_KEY) == "0"
            and not pod["metadata"]["name"].endswith("-again")
        )
        self.create_pod(sibling(first, index=0, suffix="again"))
        return time.monotonic()

    def open_by_hand(self, name: str) -> float:
        for suspend in (True, False):
            self.custom.patch_namespaced_custom_object(
                *TRAINER, self.namespace, "trainjobs", name, {"spec": {"suspend": suspend}}
            )
        return time.monotonic()

    def detect(self, case: str, names: Iterator[str], samples: int) -> list[float]:
        """`samples` latencies of one case, each on a job of its own."""
        change = {
            "JobSet replaced": self.replace_jobset,
            "pod with a repeated R": self.repeat_pod,
            "opening without a raise": self.open_by_hand,
        }[case]
        latencies = []
        for _ in range(samples):
            name = next(names)
            began = change(name)

            def flagged(name: str = name) -> tuple[float, str] | None:
                with self.sightings.lock:
                    return self.sightings.flagged.get(name)

            when, cause = wait_until(flagged, what=f"{name} flagged ({case})", timeout=FLAG_TIMEOUT)
            assert CASES[case] in cause, (case, cause)
            latencies.append(max(0.0, when - began))
        return latencies

    def pod_names(self) -> list[str]:
        """Every pod's name: listed before the churn begins, which a list of 10,000 pods
        (a minute on a loaded machine) would otherwise delay past its end."""
        return [pod["metadata"]["name"] for pod in self._pods()]

    def churn(self, listed: Sequence[str], rate: float, until: threading.Event) -> int:
        """Annotate pods of `listed` picked at random, `rate` a second, until `until`; the
        writes made."""
        written = itertools.count()
        interval = 1.0 / rate
        lock = threading.Lock()
        next_at = [time.monotonic()]

        def writer() -> None:
            while not until.is_set():
                with lock:
                    at = next_at[0]
                    next_at[0] += interval
                delay = at - time.monotonic()
                if delay > 0:
                    until.wait(delay)
                pod = random.choice(listed)
                patch = {"metadata": {"annotations": {CHURN_ANNOTATION: str(time.time())}}}
                try:
                    self.core.patch_namespaced_pod(pod, self.namespace, patch)
                    next(written)
                except client.ApiException as e:
                    if e.status != 404:
                        raise

        # A write takes up to a few hundred ms on a loaded machine: enough writers for `rate`.
        threads = [
            threading.Thread(target=writer, daemon=True) for _ in range(max(4, int(rate / 4)))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return next(written)


def sibling(pod: dict[str, Any], *, index: int, suffix: str) -> dict[str, Any]:
    """Another pod of the same Job and execution in slot `index`, as JobSet labels its pods;
    owned by the Job but not controlled by it, so the Job controller leaves it be."""
    meta = pod["metadata"]
    labels = {
        key: value
        for key, value in (meta.get("labels") or {}).items()
        if key not in ("batch.kubernetes.io/controller-uid", "controller-uid")
    }
    labels[wire.COMPLETION_INDEX_KEY] = str(index)
    annotations = dict(meta.get("annotations") or {})
    annotations["batch.kubernetes.io/job-completion-index"] = str(index)
    owners = [{**ref, "controller": False} for ref in meta.get("ownerReferences") or []]
    spec = copy.deepcopy(pod["spec"])
    spec.pop("nodeName", None)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-{suffix}",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": owners,
        },
        "spec": spec,
    }


def audits(replica: Replica) -> float:
    """The audit passes the controller made that ended in a decision."""
    outcomes = ("clean", "recorded", "flagged")
    return sum(
        replica.metric("dispatch_admission_audits_total", f'outcome="{o}"') for o in outcomes
    )


def measure(bench: Bench, replica: Replica, args: argparse.Namespace) -> list[str]:
    pid = replica.process.pid
    names = bench.setup(args.trainjobs, args.pods)
    recorded = bench.wait_recorded(names)
    lines = [
        f"{args.trainjobs} TrainJobs, {args.trainjobs * args.pods} pods; every execution "
        f"recorded {recorded:.0f} s after the last pod was made; RSS then "
        f"{memory_mib(pid, 'VmRSS'):.0f} MiB"
    ]
    say(f"idle for {args.idle_seconds:g} s")
    began, cpu = time.monotonic(), cpu_seconds(pid)
    threading.Event().wait(args.idle_seconds)
    idle = (cpu_seconds(pid) - cpu) / (time.monotonic() - began)
    lines.append(
        f"idle: {idle * 100:.2f}% of a core, RSS {memory_mib(pid, 'VmRSS'):.0f} MiB "
        f"(over {args.idle_seconds:g} s, one resync every 60 s)"
    )
    spare = iter(reversed(names))
    lines += ["", "| detection latency p50 / p99 | at rest | under churn |", "|---|---|---|"]
    rest = {case: bench.detect(case, spare, args.samples) for case in CASES}
    say(f"churn: {args.churn_rate:g} pod writes a second for {args.churn_seconds:g} s")
    until = threading.Event()
    written: list[int] = []
    listed = bench.pod_names()
    churner = threading.Thread(
        target=lambda: written.append(bench.churn(listed, args.churn_rate, until)),
        daemon=True,
    )
    audits_before = audits(replica)
    began, cpu = time.monotonic(), cpu_seconds(pid)
    churner.start()
    churned: dict[str, list[float]] = {}
    for case in CASES:
        churned[case] = bench.detect(case, spare, args.samples)
    remaining = args.churn_seconds - (time.monotonic() - began)
    if remaining > 0:
        threading.Event().wait(remaining)
    until.set()
    churner.join()
    wall, spent = time.monotonic() - began, cpu_seconds(pid) - cpu
    passes = audits(replica) - audits_before
    for case in CASES:
        both = f"{p50_p99(rest[case])} | {p50_p99(churned[case])}"
        lines.append(f"| {case} ({args.samples} samples) | {both} |")
    outcomes = ("clean", "recorded", "flagged", "conflict", "transient", "error")
    counted = {
        o: replica.metric("dispatch_admission_audits_total", f'outcome="{o}"') for o in outcomes
    }
    lines += [
        "",
        "audit passes in all, by outcome: " + ", ".join(f"{o} {n:.0f}" for o, n in counted.items()),
        f"under churn: {written[0]} pod writes in {wall:.0f} s ({written[0] / wall:.0f}/s), "
        f"{passes:.0f} audit passes; {spent:.1f} s CPU ({spent / wall * 100:.1f}% of a core); "
        f"peak RSS {memory_mib(pid, 'VmHWM'):.0f} MiB",
    ]
    return lines


def bench(kubeconfig: Path, work: Path, args: argparse.Namespace) -> list[str]:
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), client_configuration=configuration
    )
    configuration.connection_pool_maxsize = WORKERS * 2
    api = client.ApiClient(configuration)
    namespace = f"dispatch-bench-auditor-{int(time.time())}"
    runner = Bench(api, namespace)
    runner.watch()
    try:
        with replicas(kubeconfig, namespace, work, "bench", extra=RESYNC) as (replica,):
            return measure(runner, replica, args)
    finally:
        runner.stop.set()
        try:
            runner.core.delete_namespace(namespace)
        except client.ApiException as e:
            if e.status != 404:
                raise


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.auditor", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, help="an existing cluster (default: start one)")
    parser.add_argument("--trainjobs", type=int, default=1000, help="TrainJobs (default 1000)")
    parser.add_argument("--pods", type=int, default=10, help="pods per TrainJob (default 10)")
    parser.add_argument("--samples", type=int, default=20, help="per case and phase (default 20)")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="default 60")
    parser.add_argument("--churn-seconds", type=float, default=60.0, help="at least; default 60")
    parser.add_argument("--churn-rate", type=float, default=50.0, help="pod writes/s; default 50")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    args = parser.parse_args(argv)
    if args.trainjobs < 6 * args.samples:
        parser.error("--trainjobs must be at least 6 x --samples: each sample flags a job")
    with tempfile.TemporaryDirectory(prefix="dispatch-bench-") as scratch:
        work = Path(scratch)
        with cluster_at(args.kubeconfig, work) as kubeconfig:
            header = machine_line()
            lines = bench(kubeconfig, work, args)
            sys.stdout.write("\n".join([header, "", *lines]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
