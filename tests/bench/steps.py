"""`python -m tests.bench.steps`: the steps against their kubectl equivalents, side by side.

Each round runs every pair once, one command after the other, so both sides of a ratio see
the same machine load; the figures are min / median / max over the rounds. The ratio is the
step's median over kubectl's. Then the audit against `kubectl get pods -o json` at 512, 4,096
and 16,384 pods (one TrainJob per count), with each process's peak RSS. Pods are created
once (unscheduled, concurrently) and kept: a rerun against the same cluster only adds the
missing ones.

    python -m tests.bench.steps                      # starts its own control plane
    python -m tests.bench.steps --kubeconfig KC      # an existing one (python -m tests.up)

Needs kubectl (`python -m tests.cluster.binaries build kubectl`) and jq (`apt-get install jq`).
This is a benchmark, not a test: nothing here fails on a slow figure (docs/design.md §4).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import trainjob, wire
from tests.cluster.wait import wait_until
from tests.support.kubectl import HOW_TO_BUILD, find_kubectl
from tests.support.machine import machine_line
from tests.support.requests import trainjob_body

REPO: Final = Path(__file__).resolve().parents[2]
BIN: Final = Path(sys.executable).parent
NAMESPACE: Final = "dispatch-bench"
RUNTIME: Final = "dispatch-torch-distributed"
AUDITED: Final = "audited"  # audited-<count>: one TrainJob per pod count, its pods kept
POD_COUNTS: Final = (512, 4096, 16384)
CREATE_WORKERS: Final = 8
TRAINJOBS: Final = f"/apis/{wire.TRAINER_GROUP}/{wire.TRAINER_VERSION}/namespaces/{NAMESPACE}"
# The raise `dispatch-unsuspend` makes, as jq: max(A in the patch, floor) + 1 into both, and
# open the job, in the one replace (docs/design.md §2).
_PATCH_A: Final = (
    f'(.spec.runtimePatches[] | select(.manager == "{wire.PATCH_MANAGER}") '
    ".trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.metadata"
    f'.annotations["{wire.ADMISSION_ANNOTATION}"])'
)
_FLOOR: Final = f'.metadata.annotations["{wire.ADMISSION_FLOOR_ANNOTATION}"]'
RAISE_JQ: Final = (
    f"([({_PATCH_A} | tonumber), ({_FLOOR} | tonumber)] | max + 1 | tostring) as $next"
    f" | {_FLOOR} = $next | {_PATCH_A} = $next | .spec.suspend = false"
)


def say(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


# --- tools ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One timed process (or pipeline): wall seconds, exit status, peak RSS in MiB."""

    seconds: float
    status: int
    peak_mib: float


def timed(argvs: Sequence[Sequence[str]], *, env: dict[str, str] | None = None) -> Run:
    """Run a pipeline of commands (stdin of each from the one before), as a shell would.

    Its peak RSS is not the commands' own (see tests/bench/peak.py): only `measured`'s is.
    """
    began = time.perf_counter()
    processes: list[subprocess.Popen[bytes]] = []
    for index, argv in enumerate(argvs):
        last = index == len(argvs) - 1
        processes.append(
            subprocess.Popen(
                argv,
                stdin=processes[-1].stdout if processes else subprocess.DEVNULL,
                stdout=subprocess.DEVNULL if last else subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        )
        if len(processes) > 1 and processes[-2].stdout is not None:
            processes[-2].stdout.close()  # the next one owns it now
    status, peak = 0, 0
    for process in processes:
        _, code, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(code)
        status = status or process.returncode
        peak = max(peak, usage.ru_maxrss)  # KiB on Linux
    return Run(seconds=time.perf_counter() - began, status=status, peak_mib=peak / 1024)


def measured(argv: Sequence[str], *, work: Path, env: dict[str, str] | None = None) -> Run:
    """Run one command through tests/bench/peak.py: its own wall time and peak RSS."""
    out = work / "peak.json"
    launcher = [sys.executable, "-S", str(Path(__file__).with_name("peak.py")), str(out)]
    subprocess.run([*launcher, *argv], env=env, check=True)
    report = json.loads(out.read_text())
    return Run(
        seconds=report["seconds"], status=report["status"], peak_mib=report["peak_kib"] / 1024
    )


def summary(values: Sequence[float], *, unit: str = " s", digits: int = 3) -> str:
    """min / median / max."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{low:.{digits}f} / {mid:.{digits}f} / {high:.{digits}f}{unit}"


# --- the cluster ------------------------------------------------------------------------


class Cluster:
    """The admin's view of the cluster under test, and the commands of both sides."""

    def __init__(self, kubeconfig: Path, kubectl: Path, jq: str, work: Path) -> None:
        self.kubeconfig = kubeconfig
        self.kubectl = kubectl
        self.jq = jq
        self.work = work
        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=configuration
        )
        configuration.connection_pool_maxsize = CREATE_WORKERS * 2
        self.api = client.ApiClient(configuration)
        # Bytecode is cached as in any installed environment (this machine sets
        # PYTHONDONTWRITEBYTECODE, which would recompile core/ and steps/ on every run).
        self.step_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def request(self, method: str, path: str, body: Any = None, **query: Any) -> Any:
        """One admin request as plain JSON."""
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        serialized = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query.items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*serialized, _request_timeout=60)
        data = response.read()  # type: ignore[no-untyped-call]
        if not 200 <= response.status <= 299:
            raise ApiException(status=response.status, reason=response.reason, body=data.decode())
        return json.loads(data)

    def step(self, name: str, *args: str) -> list[str]:
        return [str(BIN / f"dispatch-{name}"), "--kubeconfig", str(self.kubeconfig), *args]

    def kc(self, *args: str) -> list[str]:
        cache = self.work / "kube-cache"  # discovery, warmed by the first run as a user's is
        base = [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(cache)]
        return [*base, *args]

    def run_step(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.step(name, *args), capture_output=True, text=True, check=False, env=self.step_env
        )

    def setup(self, counts: Sequence[int]) -> None:
        """The namespace, the shipped runtime and the benchmark's TrainJobs (kept for reruns)."""
        for path, body in (
            ("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}),
            (
                f"/apis/{wire.TRAINER_GROUP}/{wire.TRAINER_VERSION}/clustertrainingruntimes",
                yaml.safe_load((REPO / "pipelines/runtimes/torch-distributed.yaml").read_text()),
            ),
        ):
            try:
                self.request("POST", path, body)
            except ApiException as e:
                if e.status != 409:
                    raise
        for name in (*(audited(count) for count in counts), *JOBS):
            started = self.run_step(
                "start",
                f"--namespace={NAMESPACE}",
                f"--runtime-name={RUNTIME}",
                f"--job-id={name}",
                "--generation=1",
                "--submission=1",
                "--attempt=1",
                "--image=registry.example/trainer:1",
                "--command=python",
                "--command=train.py",
                f"--name={name}",
            )
            if started.returncode != 0:
                raise SystemExit(f"dispatch-start {name}: {started.stderr}")

    def trainjob(self, name: str) -> dict[str, Any]:
        return dict(self.request("GET", f"{TRAINJOBS}/trainjobs/{name}"))

    def jobset(self, name: str) -> dict[str, Any] | None:
        path = f"/apis/{wire.JOBSET_GROUP}/{wire.JOBSET_VERSION}/namespaces/{NAMESPACE}"
        try:
            return dict(self.request("GET", f"{path}/jobsets/{name}"))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def wait_jobset(self, name: str) -> dict[str, Any]:
        return wait_until(lambda: self.jobset(name), what=f"JobSet {name}")

    def settle(self, name: str, *, suspended: bool) -> None:
        """Wait until Trainer and JobSet have acted on the last (un)suspend of `name`."""

        def settled() -> bool | None:
            job = self.trainjob(name)
            conditions = {
                c.get("type"): c.get("status") for c in job.get("status", {}).get("conditions", [])
            }
            if (conditions.get("Suspended") == "True") is not suspended:
                return None
            jobset = self.jobset(name)
            if suspended and trainjob.active_replicated_job(jobset) is not None:
                return None  # still draining: a raise now would be refused
            if not suspended and trainjob.active_replicated_job(jobset) is None:
                return None  # the Jobs' pods are still being made: the machine is busy
            return True

        wait_until(settled, what=f"TrainJob {name} {'held' if suspended else 'open'}", timeout=120)

    def ensure_suspended(self, name: str) -> None:
        if self.trainjob(name).get("spec", {}).get("suspend") is not True:
            self.must(self.run_step("hold", f"--namespace={NAMESPACE}", f"--name={name}"))
        self.settle(name, suspended=True)

    def ensure_open(self, name: str) -> None:
        if self.trainjob(name).get("spec", {}).get("suspend") is True:
            self.settle(name, suspended=True)
            self.must(self.run_step("unsuspend", f"--namespace={NAMESPACE}", f"--name={name}"))
        self.settle(name, suspended=False)

    @staticmethod
    def must(done: subprocess.CompletedProcess[str]) -> None:
        if done.returncode != 0:
            raise SystemExit(f"{done.args[0]} exited {done.returncode}: {done.stderr[-2000:]}")

    # --- pods of the audited TrainJob ----------------------------------------------------

    def pod_names(self, job: str) -> set[str]:
        names: set[str] = set()
        token = None
        while True:
            query: dict[str, Any] = {"labelSelector": selector(job), "limit": 500}
            if token:
                query["continue"] = token
            page = self.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods", **query)
            names |= {pod["metadata"]["name"] for pod in page["items"]}
            token = page["metadata"].get("continue")
            if not token:
                return names

    def ensure_pods(self, count: int) -> float:
        """Create the audited job's pods up to `count` (none removed); return the seconds taken."""
        began = time.monotonic()
        name = audited(count)
        jobset = self.wait_jobset(name)
        template = audited_pod(name, jobset)
        have = self.pod_names(name)
        wanted = [i for i in range(count) if pod_name(name, i) not in have]
        if not wanted:
            return 0.0
        say(f"creating {len(wanted)} pods ({len(have)} there) with {CREATE_WORKERS} workers")

        def create(index: int) -> None:
            body = json.loads(json.dumps(template))
            body["metadata"]["name"] = pod_name(name, index)
            body["metadata"]["labels"][wire.COMPLETION_INDEX_KEY] = str(index)
            for attempt in range(5):
                try:
                    self.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body)
                    return
                except ApiException as e:
                    if e.status == 409:
                        return  # made by an earlier, interrupted run
                    if e.status not in (429, 500, 503, 504) or attempt == 4:
                        raise

        with ThreadPoolExecutor(CREATE_WORKERS) as pool:
            for done, _ in enumerate(pool.map(create, wanted), start=1):
                if done % 2048 == 0:
                    say(f"  {done}/{len(wanted)} pods")
        return time.monotonic() - began


def audited(count: int) -> str:
    return f"{AUDITED}-{count}"


def selector(job: str) -> str:
    return f"{wire.JOBSET_NAME_KEY}={job}"


def pod_name(job: str, index: int) -> str:
    return f"{job}-node-0-{index}"


def audited_pod(job: str, jobset: dict[str, Any]) -> dict[str, Any]:
    """A trainer pod as JobSet makes it for the audited job: its labels, A, and the container
    `start` built (the prologue and its env), so each pod is as large as a real one's spec."""
    body = trainjob_body(job, runtime=RUNTIME, namespace=NAMESPACE)
    trainer = body["spec"]["trainer"]
    admission = "0"  # the audited job is never raised: A = floor = 0
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": NAMESPACE,
            "labels": {
                wire.JOBSET_NAME_KEY: job,
                wire.JOBSET_UID_KEY: jobset["metadata"]["uid"],
                wire.REPLICATED_JOB_NAME_KEY: "node",
                wire.RESTART_ATTEMPT_KEY: "0",
                wire.JOB_INDEX_KEY: "0",
                "batch.kubernetes.io/job-name": f"{job}-node-0",
                "trainer.kubeflow.org/trainjob-ancestor-step": "trainer",
            },
            "annotations": {wire.ADMISSION_ANNOTATION: admission},
        },
        "spec": {
            "restartPolicy": "Never",
            "subdomain": job,
            "containers": [
                {
                    "name": wire.TRAINER_CONTAINER,
                    "image": trainer["image"],
                    "command": trainer["command"],
                    "env": trainer["env"],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        },
    }


# --- the pairs ----------------------------------------------------------------------------

RAISE_STEP, RAISE_KUBECTL = "raise-step", "raise-kubectl"
HOLD_STEP, HOLD_KUBECTL = "hold-step", "hold-kubectl"
HELD: Final = "held"  # never opened: the no-op hold and `kubectl get` both only read it
JOBS: Final = (RAISE_STEP, RAISE_KUBECTL, HOLD_STEP, HOLD_KUBECTL, HELD)


@dataclass(kw_only=True)
class Pair:
    """A step and its kubectl equivalent: how to run each, and what to do before a round."""

    what: str
    step: list[str]
    kubectl: list[list[str]]  # a pipeline
    prepare: Callable[[], None]
    count_step: list[str]  # the step's name and flags, for tests.bench.count
    steps: list[Run] = field(default_factory=list)
    kubectls: list[Run] = field(default_factory=list)
    retried: int = 0  # rounds run again after an exit 3 (Trainer wrote the job in between)


FLOOR_IMPORTS: Final = (
    "import pydantic_settings, loguru, kubernetes.config; from kubernetes.client import ApiClient"
)


def pairs(cluster: Cluster) -> list[Pair]:
    ns = f"--namespace={NAMESPACE}"

    def prepare_raise() -> None:
        cluster.ensure_suspended(RAISE_STEP)
        cluster.ensure_suspended(RAISE_KUBECTL)

    def prepare_hold() -> None:
        cluster.ensure_open(HOLD_STEP)
        cluster.ensure_open(HOLD_KUBECTL)

    return [
        Pair(
            what="raise: `dispatch-unsuspend` vs `kubectl get -o json \\| jq … \\| kubectl "
            "replace -f -`",
            step=cluster.step("unsuspend", ns, f"--name={RAISE_STEP}"),
            kubectl=[
                cluster.kc("get", "trainjob", "-n", NAMESPACE, RAISE_KUBECTL, "-o", "json"),
                [cluster.jq, RAISE_JQ],
                cluster.kc("replace", "-f", "-"),
            ],
            prepare=prepare_raise,
            count_step=["unsuspend", ns, f"--name={RAISE_STEP}"],
        ),
        Pair(
            what="`dispatch-hold` vs `kubectl patch`",
            step=cluster.step("hold", ns, f"--name={HOLD_STEP}"),
            kubectl=[
                cluster.kc(
                    "patch",
                    "trainjob",
                    "-n",
                    NAMESPACE,
                    HOLD_KUBECTL,
                    "--type=merge",
                    "-p",
                    '{"spec":{"suspend":true}}',
                )
            ],
            prepare=prepare_hold,
            count_step=["hold", ns, f"--name={HOLD_STEP}"],
        ),
        Pair(
            what="`dispatch-hold` on a held job vs `kubectl get -o json`",
            step=cluster.step("hold", ns, f"--name={HELD}"),
            kubectl=[cluster.kc("get", "trainjob", "-n", NAMESPACE, HELD, "-o", "json")],
            prepare=lambda: None,
            count_step=["hold", ns, f"--name={HELD}"],
        ),
        Pair(
            # The floor under every step: a Python that imports the three dependencies and
            # sends nothing. A step cannot be faster than this.
            what="floor: `python -c 'import pydantic_settings, loguru, kubernetes.config'` "
            "vs `kubectl get -o json`",
            step=[sys.executable, "-c", FLOOR_IMPORTS],
            kubectl=[cluster.kc("get", "trainjob", "-n", NAMESPACE, HELD, "-o", "json")],
            prepare=lambda: None,
            count_step=[],
        ),
    ]


def run_pair(cluster: Cluster, pair: Pair) -> None:
    """One round: the step and kubectl one after the other, each on a job in the same state."""
    for _ in range(5):
        pair.prepare()
        if len(pair.steps) % 2:  # every other round kubectl goes first: neither side always
            other = timed(pair.kubectl)  # runs on the heels of the preparation
            step = timed([pair.step], env=cluster.step_env)
        else:
            step = timed([pair.step], env=cluster.step_env)
            other = timed(pair.kubectl)
        if step.status == 0 and other.status == 0:
            pair.steps.append(step)
            pair.kubectls.append(other)
            return
        if 3 not in (step.status, other.status) and other.status in (0, 3):
            raise SystemExit(f"{pair.what}: exit {step.status} / {other.status}")
        pair.retried += 1  # a write lost to Trainer's own status write: the round again
    raise SystemExit(f"{pair.what}: five conflicts in a row")


def count_step(cluster: Cluster, args: Sequence[str]) -> list[str]:
    """The requests one run of a step sends (tests.bench.count)."""
    out = cluster.work / "count"
    env = {**cluster.step_env, "BENCH_COUNT_FILE": str(out)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.bench.count",
            args[0],
            "--kubeconfig",
            str(cluster.kubeconfig),
            *args[1:],
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    return [line for line in out.read_text().splitlines() if line]


def count_kubectl(pipeline: Sequence[Sequence[str]]) -> int:
    """The requests a kubectl pipeline sends, from its own -v=6 request log."""
    total = 0
    stdin = b""
    for argv in pipeline:
        verbose = [*argv, "-v=6"] if "kubectl" in Path(argv[0]).name else list(argv)
        done = subprocess.run(verbose, input=stdin, capture_output=True, check=False)
        stdin = done.stdout
        total += sum('"Response" verb=' in line for line in done.stderr.decode().splitlines())
    return total


# --- the report ---------------------------------------------------------------------------


def ratio_line(steps: Sequence[Run], kubectls: Sequence[Run]) -> str:
    """The ratio of the medians, then min / median / max of the per-round ratios."""
    ratios = [s.seconds / k.seconds for s, k in zip(steps, kubectls, strict=True)]
    medians = statistics.median(r.seconds for r in steps) / statistics.median(
        r.seconds for r in kubectls
    )
    return f"**{medians:.2f}x** (rounds {summary(ratios, unit='', digits=2)})"


def bench_steps(cluster: Cluster, rounds: int) -> list[str]:
    lines = [
        "| pair | step min / median / max | kubectl min / median / max | ratio of medians "
        "| requests (step / kubectl) |",
        "|---|---|---|---|---|",
    ]
    for pair in pairs(cluster):
        say(f"{pair.what}: warm-up, requests")
        pair.prepare()
        sent = count_step(cluster, pair.count_step) if pair.count_step else []
        pair.prepare()
        kubectl_sent = count_kubectl(pair.kubectl)
        run_pair(cluster, pair)  # warm-up: caches (bytecode, kubectl discovery) filled
        pair.steps.clear()
        pair.kubectls.clear()
        for index in range(rounds):
            run_pair(cluster, pair)
            say(
                f"  round {index + 1}: {pair.steps[-1].seconds:.3f} s / "
                f"{pair.kubectls[-1].seconds:.3f} s"
            )
        lines.append(
            f"| {pair.what} | {summary([r.seconds for r in pair.steps])} "
            f"| {summary([r.seconds for r in pair.kubectls])} "
            f"| {ratio_line(pair.steps, pair.kubectls)} | {len(sent)} / {kubectl_sent} |"
        )
        if pair.retried:
            lines.append(f"|   ({pair.retried} rounds rerun after an exit 3) | | | | |")
        say("  step requests: " + ", ".join(sent))
    return lines


def bench_audit(cluster: Cluster, counts: Sequence[int], rounds: int) -> list[str]:
    lines = [
        "| pods | `dispatch-audit` min / median / max | `kubectl get pods -o json` | "
        "ratio of medians | peak RSS audit / kubectl (median) | requests (audit / kubectl) |",
        "|---|---|---|---|---|---|",
    ]
    ns = f"--namespace={NAMESPACE}"
    for count in counts:
        job = audited(count)
        audit = cluster.step("audit", ns, f"--name={job}")
        kubectl = cluster.kc("get", "pods", "-n", NAMESPACE, "-l", selector(job), "-o", "json")
        took = cluster.ensure_pods(count)
        if took:
            say(f"{count} pods there after {took:.0f} s")
        # The first run records what it saw: the runs after it only read.
        first = measured(audit, work=cluster.work, env=cluster.step_env)
        if first.status != 0:
            raise SystemExit(f"dispatch-audit exited {first.status} at {count} pods")
        sent = count_step(cluster, ["audit", ns, f"--name={job}"])
        kubectl_sent = count_kubectl([kubectl])
        audits: list[Run] = []
        kubectls: list[Run] = []
        for index in range(rounds):
            if index % 2:  # every other round kubectl first, as for the pairs
                kubectls.append(measured(kubectl, work=cluster.work))
                audits.append(measured(audit, work=cluster.work, env=cluster.step_env))
            else:
                audits.append(measured(audit, work=cluster.work, env=cluster.step_env))
                kubectls.append(measured(kubectl, work=cluster.work))
            if audits[-1].status or kubectls[-1].status:
                raise SystemExit(f"exit {audits[-1].status} / {kubectls[-1].status}")
            say(
                f"  {count} pods, round {index + 1}: {audits[-1].seconds:.3f} s "
                f"({audits[-1].peak_mib:.0f} MiB) / {kubectls[-1].seconds:.3f} s "
                f"({kubectls[-1].peak_mib:.0f} MiB)"
            )
        peak = statistics.median(r.peak_mib for r in audits)
        kubectl_peak = statistics.median(r.peak_mib for r in kubectls)
        lines.append(
            f"| {count:,} | {summary([r.seconds for r in audits])} "
            f"| {summary([r.seconds for r in kubectls])} | {ratio_line(audits, kubectls)} "
            f"| {peak:.0f} / {kubectl_peak:.0f} MiB | {len(sent)} / {kubectl_sent} |"
        )
    return lines


@contextmanager
def cluster_at(kubeconfig: Path | None, work: Path) -> Iterator[Path]:
    """The given cluster, or a control plane of the benchmark's own (stopped at the end)."""
    if kubeconfig is not None:
        yield kubeconfig
        return
    from tests.cluster.harness import ControlPlane

    with ControlPlane(work / "control-plane", progress=say) as plane:
        yield plane.kubeconfig


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.steps", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, help="an existing cluster (default: start one)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of each pair (default: 9)")
    parser.add_argument(
        "--audit-rounds", type=int, default=5, help="audit rounds per pod count (default: 5)"
    )
    parser.add_argument(
        "--pods",
        default=",".join(map(str, POD_COUNTS)),
        help="pod counts for the audit, comma-separated (default: 512,4096,16384)",
    )
    parser.add_argument(
        "--part",
        choices=("all", "steps", "audit"),
        default="all",
        help="what to run (default: all)",
    )
    args = parser.parse_args(argv)
    kubectl, jq = find_kubectl(), shutil.which("jq")
    missing = []
    if kubectl is None:
        missing.append(f"kubectl is not built: {HOW_TO_BUILD}")
    if jq is None:
        missing.append("jq is not installed: apt-get install jq")
    if missing or kubectl is None or jq is None:
        for line in missing:
            say(f"benchmark needs {line}")
        return 2
    counts = [int(word) for word in args.pods.split(",") if word]
    with tempfile.TemporaryDirectory(prefix="dispatch-bench-") as scratch:
        work = Path(scratch)
        with cluster_at(args.kubeconfig, work) as kubeconfig:
            cluster = Cluster(kubeconfig, kubectl, jq, work)
            cluster.setup(counts)
            header = [
                f"{machine_line()}; "
                f"{args.rounds} rounds of each pair, {args.audit_rounds} audit rounds",
                "",
            ]
            lines = bench_steps(cluster, args.rounds) if args.part != "audit" else []
            if args.part != "steps":
                lines += ["", *bench_audit(cluster, counts, args.audit_rounds)]
            sys.stdout.write("\n".join([*header, *lines]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
