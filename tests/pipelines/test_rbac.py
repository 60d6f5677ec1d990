"""The shipped RBAC (pipelines/rbac/steps.yaml) is exactly what the steps need.

Each step runs as a console script with a kubeconfig holding a token of the shipped
ServiceAccount (TokenRequest API), as its pod would. Enough: every step does its job, and the
result files are the outputs the Argo templates and Tekton Tasks declare. Nothing more: the
server's own rules review of the account lists only the shipped grants, and anything else
(delete a TrainJob, read a Secret, ...) is 403. Each grant needed: without it, a step fails
with exit 5.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.shell import runner
from tests.cluster.wait import wait_until
from tests.pipelines.queues import Queues
from tests.support import render
from tests.support.cluster_under_test import Cluster
from tests.support.lifecycle import StepRun, run_step
from tests.support.shipped import TORCH_RUNTIME, Manifest, documents
from tests.support.step_identity import (
    Rule,
    StepIdentity,
    granted_by_the_server,
    install_identity,
    shipped_grants,
)

pytestmark = [pytest.mark.pipelines, pytest.mark.cluster]
TRAINER: Final = (wire.TRAINER_GROUP, wire.TRAINER_VERSION)
KUEUE: Final = (wire.KUEUE_GROUP, wire.KUEUE_VERSION)
JOBSET: Final = (wire.JOBSET_GROUP, wire.JOBSET_VERSION)
FORBIDDEN: Final = 5
ADMIT_WAIT: Final = "120"  # seconds; five Go controllers share two cores with the tests


def declared_outputs(script: str, *, namespace_wide: bool = False) -> dict[str, set[str]]:
    """The outputs each engine declares for a step: Argo parameters, Tekton results.

    `namespace_wide` picks the templates that run the step with --all (the audit of a whole
    namespace, whose outputs are its summary), else those that name one object.
    """

    def runs(container: Manifest) -> bool:
        wide = "--all" in (container.get("args") or [])
        return container.get("command") == [script] and wide is namespace_wide

    argo = {
        p["name"]
        for _, _, template in render.argo_templates()
        if runs(template.get("container", {}))
        for p in template["outputs"]["parameters"]
    }
    tekton = {
        r["name"]
        for task in render.tekton_tasks().values()
        if any(runs(step) for step in task["spec"]["steps"])
        for r in task["spec"]["results"]
    }
    return {"argo": argo, "tekton": tekton}


def assert_done(run: StepRun, step: str) -> dict[str, Any]:
    """Exit 0, and the result files are exactly the outputs both engines declare."""
    assert run.code == 0, run.error
    assert run.files == {k: runner.field_text(v) for k, v in run.result.items()}
    for engine, declared in declared_outputs(f"dispatch-{step}").items():
        assert set(run.files) == declared, f"{engine} declares {declared} for {step}"
    return run.result


def start_args(namespace: str, runtime: str, job_id: str, *extra: str) -> list[str]:
    return [
        *("--namespace", namespace, "--runtime-name", runtime, "--job-id", job_id),
        *("--generation", "3", "--submission", "7", "--attempt", "1"),
        *("--image", "registry.example/trainer:1", "--command", "python", "--command", "train.py"),
        *extra,
    ]


def namespaced_runtime(api: client.ApiClient, namespace: str) -> str:
    """The shipped torch runtime as a TrainingRuntime in `namespace`."""
    runtime = copy.deepcopy(documents(TORCH_RUNTIME)[0])
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"]["namespace"] = namespace
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        *TRAINER, namespace, "trainingruntimes", runtime
    )
    return str(runtime["metadata"]["name"])


@dataclass(frozen=True, slots=True, kw_only=True)
class Steps:
    """Run steps as the shipped identity or as the admin, in one namespace."""

    identity: Path
    admin: Path
    namespace: str
    runtime: str
    work: Path

    def as_identity(self, step: str, *args: str) -> StepRun:
        return run_step(step, *args, kubeconfig=self.identity, outputs=self.work / "identity")

    def as_admin(self, step: str, *args: str) -> StepRun:
        return run_step(step, *args, kubeconfig=self.admin, outputs=self.work / "admin")

    def admin_start(self, job_id: str, *extra: str) -> list[str]:
        """Start a TrainJob as the admin; return the flags naming it."""
        started = self.as_admin("start", *start_args(self.namespace, self.runtime, job_id, *extra))
        assert started.code == 0, started.error
        return ["--namespace", self.namespace, "--name", started.result["name"]]


@pytest.fixture
def steps(
    steps_identity: StepIdentity, control_plane: Cluster, torch_runtime: str, tmp_path: Path
) -> Steps:
    return Steps(
        identity=steps_identity.kubeconfig,
        admin=control_plane.kubeconfig,
        namespace=steps_identity.namespace,
        runtime=torch_runtime,
        work=tmp_path,
    )


def test_the_shipped_identity_runs_every_step(
    steps: Steps, queues: Queues, api_client: client.ApiClient
) -> None:
    namespace, run = steps.namespace, steps.as_identity
    started = assert_done(
        run("start", *start_args(namespace, steps.runtime, "rbac-plain")), "start"
    )
    target = ["--namespace", namespace, "--name", started["name"]]
    assert assert_done(run("unsuspend", *target), "unsuspend")["admission"] == 1
    assert assert_done(run("hold", *target), "hold")["changed"] is True
    assert assert_done(run("audit", *target), "audit")["findings"] == 0
    namespace_wide = run("audit", "--namespace", namespace, "--all")  # one TrainJob: one line
    assert namespace_wide.code == 0, namespace_wide.error
    assert (namespace_wide.result["name"], namespace_wide.result["findings"]) == (
        started["name"],
        0,
    )
    declared = declared_outputs("dispatch-audit", namespace_wide=True)["argo"]
    assert set(namespace_wide.files) == declared == {"audited", "flagged"}

    local = namespaced_runtime(api_client, namespace)
    own = run(
        "start", *start_args(namespace, local, "rbac-local", "--runtime-kind", "TrainingRuntime")
    )
    assert assert_done(own, "start")["outcome"] == "created"

    check = queues.named("AdmissionCheck")
    queued = run(
        "start",
        *start_args(namespace, steps.runtime, "rbac-kueue"),
        *(
            "--queue",
            queues.named("LocalQueue"),
            "--resources-per-node",
            '{"requests":{"cpu":"1"}}',
        ),
    )
    name = assert_done(queued, "start")["name"]
    admitted = assert_done(
        run(
            "admit",
            "--namespace",
            namespace,
            "--name",
            name,
            "--check",
            check,
            "--wait",
            "--timeout",
            ADMIT_WAIT,
        ),
        "admit",
    )
    assert admitted["admission"] == 1
    approved = run(
        "approve",
        *("--namespace", namespace, "--check", check, "--workload", admitted["workload"]),
        *("--workload-resource-version", admitted["workloadResourceVersion"]),
        *("--admission", str(admitted["admission"])),
    )
    assert_done(approved, "approve")

    def unsuspended_by_kueue() -> bool | None:
        job = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            *TRAINER, namespace, "trainjobs", name
        )
        assert isinstance(job, dict)
        return job["spec"].get("suspend") is False or None

    wait_until(unsuspended_by_kueue, what=f"Kueue to admit and unsuspend {name}", timeout=120)


def test_the_identity_can_do_nothing_more(
    steps: Steps, steps_identity: StepIdentity, api_client: client.ApiClient
) -> None:
    namespace = steps.namespace
    name = steps.admin_start("rbac-more")[-1]
    with contextlib.closing(steps_identity.api_client()) as api:
        assert granted_by_the_server(api, namespace) == shipped_grants()
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name="p"),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="x")]),
        )
        attempts: dict[str, Callable[[], object]] = {
            "delete the TrainJob": lambda: custom.delete_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", name
            ),
            "patch the TrainJob": lambda: custom.patch_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", name, {"metadata": {"labels": {"x": "y"}}}
            ),
            "watch TrainJobs": lambda: custom.list_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", watch=True, timeout_seconds=1
            ),
            "read a TrainJob in another namespace": lambda: custom.get_namespaced_custom_object(
                *TRAINER, "default", "trainjobs", name
            ),
            "read a Secret": lambda: core.read_namespaced_secret("any", namespace),
            "list Secrets": lambda: core.list_namespaced_secret(namespace),
            "read ConfigMaps": lambda: core.list_namespaced_config_map(namespace),
            "delete a ConfigMap (the ledger)": lambda: core.delete_namespaced_config_map(
                "any", namespace
            ),
            "change a ConfigMap (the ledger)": lambda: core.patch_namespaced_config_map(
                "any", namespace, {"metadata": {"labels": {"x": "y"}}}
            ),
            "create a pod": lambda: core.create_namespaced_pod(namespace, pod),
            "delete the JobSet": lambda: custom.delete_namespaced_custom_object(
                *JOBSET, namespace, "jobsets", name
            ),
            "edit a Workload's spec": lambda: custom.patch_namespaced_custom_object(
                *KUEUE, namespace, "workloads", "any", {"spec": {"active": False}}
            ),
            "edit the runtime": lambda: custom.patch_cluster_custom_object(
                *TRAINER,
                "clustertrainingruntimes",
                steps.runtime,
                {"metadata": {"labels": {"x": "y"}}},
            ),
        }
        for what, attempt in attempts.items():
            with pytest.raises(ApiException) as refused:
                attempt()
            assert refused.value.status == 403, f"{what}: {refused.value.status}"
    job = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", name
    )
    assert isinstance(job, dict)
    assert "x" not in (job["metadata"].get("labels") or {})


# --- each grant is needed -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Without:
    """Steps run by an identity missing one grant."""

    steps: Steps
    request: pytest.FixtureRequest
    api: client.ApiClient

    def start(self, job_id: str, *extra: str) -> StepRun:
        return self.steps.as_identity(
            "start", *start_args(self.steps.namespace, self.steps.runtime, job_id, *extra)
        )

    def opened(self, job_id: str) -> list[str]:
        """An unsuspended TrainJob (so a hold has something to update)."""
        target = self.steps.admin_start(job_id)
        assert self.steps.as_admin("unsuspend", *target).code == 0
        return target

    def approve_a_reservation(self) -> StepRun:
        """admit as the admin, then approve as the identity: the status patch is the step's."""
        queues: Queues = self.request.getfixturevalue("queues")
        check = queues.named("AdmissionCheck")
        target = self.steps.admin_start(
            "patch",
            *(
                "--queue",
                queues.named("LocalQueue"),
                "--resources-per-node",
                '{"requests":{"cpu":"1"}}',
            ),
        )
        admitted = self.steps.as_admin(
            "admit", *target, "--check", check, "--wait", "--timeout", ADMIT_WAIT
        )
        assert admitted.code == 0, admitted.error
        return self.steps.as_identity(
            "approve",
            *("--namespace", self.steps.namespace, "--check", check),
            *("--workload", admitted.result["workload"]),
            *("--workload-resource-version", admitted.result["workloadResourceVersion"]),
            *("--admission", str(admitted.result["admission"])),
        )


T, J, K = wire.TRAINER_GROUP, wire.JOBSET_GROUP, wire.KUEUE_GROUP
# For each grant, a step that needs it: run by an identity without that one grant.
NEEDED_BY: Final[dict[Rule, Callable[[Without], StepRun]]] = {
    (T, "trainjobs", "get"): lambda w: w.steps.as_identity("hold", *w.steps.admin_start("get")),
    (T, "trainjobs", "create"): lambda w: w.start("create"),
    (T, "trainjobs", "update"): lambda w: w.steps.as_identity("hold", *w.opened("update")),
    (T, "trainjobs", "list"): lambda w: w.steps.as_identity(
        "audit", "--namespace", w.steps.namespace, "--all"
    ),
    (T, "trainingruntimes", "get"): lambda w: w.steps.as_identity(
        "start",
        *start_args(w.steps.namespace, namespaced_runtime(w.api, w.steps.namespace), "local"),
        "--runtime-kind",
        "TrainingRuntime",
    ),
    (T, "clustertrainingruntimes", "get"): lambda w: w.start("cluster"),
    (J, "jobsets", "get"): lambda w: w.steps.as_identity("unsuspend", *w.steps.admin_start("js")),
    (J, "jobsets", "list"): lambda w: w.steps.as_identity(
        "audit", "--namespace", w.steps.namespace, "--all"
    ),
    (K, "workloads", "list"): lambda w: w.steps.as_identity("admit", *w.steps.admin_start("list")),
    (K, "workloads", "watch"): lambda w: w.steps.as_identity(
        "admit", *w.steps.admin_start("watch"), "--wait", "--timeout", "5"
    ),
    (K, "workloads", "get"): lambda w: w.steps.as_identity(
        "approve",
        *("--namespace", w.steps.namespace, "--workload", "any"),
        *("--workload-resource-version", "1", "--admission", "1"),
    ),
    (K, "workloads/status", "patch"): Without.approve_a_reservation,
    ("", "pods", "list"): lambda w: w.steps.as_identity("audit", *w.steps.admin_start("pods")),
    ("batch", "jobs", "list"): lambda w: w.steps.as_identity("audit", *w.steps.admin_start("jobs")),
    # start reads the ledger before anything else it writes, then claims the identity in it.
    ("", "configmaps", "get"): lambda w: w.start("ledger-get"),
    ("", "configmaps", "create"): lambda w: w.start("ledger-create"),
}


# Grants a step uses best effort: without one it still does its job, and says what it missed.
BEST_EFFORT: Final[dict[Rule, Callable[[Without], StepRun]]] = {
    ("", "events", "create"): lambda w: w.steps.as_identity(
        "unsuspend", *w.steps.admin_start("ev")
    ),
    # Listed only for a job Trainer could not open (core/rules/carried.py), for Trainer's reason.
    ("", "events", "list"): lambda w: w.steps.as_identity("unsuspend", *w.steps.admin_start("el")),
}
# What a step says it missed without the grant, where it missed anything on a job that opens.
MISSED: Final[dict[Rule, str]] = {
    ("", "events", "create"): "cannot record Event AdmissionRaised: 403",
}


def test_every_grant_has_a_step_that_needs_it() -> None:
    assert set(NEEDED_BY) | set(BEST_EFFORT) == shipped_grants()


@pytest.fixture
def run_without(
    request: pytest.FixtureRequest,
    api_client: client.ApiClient,
    namespace: str,
    control_plane: Cluster,
    torch_runtime: str,
    tmp_path: Path,
) -> Callable[[Rule, Callable[[Without], StepRun]], StepRun]:
    """Run a step by the shipped identity with one grant taken out."""

    def run(denied: Rule, step: Callable[[Without], StepRun]) -> StepRun:
        identity = install_identity(
            api_client,
            namespace,
            admin_kubeconfig=control_plane.kubeconfig,
            work=tmp_path,
            denied=denied,
        )
        try:
            steps = Steps(
                identity=identity.kubeconfig,
                admin=control_plane.kubeconfig,
                namespace=namespace,
                runtime=torch_runtime,
                work=tmp_path,
            )
            return step(Without(steps=steps, request=request, api=api_client))
        finally:
            identity.remove()

    return run


RunWithout = Callable[[Rule, Callable[[Without], StepRun]], StepRun]


@pytest.mark.parametrize(
    "denied", sorted(NEEDED_BY), ids=["/".join(r).lstrip("/") for r in sorted(NEEDED_BY)]
)
def test_without_the_grant_a_step_is_forbidden(denied: Rule, run_without: RunWithout) -> None:
    run = run_without(denied, NEEDED_BY[denied])
    assert run.code == FORBIDDEN, f"exit {run.code}: {run.error or json.dumps(run.result)}"
    assert "403" in run.error


@pytest.mark.parametrize(
    "denied", sorted(BEST_EFFORT), ids=["/".join(r).lstrip("/") for r in sorted(BEST_EFFORT)]
)
def test_without_a_best_effort_grant_the_step_still_works(
    denied: Rule, run_without: RunWithout
) -> None:
    run = run_without(denied, BEST_EFFORT[denied])
    assert run.code == 0, run.error
    assert MISSED.get(denied, "") in run.stderr
