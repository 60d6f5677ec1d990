"""The shipped Argo WorkflowTemplates and CronWorkflow run by the real Argo Workflows
controller, their steps in the step image on the real node, and the training pods they open
printing R (DISPATCH_EPOCH and DISPATCH_ATTEMPT) read from their own logs."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Final

import pytest
from kubernetes import client

from tests.cluster import kube
from tests.cluster.wait import wait_until
from tests.pipelines.as_shipped import differences, pod_running, substituted
from tests.pipelines.runs import (
    ARGO_FILES,
    Gates,
    gates,
    gates_running,
    install_shipped,
    preemption_and_readmission,
    reset_after_one_restart,
    start_request,
    submit_workflow,
    workflow_ended,
)
from tests.support.cluster_under_test import Cluster
from tests.support.executions import (
    RUNS,
    TRAIN,
    api_port,
    expected,
    on_the_node,
    printed,
)
from tests.support.kueue_objects import KueueSetup, condition
from tests.support.lifecycle import Step, as_dict, read_trainjob, run_stage
from tests.support.render import JOBS
from tests.support.shipped import PIPELINES, Manifest, default_image, documents

pytestmark = [
    pytest.mark.engines,
    pytest.mark.pipelines,
    pytest.mark.node,
    pytest.mark.images,
    pytest.mark.cluster,
]
ROUNDS: Final = 200  # issue 10: the loop must outlast a long job's many quiet rounds
LOOP_TIMEOUT: Final = 1800.0
SCHEDULED_TIME: Final = "workflows.argoproj.io/scheduled-time"  # set on every run a cron makes


@pytest.fixture
def argo(
    api_client: client.ApiClient, namespace: str, steps_identity: object, engines: float
) -> str:
    """The shipped Argo manifests in the test's namespace, as docs/pipelines.md installs them."""
    install_shipped(api_client, namespace, ARGO_FILES)
    return namespace


def shipped_template(path: str, name: str) -> Manifest:
    """The WorkflowTemplate `name` of pipelines/argo/`path`, as shipped."""
    (found,) = [d for d in documents(PIPELINES / "argo" / path) if d["metadata"]["name"] == name]
    return found


def test_open_hold_release_each_print_the_next_r(
    api_client: client.ApiClient,
    argo: str,
    real_node_runtime: str,
    step_image_on_node: str,
    control_plane: Cluster,
) -> None:
    namespace, core = argo, client.CoreV1Api(api_client)
    request = json.dumps(start_request(namespace, real_node_runtime, train=RUNS))
    image = {"image": step_image_on_node}

    def run(template: str, **parameters: str) -> dict[str, dict[str, str]]:
        name = submit_workflow(api_client, namespace, template, {**image, **parameters})
        ended = workflow_ended(api_client, namespace, name)
        assert ended.succeeded, ended.phase
        return {t: ended.outputs(t) for t in ("start", "unsuspend", "hold") if ended.nodes(t)}

    opened = run("dispatch-open", request=request)
    name = opened["start"]["name"]
    assert opened["unsuspend"]["admission"] == "1"
    # The start step's pod as the shipped templates say, but for what this machine forces
    # (tests/pipelines/as_shipped.py): Argo's workflowDefaults reach it, and nothing else may.
    (start,) = [
        t
        for t in shipped_template("steps.yaml", "dispatch-steps")["spec"]["templates"]
        if t["name"] == "start"
    ]
    placeholders = {
        "{{inputs.parameters.image}}": step_image_on_node,
        "{{workflow.namespace}}": namespace,
    }
    workflow = shipped_template("plain.yaml", "dispatch-open")["spec"]
    found = differences(
        pod_running(core, namespace, "main", "dispatch-start"),
        container="main",
        shipped_container=substituted(start["container"], placeholders),
        shipped_pod={
            "serviceAccountName": workflow["serviceAccountName"],
            "securityContext": start["securityContext"],
        },
        api_port=api_port(control_plane.kubeconfig),
        engine_env="ARGO_",
    )
    assert found == {}, f"the pod differs from the shipped template: {found}"
    first = printed(core, namespace, name, restart=0, admission=1)
    assert (first.epoch, first.attempt) == expected(1, 0)

    assert run("dispatch-hold", trainjob=name)["hold"]["held"] == "true"
    released = run("dispatch-release", trainjob=name)
    assert released["unsuspend"]["admission"] == "2"
    second = printed(core, namespace, name, restart=0, admission=2)
    assert (second.epoch, second.attempt) == expected(2, 0)
    assert second.epoch > first.epoch


def test_the_kueue_loop_outlasts_200_rounds_then_gates_a_preemption_and_readmission(
    api_client: client.ApiClient,
    argo: str,
    real_node_runtime: str,
    step_image_on_node: str,
    kueue: KueueSetup,
) -> None:
    namespace = argo

    def loops(victim: str) -> None:
        rounds = wait_until(
            lambda: _after(gates(api_client, namespace, victim), ROUNDS),
            what=f"the gates to go round {ROUNDS} times",
            timeout=LOOP_TIMEOUT,
        )
        assert rounds.pod_nodes == 2, "start and the gates: the workflow does not grow"
        assert rounds.phase == "Running"

    # The preemptor's command ends: its Workload finishes, its loop ends with 0, the
    # victim is admitted again through its loop, with A raised for the new reservation.
    seen = preemption_and_readmission(
        api_client,
        namespace,
        kueue,
        runtime=real_node_runtime,
        image=step_image_on_node,
        wait_seconds="1",  # a quiet round: no reservation within 1 s, exit 75
        pause_seconds="0",
        submit=lambda parameters: submit_workflow(
            api_client, namespace, "dispatch-kueue", parameters
        ),
        started=lambda workflow: gates_running(api_client, namespace, workflow).trainjob,
        ended=lambda workflow: workflow_ended(api_client, namespace, workflow),
        meanwhile=loops,
    )
    assert seen.second.pod != seen.first.pod
    victim = read_trainjob(client.CustomObjectsApi(api_client), namespace, seen.trainjob)
    workload = kueue.workload_of(victim["metadata"]["uid"])
    assert workload is not None
    assert condition(workload, "Admitted") == "True"


# The JobSet guard refuses the reset itself: it happens where no policy is installed.
@pytest.mark.policies("none")
def test_a_jobset_reset_is_flagged_by_the_scheduled_audits_and_stops_the_release(
    api_client: client.ApiClient,
    argo: str,
    real_node_runtime: str,
    step_image_on_node: str,
    step: Step,
    control_plane: Cluster,
) -> None:
    """J restarts at 0 after the JobSet is rebuilt: R would repeat. The CronWorkflow's and
    the CronJob's audits flag it (exit 7, not retried), and the release stops at its audit."""
    namespace = argo
    request = json.dumps(start_request(namespace, real_node_runtime, train=TRAIN))
    image = {"image": step_image_on_node}
    opened = workflow_ended(
        api_client,
        namespace,
        submit_workflow(api_client, namespace, "dispatch-open", {**image, "request": request}),
    )
    assert opened.succeeded, opened.phase
    name = opened.outputs("start")["name"]
    target = ("--namespace", namespace, "--name", name)
    reset_after_one_restart(
        api_client, namespace, name, audit=lambda: run_stage(step, "audit", *target).code
    )

    (cron,) = documents(ARGO_FILES[-1])
    cron["spec"]["schedules"] = ["* * * * *"]  # every minute, not every 15
    cron["spec"]["workflowSpec"]["arguments"]["parameters"] = [
        {"name": "image", "value": step_image_on_node},
    ]
    applied = datetime.now(UTC)
    kube.apply(api_client, cron, namespace=namespace)
    name_of_cron = cron["metadata"]["name"]
    fired = wait_until(
        lambda: _workflows_of_cron(api_client, namespace, name_of_cron, applied) or None,
        what="the CronWorkflow to fire on its new schedule",
        timeout=150,
    )
    audited = workflow_ended(api_client, namespace, fired[0])
    assert not audited.succeeded
    (audit,) = audited.nodes("audit-namespace")  # one attempt: 7 is for a person, never retried
    assert audit["outputs"]["exitCode"] == "7"

    cron_job = _every_minute(documents(JOBS / "audit-cronjob.yaml")[0], control_plane)
    kube.apply(api_client, cron_job, namespace=namespace)
    failure = wait_until(
        lambda: _job_failure(api_client, namespace, cron_job["metadata"]["name"]),
        what="the CronJob's audit Job to fail",
        timeout=180,
    )
    assert failure["reason"] == "PodFailurePolicy", failure
    assert "exit code 7" in failure["message"], failure
    assert failure["failed"] == 1, "FailJob at once: 7 is not rerun"

    released = workflow_ended(
        api_client,
        namespace,
        submit_workflow(api_client, namespace, "dispatch-release", {**image, "trainjob": name}),
    )
    assert not released.succeeded
    (audit,) = released.nodes("audit")
    assert audit["outputs"]["exitCode"] == "7"
    assert not released.nodes("unsuspend"), "nothing is released past a flagged reset"


def _every_minute(cron_job: Manifest, control_plane: Cluster) -> Manifest:
    """The shipped audit CronJob of the namespace, every minute, its pod shaped for the node."""
    cron_job = copy.deepcopy(cron_job)
    cron_job["spec"]["schedule"] = "* * * * *"
    job = cron_job["spec"]["jobTemplate"]["spec"]
    pod = job["template"]["spec"] = on_the_node(
        job["template"]["spec"], api_port(control_plane.kubeconfig)
    )
    (container,) = pod["containers"]
    container["image"] = default_image()
    return cron_job


def _job_failure(api: client.ApiClient, namespace: str, cron_job: str) -> Manifest | None:
    """The Failed condition of the CronJob's first Job, once it has failed."""
    for job in as_dict(client.BatchV1Api(api).list_namespaced_job(namespace))["items"]:
        owners = job["metadata"].get("ownerReferences") or []
        if not any(o["name"] == cron_job for o in owners):
            continue
        for found in job.get("status", {}).get("conditions") or []:
            if found["type"] == "Failed" and found["status"] == "True":
                return {**found, "failed": job["status"].get("failed")}
    return None


def _workflows_of_cron(
    api: client.ApiClient, namespace: str, cron: str, after: datetime
) -> list[str]:
    """The Workflows CronWorkflow `cron` made for a time after `after`: the `argo` fixture
    installs it on its shipped schedule (every 15 minutes), whose run at a quarter hour may
    come before the test's edit and audits a job not yet reset."""
    listed = kube.request(
        api,
        "GET",
        f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows",
        query=[("labelSelector", f"workflows.argoproj.io/cron-workflow={cron}")],
    )
    return [
        w["metadata"]["name"]
        for w in listed["items"]
        if datetime.fromisoformat(w["metadata"]["annotations"][SCHEDULED_TIME]) > after
    ]


@pytest.mark.parametrize(("code", "attempts"), [(3, 4), (75, 4), (6, 1), (7, 1)])
def test_argo_retries_exit_3_and_75_and_never_6_or_7(
    api_client: client.ApiClient, argo: str, exit_code_image: str, code: int, attempts: int
) -> None:
    """The shipped retryStrategy on the real engine: a stand-in step exits with `code`."""
    parameters = {"trainjob": f"exit-{code}", "image": exit_code_image}
    ended = workflow_ended(
        api_client, argo, submit_workflow(api_client, argo, "dispatch-hold", parameters)
    )
    assert not ended.succeeded
    tried = ended.nodes("hold")
    assert tried, (ended.phase, ended.body.get("status", {}).get("message"))
    assert [node["outputs"]["exitCode"] for node in tried] == [str(code)] * attempts


def _after(loop: Gates | None, rounds: int) -> Gates | None:
    return loop if loop is not None and loop.quiet >= rounds else None


def test_argo_ends_a_loop_of_templates_at_its_recursion_limit(
    api_client: client.ApiClient, argo: str
) -> None:
    """Why the Kueue loop is one container: a template that calls itself once per round (as
    the earlier dispatch-kueue did per admission) fails at Argo's nesting limit, with no pod
    run at all here (each round is a `when` and a call)."""
    workflow = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "template-loop-"},
        "spec": {
            "entrypoint": "round",
            "arguments": {"parameters": [{"name": "n", "value": "0"}]},
            "templates": [
                {
                    "name": "round",
                    "inputs": {"parameters": [{"name": "n"}]},
                    "steps": [
                        [
                            {
                                "name": "next",
                                "template": "round",
                                "when": "{{inputs.parameters.n}} < 1000",
                                "arguments": {
                                    "parameters": [
                                        {
                                            "name": "n",
                                            "value": "{{=asInt(inputs.parameters.n) + 1}}",
                                        }
                                    ]
                                },
                            }
                        ]
                    ],
                }
            ],
        },
    }
    name = kube.apply(api_client, workflow, namespace=argo)["metadata"]["name"]
    ended = workflow_ended(api_client, argo, name)
    assert not ended.succeeded
    messages = [str(n.get("message", "")) for n in ended.body["status"]["nodes"].values()]
    assert any("Maximum recursion depth exceeded" in m for m in messages), messages[:3]
    rounds = sum(1 for n in ended.body["status"]["nodes"].values() if n["type"] == "Steps")
    assert rounds < 1000
