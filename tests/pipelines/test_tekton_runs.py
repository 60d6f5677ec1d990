"""The shipped Tekton Tasks and Pipelines run by the real Tekton controller, their steps in the
step image on the real node, and the training pods they open printing R."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kubernetes import client

from tests.cluster import kube
from tests.pipelines.as_shipped import differences, pod_running, substituted
from tests.pipelines.runs import (
    TEKTON_FILES,
    Ended,
    install_shipped,
    pipeline_run_ended,
    preemption_and_readmission,
    reset_after_one_restart,
    start_pipeline,
    start_request,
    started_trainjob,
    task_runs,
)
from tests.support.cluster_under_test import Cluster
from tests.support.executions import (
    RUNS,
    TRAIN,
    api_port,
    expected,
    printed,
)
from tests.support.kueue_objects import KueueSetup
from tests.support.lifecycle import Step, run_stage
from tests.support.shipped import PIPELINES, documents
from tests.support.step_identity import SERVICE_ACCOUNT

pytestmark = [
    pytest.mark.engines,
    pytest.mark.pipelines,
    pytest.mark.node,
    pytest.mark.images,
    pytest.mark.cluster,
]


@pytest.fixture
def tekton(
    api_client: client.ApiClient, namespace: str, steps_identity: object, engines: float
) -> str:
    """The shipped Tekton manifests in the test's namespace, as docs/pipelines.md installs them."""
    install_shipped(api_client, namespace, TEKTON_FILES)
    return namespace


def _run(api: client.ApiClient, namespace: str, pipeline: str, **params: str) -> Ended:
    return pipeline_run_ended(api, namespace, start_pipeline(api, namespace, pipeline, params))


def _exit_codes(task_run: dict[str, Any]) -> list[int]:
    """The exit codes of a TaskRun's attempts: its retries first, then its last."""
    attempts = [*(task_run["status"].get("retriesStatus") or []), task_run["status"]]
    return [
        step["terminated"]["exitCode"]
        for attempt in attempts
        for step in attempt.get("steps") or []
        if "terminated" in step
    ]


def test_open_hold_release_each_print_the_next_r(
    api_client: client.ApiClient,
    tekton: str,
    real_node_runtime: str,
    step_image_on_node: str,
    control_plane: Cluster,
) -> None:
    namespace, core = tekton, client.CoreV1Api(api_client)
    request = json.dumps(start_request(namespace, real_node_runtime, train=RUNS))
    image = step_image_on_node

    opened = _run(api_client, namespace, "dispatch-open", request=request, image=image)
    assert opened.succeeded, opened.phase
    name = opened.results()["trainjob"]
    assert opened.results()["admission"] == "1"
    first = printed(core, namespace, name, restart=0, admission=1)
    assert (first.epoch, first.attempt) == expected(1, 0)
    # The start step's pod as the shipped Task says, but for what this machine forces
    # (tests/pipelines/as_shipped.py): Tekton's default-pod-template reaches it, and nothing
    # else may. The Task's stepTemplate is merged into each step (it sets no env).
    (task,) = [
        d
        for d in documents(PIPELINES / "tekton" / "tasks.yaml")
        if d["metadata"]["name"] == "dispatch-start"
    ]
    (start,) = [s for s in task["spec"]["steps"] if s["name"] == "start"]
    shipped_step = {**task["spec"]["stepTemplate"], **start}
    placeholders = {"$(params.image)": image, "$(context.taskRun.namespace)": namespace}
    found = differences(
        pod_running(core, namespace, "step-start", "dispatch-start"),
        container="step-start",
        shipped_container=substituted(shipped_step, placeholders),
        shipped_pod={"serviceAccountName": SERVICE_ACCOUNT},
        api_port=api_port(control_plane.kubeconfig),
    )
    assert found == {}, f"the pod differs from the shipped Task: {found}"

    held = _run(api_client, namespace, "dispatch-hold", trainjob=name, image=image)
    assert held.succeeded, held.phase
    released = _run(api_client, namespace, "dispatch-release", trainjob=name, image=image)
    assert released.succeeded, released.phase
    second = printed(core, namespace, name, restart=0, admission=2)
    assert (second.epoch, second.attempt) == expected(2, 0)
    assert second.epoch > first.epoch


def test_the_kueue_pipeline_gates_a_preemption_and_readmission(
    api_client: client.ApiClient,
    tekton: str,
    real_node_runtime: str,
    step_image_on_node: str,
    kueue: KueueSetup,
) -> None:
    namespace = tekton

    preemption_and_readmission(
        api_client,
        namespace,
        kueue,
        runtime=real_node_runtime,
        image=step_image_on_node,
        wait_seconds="2",
        pause_seconds="1",
        submit=lambda params: start_pipeline(
            api_client, namespace, "dispatch-kueue", params, timeout="0"
        ),
        started=lambda run: started_trainjob(api_client, namespace, run),
        ended=lambda run: pipeline_run_ended(api_client, namespace, run),
    )


# The JobSet guard refuses the reset itself: it happens where no policy is installed.
@pytest.mark.policies("none")
def test_a_jobset_reset_stops_the_release_at_its_audit(
    api_client: client.ApiClient,
    tekton: str,
    real_node_runtime: str,
    step_image_on_node: str,
    step: Step,
) -> None:
    namespace = tekton
    request = json.dumps(start_request(namespace, real_node_runtime, train=TRAIN))
    image = step_image_on_node
    opened = _run(api_client, namespace, "dispatch-open", request=request, image=image)
    assert opened.succeeded, opened.phase
    name = opened.results()["trainjob"]
    target = ("--namespace", namespace, "--name", name)
    reset_after_one_restart(
        api_client, namespace, name, audit=lambda: run_stage(step, "audit", *target).code
    )

    released = _run(api_client, namespace, "dispatch-release", trainjob=name, image=image)
    assert not released.succeeded
    runs = {
        r["metadata"]["labels"]["tekton.dev/pipelineTask"]: r
        for r in task_runs(api_client, namespace, released.body["metadata"]["name"])
    }
    assert _exit_codes(runs["audit"]) == [7]
    assert "unsuspend" not in runs, "nothing is released past a flagged reset"


@pytest.mark.parametrize("code", [3, 75, 6, 7])
def test_the_shipped_pipelines_never_retry(
    api_client: client.ApiClient, tekton: str, exit_code_image: str, code: int
) -> None:
    """Tekton cannot retry by exit code, so the shipped Pipelines retry nothing: one attempt
    whatever the code (the Kueue loop goes round itself instead)."""
    ended = _run(
        api_client, tekton, "dispatch-hold", trainjob=f"exit-{code}", image=exit_code_image
    )
    assert not ended.succeeded
    (hold,) = task_runs(api_client, tekton, ended.body["metadata"]["name"])
    assert _exit_codes(hold) == [code]


def test_tekton_retries_retry_a_refusal_too(
    api_client: client.ApiClient, tekton: str, exit_code_image: str
) -> None:
    """Why: `retries` on a PipelineTask reruns a failed task whatever its exit code, a
    refusal (6) as much as a conflict (3)."""
    pipeline = copy.deepcopy(
        next(p for p in documents(TEKTON_FILES[1]) if p["metadata"]["name"] == "dispatch-hold")
    )
    pipeline["metadata"]["name"] = "hold-with-retries"
    pipeline["spec"]["tasks"][0]["retries"] = 2
    kube.apply(api_client, pipeline, namespace=tekton)
    ended = _run(api_client, tekton, "hold-with-retries", trainjob="exit-6", image=exit_code_image)
    assert not ended.succeeded
    (hold,) = task_runs(api_client, tekton, ended.body["metadata"]["name"])
    assert _exit_codes(hold) == [6, 6, 6]


def _task(name: str, step: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "tekton.dev/v1",
        "kind": "Task",
        "metadata": {"name": name},
        "spec": {"params": [{"name": "request"}], "steps": [step]},
    }


def test_tektons_webhook_defaults_and_validates_what_is_created(
    api_client: client.ApiClient, tekton: str
) -> None:
    """The shipped Tasks and Pipelines went through Tekton's webhook (the fixture made them);
    a Task Tekton refuses is refused on create, as on a cluster, and one it takes is stored
    defaulted. Without the webhook the bad Task was stored, and the param kept no type."""
    tasks = client.CustomObjectsApi(api_client)

    def create(task: dict[str, Any]) -> dict[str, Any]:
        made = tasks.create_namespaced_custom_object("tekton.dev", "v1", tekton, "tasks", task)
        assert isinstance(made, dict)
        return made

    # Its CRD's schema takes both; Tekton's validation takes one or the other.
    bad = {"name": "both", "image": "busybox", "script": "true", "command": ["true"]}
    with pytest.raises(client.ApiException) as refused:
        create(_task("bad-step", bad))
    assert refused.value.status == 400, refused.value.body
    message = json.loads(str(refused.value.body))["message"]
    assert message.startswith('admission webhook "validation.webhook.pipeline.tekton.dev" denied')
    assert "script cannot be used with command" in message

    good = {"name": "one", "image": "busybox", "script": "true"}
    made = create(_task("good-step", good))
    assert made["spec"]["params"] == [{"name": "request", "type": "string"}]
