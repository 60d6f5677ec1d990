"""Runs on the real engines: submit a Workflow from a WorkflowTemplate or a PipelineRun of a
Pipeline, as `argo submit --from` and `tkn pipeline start` do, and read what they ended with."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kubernetes import client

from tests.cluster import kube
from tests.cluster.engine import BUSYBOX
from tests.cluster.wait import wait_until
from tests.support.executions import FINISHES, IDENTITY, PREEMPTOR, RUNS, Printed, expected, printed
from tests.support.kueue_objects import KueueSetup
from tests.support.lifecycle import as_dict, reset_jobset
from tests.support.shipped import PIPELINES, documents
from tests.support.step_identity import SERVICE_ACCOUNT

ARGO: Final = ("argoproj.io", "v1alpha1")
TEKTON: Final = ("tekton.dev", "v1")
ARGO_DONE: Final = frozenset({"Succeeded", "Failed", "Error"})
RUN_TIMEOUT: Final = 300.0


@dataclass(frozen=True, slots=True)
class Ended:
    """How a run ended: its phase (Argo) or Succeeded reason (Tekton), and its object."""

    succeeded: bool
    phase: str
    body: dict[str, Any]

    def nodes(self, template: str) -> list[dict[str, Any]]:
        """Argo: the pod nodes that ran `template`, oldest first."""
        found = [
            node
            for node in (self.body.get("status", {}).get("nodes") or {}).values()
            if node.get("type") == "Pod"
            and template in (node.get("templateName"), node.get("templateRef", {}).get("template"))
        ]
        return sorted(found, key=lambda node: str(node.get("startedAt")))

    def outputs(self, template: str) -> dict[str, str]:
        """Argo: the output parameters of the last pod node that ran `template`."""
        (*_, last) = self.nodes(template)
        parameters = (last.get("outputs") or {}).get("parameters") or []
        return {p["name"]: p.get("value", "") for p in parameters}

    def results(self) -> dict[str, str]:
        """Tekton: the PipelineRun's results."""
        return {r["name"]: r["value"] for r in self.body.get("status", {}).get("results") or []}


def _get(api: client.ApiClient, group_version: tuple[str, str], path: str) -> dict[str, Any]:
    return kube.request(api, "GET", f"/apis/{'/'.join(group_version)}/{path}")


_TEMPLATE_MISSING: Final = re.compile(r'workflowtemplates?\.argoproj\.io "[^"]+" not found')


def submit_workflow(
    api: client.ApiClient, namespace: str, template: str, parameters: Mapping[str, str]
) -> str:
    """A Workflow from WorkflowTemplate `template` with `parameters`; returns its name.

    The workflow controller resolves `workflowTemplateRef`, and every `templateRef` inside
    it, from its informer's cache, not from the API server, so a Workflow submitted just
    after its templates were created can end at once (`workflowtemplate.argoproj.io "…" not
    found`, or `workflowtemplates.…` as the API server words it, naming the template or one it
    refers to, e.g. dispatch-steps) with no node run.
    That one end is submitted again, until the controller's cache has every template.
    """
    workflow = {
        "apiVersion": "/".join(ARGO),
        "kind": "Workflow",
        "metadata": {"generateName": f"{template}-"},
        "spec": {
            "workflowTemplateRef": {"name": template},
            "arguments": {"parameters": [{"name": k, "value": v} for k, v in parameters.items()]},
        },
    }

    def resolved() -> str | None:
        name = str(kube.apply(api, workflow, namespace=namespace)["metadata"]["name"])
        path = f"namespaces/{namespace}/workflows/{name}"

        def taken() -> dict[str, Any] | None:
            status: dict[str, Any] = _get(api, ARGO, path).get("status") or {}
            return status if status.get("phase") else None

        status = wait_until(taken, what=f"the controller to take Workflow {name}", timeout=60)
        if not status.get("nodes") and _TEMPLATE_MISSING.search(str(status.get("message"))):
            return None
        return name

    return wait_until(resolved, what=f"WorkflowTemplate {template} in Argo's cache", timeout=60)


def run_ended(
    api: client.ApiClient,
    group_version: tuple[str, str],
    plural: str,
    kind: str,
    namespace: str,
    name: str,
    *,
    is_done: Callable[[dict[str, Any]], Ended | None],
    timeout: float = RUN_TIMEOUT,
) -> Ended:
    """Wait for the `kind` `name` (`plural` of `group_version`) to end: poll it until
    `is_done` reads an end from it."""
    return wait_until(
        lambda: is_done(_get(api, group_version, f"namespaces/{namespace}/{plural}/{name}")),
        what=f"{kind} {name} to end",
        timeout=timeout,
    )


def _workflow_done(body: dict[str, Any]) -> Ended | None:
    """Argo: how a Workflow ended, by its phase; None while it runs."""
    phase = str(body.get("status", {}).get("phase") or "")
    return Ended(phase == "Succeeded", phase, body) if phase in ARGO_DONE else None


def workflow_ended(
    api: client.ApiClient, namespace: str, name: str, *, timeout: float = RUN_TIMEOUT
) -> Ended:
    """Wait for Workflow `name` to end."""
    return run_ended(
        api, ARGO, "workflows", "Workflow", namespace, name, is_done=_workflow_done, timeout=timeout
    )


def start_pipeline(
    api: client.ApiClient,
    namespace: str,
    pipeline: str,
    params: Mapping[str, str],
    *,
    timeout: str | None = None,
) -> str:
    """A PipelineRun of `pipeline` with `params`, as the dispatch-steps ServiceAccount."""
    spec: dict[str, Any] = {
        "pipelineRef": {"name": pipeline},
        "params": [{"name": k, "value": v} for k, v in params.items()],
        "taskRunTemplate": {"serviceAccountName": SERVICE_ACCOUNT},
    }
    if timeout is not None:
        spec["timeouts"] = {"pipeline": timeout}
    run = {
        "apiVersion": "/".join(TEKTON),
        "kind": "PipelineRun",
        "metadata": {"generateName": f"{pipeline}-"},
        "spec": spec,
    }
    return str(kube.apply(api, run, namespace=namespace)["metadata"]["name"])


def _pipeline_run_done(body: dict[str, Any]) -> Ended | None:
    """Tekton: how a PipelineRun ended, by its Succeeded condition; None while it runs."""
    for condition in body.get("status", {}).get("conditions") or []:
        if condition["type"] == "Succeeded" and condition["status"] != "Unknown":
            return Ended(condition["status"] == "True", condition.get("reason", ""), body)
    return None


def pipeline_run_ended(
    api: client.ApiClient, namespace: str, name: str, *, timeout: float = RUN_TIMEOUT
) -> Ended:
    """Wait for PipelineRun `name` to end."""
    return run_ended(
        api,
        TEKTON,
        "pipelineruns",
        "PipelineRun",
        namespace,
        name,
        is_done=_pipeline_run_done,
        timeout=timeout,
    )


def task_runs(api: client.ApiClient, namespace: str, run: str) -> list[dict[str, Any]]:
    """The TaskRuns of PipelineRun `run`, oldest first."""
    listed = kube.request(
        api,
        "GET",
        f"/apis/{'/'.join(TEKTON)}/namespaces/{namespace}/taskruns",
        query=[("labelSelector", f"tekton.dev/pipelineRun={run}")],
    )
    return sorted(listed["items"], key=lambda t: str(t["metadata"]["creationTimestamp"]))


ARGO_FILES: Final = (
    PIPELINES / "rbac" / "argo-executor.yaml",
    PIPELINES / "argo" / "steps.yaml",
    PIPELINES / "argo" / "plain.yaml",
    PIPELINES / "argo" / "kueue.yaml",
    PIPELINES / "argo" / "audit-cron.yaml",
)
TEKTON_FILES: Final = (PIPELINES / "tekton" / "tasks.yaml", PIPELINES / "tekton" / "pipelines.yaml")


def install_shipped(api: client.ApiClient, namespace: str, files: tuple[Path, ...]) -> None:
    """The shipped manifests of `files` in `namespace`, exactly as written."""
    for path in files:
        for document in documents(path):
            kube.apply(api, document, namespace=namespace)


def start_request(
    namespace: str,
    runtime: str,
    *,
    train: str,
    queue: str | None = None,
    job_id: str = IDENTITY.job_id,
) -> dict[str, Any]:
    """A start request (docs/cli.md: The start request) whose training command is `train`."""
    request: dict[str, Any] = {
        "namespace": namespace,
        "runtime_name": runtime,
        "job_id": job_id,
        "generation": IDENTITY.generation,
        "submission": IDENTITY.submission,
        "attempt": IDENTITY.attempt,
        "image": BUSYBOX,
        "command": ["/bin/sh", "-c", train],
    }
    if queue is not None:
        request["queue"] = queue
    return request


def queued_request(
    namespace: str,
    runtime: str,
    kueue: KueueSetup,
    *,
    image: str,
    priority: str,
    train: str,
    job_id: str,
    wait_seconds: str,
    pause_seconds: str,
) -> dict[str, str]:
    """The dispatch-kueue arguments (Argo's parameters, Tekton's params) of a one-CPU start
    request at `priority` in the Kueue setup's LocalQueue, run by the steps in `image`: each
    round waits `wait_seconds` for a reservation, then pauses `pause_seconds`."""
    request = start_request(namespace, runtime, train=train, queue=kueue.local_queue, job_id=job_id)
    request |= {"resources_per_node": {"requests": {"cpu": "1"}}, "priority_class": priority}
    return {
        "request": json.dumps(request),
        "image": image,
        "check": kueue.check,
        "wait-seconds": wait_seconds,
        "pause-seconds": pause_seconds,
    }


QUIET_ROUND: Final = '"exit_code": 75'  # admit's log line when no reservation came in time


@dataclass(frozen=True, slots=True, kw_only=True)
class Gates:
    """A dispatch-kueue Workflow whose gates loop runs: what it started, how far it went."""

    trainjob: str
    trainjob_uid: str
    quiet: int  # rounds that ended with admit's 75 (no reservation within wait-seconds)
    pod_nodes: int
    phase: str


def gates(api: client.ApiClient, namespace: str, workflow: str) -> Gates | None:
    """The gates of Workflow `workflow` once its loop's pod runs, else None."""
    body = _get(api, ARGO, f"namespaces/{namespace}/workflows/{workflow}")
    ended = Ended(False, str(body.get("status", {}).get("phase") or ""), body)
    if not ended.nodes("start") or not ended.nodes("kueue-gates"):
        return None
    started = ended.outputs("start")
    core = client.CoreV1Api(api)
    listed = as_dict(
        core.list_namespaced_pod(
            namespace, label_selector=f"workflows.argoproj.io/workflow={workflow}"
        )
    )
    running = [
        p["metadata"]["name"]
        for p in listed["items"]
        if "kueue-gates" in p["metadata"]["name"] and p["status"].get("phase") != "Pending"
    ]
    if not running:
        return None
    log = core.read_namespaced_pod_log(running[0], namespace, container="main")
    return Gates(
        trainjob=started["name"],
        trainjob_uid=started["uid"],
        quiet=str(log).count(QUIET_ROUND),
        pod_nodes=sum(1 for n in body["status"]["nodes"].values() if n.get("type") == "Pod"),
        phase=ended.phase,
    )


def gates_running(api: client.ApiClient, namespace: str, workflow: str) -> Gates:
    """Wait until the gates loop of Workflow `workflow` runs."""
    return wait_until(
        lambda: gates(api, namespace, workflow),
        what=f"the gates loop of {workflow} to run",
        timeout=RUN_TIMEOUT,
    )


def reset_after_one_restart(
    api: client.ApiClient, namespace: str, name: str, *, audit: Callable[[], int]
) -> None:
    """Run TrainJob `name` (its TRAIN command fails J = 0) to J = 1 and audit it, so the
    audit records that execution; then reset its JobSet (R repeats from J = 0)."""
    core = client.CoreV1Api(api)
    printed(core, namespace, name, restart=1, admission=1)
    assert audit() == 0, "records J = 1 and its execution"
    reset_jobset(client.CustomObjectsApi(api), namespace, name)
    printed(core, namespace, name, restart=0, admission=1)


def started_trainjob(api: client.ApiClient, namespace: str, run: str) -> str:
    """The TrainJob the `start` task of PipelineRun `run` created, once it has."""

    def name() -> str | None:
        for task_run in task_runs(api, namespace, run):
            if task_run["metadata"]["labels"].get("tekton.dev/pipelineTask") != "start":
                continue
            for result in task_run.get("status", {}).get("results") or []:
                if result["name"] == "name":
                    return str(result["value"])
        return None

    return wait_until(name, what=f"the start task of {run}", timeout=RUN_TIMEOUT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Preemption:
    """The victim of a preemption: its TrainJob, and what it printed before and after."""

    trainjob: str
    first: Printed
    second: Printed


def preemption_and_readmission(
    api: client.ApiClient,
    namespace: str,
    kueue: KueueSetup,
    *,
    runtime: str,
    image: str,
    wait_seconds: str,
    pause_seconds: str,
    submit: Callable[[dict[str, str]], str],
    started: Callable[[str], str],
    ended: Callable[[str], Ended],
    meanwhile: Callable[[str], None] = lambda run: None,
) -> Preemption:
    """One CPU for two queued jobs: the victim runs at A = 1; a preemptor of higher priority
    takes the CPU, runs and finishes, its run ending with 0; the victim is admitted again, A
    raised, and prints an R above its first.

    Each is a dispatch-kueue run of `runtime` with the steps in `image` (queued_request):
    `submit` starts one from its arguments and names it, `started` waits for the TrainJob a
    run started, `ended` for a run to end; `meanwhile` is what the victim's run is checked for
    before the preemptor comes.
    """
    core = client.CoreV1Api(api)
    low, high = f"{namespace}-low", f"{namespace}-high"
    kueue.install(cpu="1", priorities={low: 10, high: 1000})

    def queue(priority: str, train: str, job_id: str) -> str:
        return submit(
            queued_request(
                namespace,
                runtime,
                kueue,
                image=image,
                priority=priority,
                train=train,
                job_id=job_id,
                wait_seconds=wait_seconds,
                pause_seconds=pause_seconds,
            )
        )

    victim = queue(low, RUNS, IDENTITY.job_id)
    name = started(victim)
    first = printed(core, namespace, name, restart=0, admission=1)
    assert (first.epoch, first.attempt) == expected(1, 0)
    meanwhile(victim)

    preemptor = queue(high, FINISHES, PREEMPTOR.job_id)
    ran = printed(core, namespace, started(preemptor), restart=0, admission=1)
    assert (ran.epoch, ran.attempt) == expected(1, 0, PREEMPTOR)
    done = ended(preemptor)
    assert done.succeeded, done.phase  # its gates ended with 0 once it had finished

    second = printed(core, namespace, name, restart=0, admission=2)
    assert (second.epoch, second.attempt) == expected(2, 0)
    assert second.epoch > first.epoch
    return Preemption(trainjob=name, first=first, second=second)
