"""Driving lifecycles on a real control plane: run the steps, play the kubelet, read executions.

Shared by the integration tests and the demo (tests/demo/__main__.py). The steps run as the console
scripts users run. There is no kubelet: pods are moved by writing `pods/status`, and what an
execution would see is read by resolving the pod's Downward API env from the live pod object
and running the pod's own command (the real prologue) under /bin/sh.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kubernetes import client

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.rules.errors import PreconditionFailed
from tests.cluster.wait import wait_until
from tests.support.environment import host_env
from tests.support.kueue_objects import KueueSetup
from tests.support.requests import request_flags
from tests.support.shells import resolve_downward_env

BIN: Final = Path(sys.executable).parent
REPORT: Final = 'printf "%s %s\\n" "$DISPATCH_EPOCH" "$DISPATCH_ATTEMPT"'
DEADLINE: Final = 120.0  # five Go controllers share two cores with the tests
STAGE_ATTEMPTS: Final = 3  # the shipped pipelines retry exit 3 the same way


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRun:
    """How one step process ended: exit code, its JSON result, the files it wrote to
    --outputs-dir (none unless given one), its log lines."""

    code: int
    result: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)
    stderr: str

    @property
    def error(self) -> str:
        """The message of the step's last log record (its one-line error when it failed)."""
        lines = self.stderr.strip().splitlines()
        return str(json.loads(lines[-1])["message"]) if lines else ""


def run_step(step: str, *args: str, kubeconfig: Path, outputs: Path | None = None) -> StepRun:
    """Run `dispatch-<step>` against the cluster, as a pipeline would (no host DISPATCH_*);
    with `outputs`, its results also written there (--outputs-dir), emptied first."""
    where: list[str] = []
    if outputs is not None:
        outputs.mkdir(parents=True, exist_ok=True)
        for stale in outputs.iterdir():
            stale.unlink()
        where = ["--outputs-dir", str(outputs)]
    done = subprocess.run(
        [str(BIN / f"dispatch-{step}"), "--kubeconfig", str(kubeconfig), *where, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=host_env(),
    )
    return StepRun(
        code=done.returncode,
        result=json.loads(done.stdout) if done.returncode == 0 else {},
        files={} if outputs is None else {p.name: p.read_text() for p in sorted(outputs.iterdir())},
        stderr=done.stderr,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Execution:
    """What one execution sees: its counters, epoch and attempt token."""

    pod: str
    admission: int
    restart: int
    epoch: int
    attempt: str

    @property
    def r(self) -> int:
        """R = A + J."""
        return self.admission + self.restart


def as_dict(value: object) -> dict[str, Any]:
    """Narrow a client answer (dict for custom objects, model for core ones) to a dict."""
    if hasattr(value, "to_dict"):
        value = client.ApiClient().sanitize_for_serialization(value)  # type: ignore[no-untyped-call]
    assert isinstance(value, dict)
    return value


class Kubelet:
    """Plays the kubelet for one namespace: finds pods, moves their phase, runs them."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace = namespace

    def pods(self, trainjob: str, *, restart: int | None = None) -> list[dict[str, Any]]:
        """Live trainer pods of the TrainJob's JobSet, optionally of one restart attempt."""
        selector = f"{wire.JOBSET_NAME_KEY}={trainjob}"
        if restart is not None:
            selector += f",{wire.RESTART_ATTEMPT_KEY}={restart}"
        listed = as_dict(self.core.list_namespaced_pod(self.namespace, label_selector=selector))
        return [
            pod
            for pod in listed["items"]
            if not pod["metadata"].get("deletionTimestamp")
            and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def wait_for_pod(
        self, trainjob: str, *, restart: int, admission: int | None = None
    ) -> dict[str, Any]:
        """The first live pod of attempt `restart` (carrying A = `admission` if given)."""

        def ready() -> dict[str, Any] | None:
            for pod in self.pods(trainjob, restart=restart):
                annotations = pod["metadata"].get("annotations") or {}
                if admission is None or annotations.get(wire.ADMISSION_ANNOTATION) == str(
                    admission
                ):
                    return pod
            return None

        what = f"a pod of {trainjob} with restart-attempt {restart} and A={admission}"
        return wait_until(ready, what=what, timeout=DEADLINE)

    def set_phase(self, pod: Mapping[str, Any], phase: str) -> None:
        """Write the pod's phase, as the kubelet would when its container ends."""
        status: dict[str, Any] = {"phase": phase}
        if phase == "Failed":
            status["containerStatuses"] = [
                {
                    "name": wire.TRAINER_CONTAINER,
                    "image": "x",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 1, "reason": "Error"}},
                }
            ]
        self.core.patch_namespaced_pod_status(
            pod["metadata"]["name"], self.namespace, {"status": status}
        )

    def execute(self, pod: Mapping[str, Any]) -> Execution:
        """Run the pod's trainer command (the real prologue) with its resolved env."""
        container = next(
            c for c in pod["spec"]["containers"] if c["name"] == wire.TRAINER_CONTAINER
        )
        env = resolve_downward_env(container.get("env") or [], pod)
        env.pop(wire.ENV_WORKDIR, None)  # the image's directories do not exist on this host
        env["PATH"] = "/usr/bin:/bin"
        prologue = container["command"][:4]
        done = subprocess.run(
            [*prologue, "/bin/sh", "-c", REPORT],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, f"the prologue refused: {done.stderr}"
        epoch, attempt = done.stdout.split()
        labels = pod["metadata"]["labels"]
        annotations = pod["metadata"]["annotations"]
        return Execution(
            pod=pod["metadata"]["name"],
            admission=int(annotations[wire.ADMISSION_ANNOTATION]),
            restart=int(labels[wire.RESTART_ATTEMPT_KEY]),
            epoch=int(epoch),
            attempt=attempt,
        )


JOBSET: Final = (wire.JOBSET_GROUP, wire.JOBSET_VERSION)
TRAINER: Final = (wire.TRAINER_GROUP, wire.TRAINER_VERSION)
Step = Callable[..., StepRun]


def read_trainjob(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    """The live TrainJob."""
    return as_dict(custom.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name))


def edit_trainjob(
    custom: client.CustomObjectsApi,
    namespace: str,
    name: str,
    change: Callable[[dict[str, Any]], None],
) -> None:
    """Read, change, replace, as a person would; again from a fresh read after a 409.

    Trainer writes a TrainJob's status on its own schedule, and a status write moves the
    resourceVersion a replace is preconditioned on; any other refusal is raised.
    """
    edit_object(custom, TRAINER, (namespace, "trainjobs", name), change)


def edit_object(
    custom: client.CustomObjectsApi,
    group_version: tuple[str, str],
    where: tuple[str, str, str],
    change: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """Read the object at `where` (namespace, plural, name), change it and replace it; again
    from a fresh read after a 409, as `kubectl edit` does: a controller's write between the read
    and the replace is a conflict, which the API server finds before admission runs. Any other
    refusal is raised. Returns the object as read for the replace that was taken."""
    namespace, plural, name = where

    def replaced() -> dict[str, Any] | None:
        current = as_dict(custom.get_namespaced_custom_object(*group_version, *where))
        edited = copy.deepcopy(current)
        change(edited)
        try:
            custom.replace_namespaced_custom_object(*group_version, namespace, plural, name, edited)
        except client.ApiException as e:
            if e.status == 409:
                return None
            raise
        return current

    return wait_until(replaced, what=f"{plural}/{name} to be replaced", timeout=DEADLINE)


def content(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a step could write: labels, annotations and spec (controllers own the status).

    Comparing this, not resourceVersion, is how a test shows a step wrote nothing: Trainer
    and Kueue update a TrainJob's status on their own schedule.
    """
    meta = obj["metadata"]
    return {
        "labels": meta.get("labels"),
        "annotations": meta.get("annotations"),
        "spec": obj.get("spec"),
    }


def read_jobset(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    """The live JobSet (Trainer gives it the TrainJob's name)."""
    return as_dict(custom.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", name))


def wait_for_drained_jobset(api: client.ApiClient, namespace: str, name: str) -> None:
    """After a hold: wait until no replicated job of the JobSet has active Jobs."""
    custom = client.CustomObjectsApi(api)

    def drained() -> bool | None:
        jobset = read_jobset(custom, namespace, name)
        statuses = jobset.get("status", {}).get("replicatedJobsStatus") or []
        return True if statuses and all(not s.get("active") for s in statuses) else None

    wait_until(drained, what=f"JobSet {name} to have no active Jobs", timeout=DEADLINE)


def run_stage(step: Step, *args: str) -> StepRun:
    """Run a step as a pipeline stage does: again, from its read, after exit 3 (conflict).

    Trainer and Kueue write a TrainJob's status on their own schedule; a step that read
    just before such a write fails its precondition, writes nothing, and is run again.
    """
    run: StepRun = step(*args)
    for _ in range(STAGE_ATTEMPTS - 1):
        if run.code != PreconditionFailed.exit_code:
            break
        run = step(*args)
    return run


def admit_wait(namespace: str, name: str, check: str, *, timeout: float) -> list[str]:
    """`admit --wait`'s flags for TrainJob `name`: wait up to `timeout` s for a reservation."""
    return [
        *("--namespace", namespace, "--name", name, "--check", check),
        *("--wait", "--timeout", str(timeout)),
    ]


def admit_and_approve(step: Step, namespace: str, name: str, check: str) -> StepRun:
    """The Kueue-mode pipeline for one admission: admit --wait, then approve with its outputs.

    An approve that finds the Workload changed since admit read it exits 3: the pipeline
    runs the pair again, so A is raised for the reservation that is approved.
    """
    target = ["--namespace", namespace, "--check", check]
    for _ in range(STAGE_ATTEMPTS):
        admitted = run_stage(step, "admit", *admit_wait(namespace, name, check, timeout=DEADLINE))
        assert admitted.code == 0, admitted.error
        approved = step(
            "approve",
            *target,
            "--workload",
            admitted.result["workload"],
            "--workload-resource-version",
            admitted.result["workloadResourceVersion"],
            "--admission",
            str(admitted.result["admission"]),
        )
        if approved.code != PreconditionFailed.exit_code:
            assert approved.code == 0, approved.error
            return admitted
    raise AssertionError(f"approve kept failing its precondition: {approved.error}")


def reset_jobset(custom: client.CustomObjectsApi, namespace: str, name: str) -> str:
    """Delete the JobSet as a person would; return the UID of the one Trainer rebuilds."""
    old = read_jobset(custom, namespace, name)["metadata"]["uid"]
    custom.delete_namespaced_custom_object(
        *JOBSET, namespace, "jobsets", name, propagation_policy="Foreground"
    )

    def rebuilt() -> str | None:
        try:
            uid = str(read_jobset(custom, namespace, name)["metadata"]["uid"])
        except client.ApiException:
            return None
        return uid if uid != old else None

    return wait_until(rebuilt, what=f"Trainer to rebuild JobSet {name}", timeout=DEADLINE)


def clear_flag(
    custom: client.CustomObjectsApi,
    namespace: str,
    name: str,
    uid: str,
    *,
    highest_restart: int | None = None,
) -> None:
    """What docs/operations.md tells a person to do once satisfied (A job flagged foreign): drop the
    flag, record the JobSet, and where a J may have been lost unseen record its bound."""
    annotations: dict[str, Any] = {
        wire.FOREIGN_ANNOTATION: None,
        wire.FOREIGN_CAUSE_ANNOTATION: None,
        wire.JOBSET_UID_ANNOTATION: uid,
    }
    if highest_restart is not None:
        annotations[wire.HIGHEST_RESTART_ANNOTATION] = str(highest_restart)
    custom.patch_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", name, {"metadata": {"annotations": annotations}}
    )


def settled(custom: client.CustomObjectsApi, namespace: str, name: str) -> None:
    """Wait until the controllers have stopped writing a new TrainJob: Trainer writes its
    status (conditions, then the JobSet's) within a second or so of the create, and a write
    racing it loses on its resourceVersion. A pipeline's next step runs well after that; a
    test that writes at once must wait for it (five unchanged reads, 0.2 s apart)."""
    seen: list[str] = []

    def quiet() -> bool | None:
        seen.append(str(read_trainjob(custom, namespace, name)["metadata"]["resourceVersion"]))
        return (len(seen) >= 5 and len(set(seen[-5:])) == 1) or None

    wait_until(quiet, what=f"TrainJob {name} to settle", timeout=DEADLINE)


def add_foreign_admission_entry(
    custom: client.CustomObjectsApi, namespace: str, name: str, *, admission: str
) -> None:
    """Another manager's runtime-patch entry that sets A on the trainer's pods, put first."""

    def add(job: dict[str, Any]) -> None:
        patches = job["spec"]["runtimePatches"]
        ours = next(p for p in patches if p["manager"] == wire.PATCH_MANAGER)
        theirs = json.loads(json.dumps(ours))
        theirs.pop("time", None)
        theirs["manager"] = FOREIGN_MANAGER
        replicated = theirs["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        replicated["template"]["spec"]["template"]["metadata"]["annotations"] = {
            wire.ADMISSION_ANNOTATION: admission
        }
        patches.insert(0, theirs)

    edit_trainjob(custom, namespace, name, add)


FOREIGN_MANAGER: Final = "someone.example/tweaks"


def start_args(namespace: str, runtime: str, job_id: str, **extra: str) -> list[str]:
    """Flags of a start request in the test's namespace (there is no kubelet to run it)."""
    flags = [f"--namespace={namespace}", f"--runtime-name={runtime}"]
    return [*flags, *request_flags(job_id, args=False, extra=extra)]


def copy_of(live: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A running TrainJob as `kubectl get -o yaml` gives it, made ready to create under `name`:
    its labels, annotations and spec, less Kueue's runtime-patch entry, which Kueue's webhook
    adds to every TrainJob it sees made (copied, it would be a duplicate: 422)."""
    meta, spec = live["metadata"], live["spec"]
    patches = [p for p in spec["runtimePatches"] if p["manager"] != "kueue.x-k8s.io/manager"]
    return {
        "apiVersion": live["apiVersion"],
        "kind": live["kind"],
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": meta.get("labels", {}),
            "annotations": meta.get("annotations", {}),
        },
        "spec": {**spec, "runtimePatches": patches},
    }


def rank_made_again(
    api: client.ApiClient, kubelet: Kubelet, name: str, *, rank: str = "1"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Scale the two-rank trainer Job of TrainJob `name` to one rank and back, as a member can
    where the path guard is not installed (issue 43): rank `rank`'s pod goes without failing
    (no restart, J stays) and the Job controller makes it again from the same template, with
    the same A and J. Returns the rank's pod before and after."""
    batch, job = client.BatchV1Api(api), f"{name}-node-0"

    def of_rank() -> dict[str, Any] | None:
        for pod in kubelet.pods(name, restart=0):
            if pod["metadata"]["labels"].get(wire.COMPLETION_INDEX_KEY) == rank:
                return pod
        return None

    first = wait_until(of_rank, what=f"rank {rank} of {name}", timeout=DEADLINE)
    batch.patch_namespaced_job(
        job, kubelet.namespace, {"spec": {"parallelism": 1, "completions": 1}}
    )
    wait_until(lambda: of_rank() is None or None, what=f"rank {rank} gone", timeout=DEADLINE)
    batch.patch_namespaced_job(
        job, kubelet.namespace, {"spec": {"parallelism": 2, "completions": 2}}
    )

    def again() -> dict[str, Any] | None:
        pod = of_rank()
        return (
            pod if pod is not None and pod["metadata"]["uid"] != first["metadata"]["uid"] else None
        )

    return first, wait_until(again, what=f"rank {rank} of {name} made again", timeout=DEADLINE)


def start_queued(
    step: Step, namespace: str, runtime: str, kueue: KueueSetup, job_id: str
) -> StepRun:
    """Start a one-CPU TrainJob in the Kueue setup's LocalQueue."""
    started = step("start", *start_args(namespace, runtime, job_id, **kueue.queued_request()))
    assert started.code == 0, started.error
    return started


def blocked_admission(
    step: Step, namespace: str, runtime: str, kueue: KueueSetup, *, timeout: int
) -> tuple[StepRun, list[str]]:
    """A job admitted holding the queue's one CPU, and `admit --wait` flags for a second job
    that waits behind it (up to `timeout` s): free the quota with kueue.set_active(blocker)."""
    kueue.install(cpu="1")
    blocker = start_queued(step, namespace, runtime, kueue, "holds-the-quota")
    admit_and_approve(step, namespace, blocker.result["name"], kueue.check)
    waiting = start_queued(step, namespace, runtime, kueue, "waits")
    return blocker, admit_wait(namespace, waiting.result["name"], kueue.check, timeout=timeout)
