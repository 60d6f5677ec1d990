"""Smoke tests: each real component of the control plane does its part (issue 3).

There is no kubelet and no scheduler: pods stay Pending, and a test plays the kubelet by writing
`pods/status`. Everything else (Trainer building the JobSet, JobSet creating and restarting Jobs,
the Job controller creating pods, the webhooks, Kueue reserving quota and admitting) is the real
upstream controller at the version pinned in tests/cluster/versions.toml.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.harness import ControlPlane
from tests.cluster.wait import wait_until

pytestmark = pytest.mark.cluster

REPO: Final = Path(__file__).resolve().parents[2]
RUNTIME_FILE: Final = REPO / "pipelines" / "runtimes" / "torch-distributed.yaml"
TRAINER: Final = ("trainer.kubeflow.org", "v1alpha1")
JOBSET: Final = ("jobset.x-k8s.io", "v1alpha2")
KUEUE: Final = ("kueue.x-k8s.io", "v1beta2")
JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT: Final = "jobset.sigs.k8s.io/restart-attempt"
QUEUE_NAME: Final = "kueue.x-k8s.io/queue-name"
KUEUE_MANAGER: Final = "kueue.x-k8s.io/manager"
ADAPTER: Final = "dispatch.phpboyscout.uk/adapter"
ADMISSION: Final = "dispatch.phpboyscout.uk/admission"
CHECK_CONTROLLER: Final = "dispatch.phpboyscout.uk/admission"
COMMAND: Final = ["python", "-c", "print('never runs: there is no kubelet')"]
# Generous: a loaded 2-core machine runs five Go controllers next to the tests.
DEADLINE: Final = 120.0


@dataclass(frozen=True, slots=True)
class Kube:
    """The API groups the smoke tests use."""

    custom: client.CustomObjectsApi
    core: client.CoreV1Api
    batch: client.BatchV1Api


@dataclass(slots=True)
class ClusterScoped:
    """Cluster-scoped Kueue objects a test created, deleted when it ends."""

    kube: Kube
    created: list[tuple[str, str]] = field(default_factory=list)  # (plural, name)

    def create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a cluster-scoped Kueue object and remember it for clean-up."""
        made = _as_dict(self.kube.custom.create_cluster_custom_object(*KUEUE, plural, body))
        self.created.append((plural, body["metadata"]["name"]))
        return made


@pytest.fixture
def kube(api_client: client.ApiClient) -> Kube:
    """Typed API groups on the session's client."""
    return Kube(
        custom=client.CustomObjectsApi(api_client),
        core=client.CoreV1Api(api_client),
        batch=client.BatchV1Api(api_client),
    )


@pytest.fixture
def cluster_scoped(kube: Kube) -> Iterator[ClusterScoped]:
    """Create cluster-scoped objects through this; they are deleted after the test."""
    objects = ClusterScoped(kube)
    yield objects
    for plural, name in reversed(objects.created):
        try:
            kube.custom.delete_cluster_custom_object(*KUEUE, plural, name)
        except ApiException as e:
            if e.status != 404:
                raise


@pytest.fixture
def torch_runtime(kube: Kube) -> str:
    """The project's dispatch-ready ClusterTrainingRuntime, installed (or refreshed) as shipped."""
    runtime = yaml.safe_load(RUNTIME_FILE.read_text())
    name: str = runtime["metadata"]["name"]
    try:
        kube.custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
    except ApiException as e:
        if e.status != 409:
            raise
        _refresh_runtime(kube, runtime)
    return name


def _refresh_runtime(kube: Kube, runtime: dict[str, Any]) -> None:
    """Replace the live runtime's spec with the shipped one, keeping what Trainer adds.

    Trainer puts its resource-in-use finalizer on a runtime a TrainJob refers to, so a read
    and a replace can meet its write (409); read again and retry, as any second writer must.
    """
    name = runtime["metadata"]["name"]
    for _ in range(10):
        live = _as_dict(
            kube.custom.get_cluster_custom_object(*TRAINER, "clustertrainingruntimes", name)
        )
        live["spec"] = runtime["spec"]
        try:
            kube.custom.replace_cluster_custom_object(
                *TRAINER, "clustertrainingruntimes", name, live
            )
            return
        except ApiException as e:
            if e.status != 409:
                raise
    raise AssertionError(f"runtime {name} kept changing under ten replaces")


# --- helpers --------------------------------------------------------------------------------


def _as_dict(value: object) -> dict[str, Any]:
    assert isinstance(value, dict), f"expected a JSON object, got {type(value).__name__}"
    return value


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _admission_patch(admission: str) -> dict[str, Any]:
    """This project's runtime patch: A on the trainer pod template (docs/design.md §2)."""
    return {
        "manager": ADAPTER,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {
                                        "metadata": {"annotations": {ADMISSION: admission}}
                                    }
                                }
                            },
                        }
                    ]
                }
            }
        },
    }


def _patch_admission(trainjob: dict[str, Any]) -> str | None:
    for patch in trainjob["spec"].get("runtimePatches", []):
        if patch["manager"] == ADAPTER:
            jobs = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
            value = jobs[0]["template"]["spec"]["template"]["metadata"]["annotations"][ADMISSION]
            return str(value)
    return None


def create_trainjob(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    runtime: str,
    suspend: bool | None = None,
    labels: dict[str, str] | None = None,
    runtime_patches: list[dict[str, Any]] | None = None,
    requests: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Create a TrainJob from a ClusterTrainingRuntime."""
    spec: dict[str, Any] = {
        "runtimeRef": {"name": runtime},
        "trainer": {"command": COMMAND},
    }
    if requests:
        spec["trainer"]["resourcesPerNode"] = {"requests": requests}
    if suspend is not None:
        spec["suspend"] = suspend
    if runtime_patches:
        spec["runtimePatches"] = runtime_patches
    body = {
        "apiVersion": "/".join(TRAINER),
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": spec,
    }
    return _as_dict(
        kube.custom.create_namespaced_custom_object(*TRAINER, namespace, "trainjobs", body)
    )


def read_trainjob(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """The live TrainJob."""
    return _as_dict(
        kube.custom.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
    )


def patch_trainjob(kube: Kube, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch of the TrainJob (lists in it replace the live ones)."""
    return _as_dict(
        kube.custom.patch_namespaced_custom_object(
            *TRAINER,
            namespace,
            "trainjobs",
            name,
            patch,
            _content_type="application/merge-patch+json",
        )
    )


def read_jobset(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The JobSet, or None while it does not exist."""
    try:
        return _as_dict(
            kube.custom.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", name)
        )
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def pods_of(kube: Kube, namespace: str, jobset: str) -> list[client.V1Pod]:
    """Every pod of a JobSet, terminating ones included."""
    pods = kube.core.list_namespaced_pod(namespace, label_selector=f"{JOBSET_NAME}={jobset}")
    return list(pods.items)


def restart_attempts(pods: list[client.V1Pod]) -> set[str]:
    """The distinct `restart-attempt` labels of `pods` ("<none>" where absent)."""
    return {
        (pod.metadata.labels or {}).get(RESTART_ATTEMPT, "<none>") for pod in pods if pod.metadata
    }


def wait_for_pods(
    kube: Kube, namespace: str, jobset: str, *, attempt: str, count: int = 1
) -> list[client.V1Pod]:
    """Wait until the JobSet's pods are exactly `count` pods labelled restart-attempt `attempt`."""

    def settled() -> list[client.V1Pod] | None:
        pods = pods_of(kube, namespace, jobset)
        if len(pods) == count and restart_attempts(pods) == {attempt}:
            return pods
        return None

    return wait_until(
        settled,
        what=f"{count} pod(s) of {jobset} with {RESTART_ATTEMPT}={attempt}",
        timeout=DEADLINE,
    )


def controller_of(meta: client.V1ObjectMeta) -> client.V1OwnerReference | None:
    """The controlling ownerReference of an object, if any."""
    return next((ref for ref in meta.owner_references or [] if ref.controller), None)


def fail_pod(kube: Kube, pod: client.V1Pod) -> None:
    """Play the kubelet: report the pod's container as having failed."""
    assert pod.metadata is not None
    assert pod.metadata.name
    assert pod.metadata.namespace
    now = _now()
    status = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "node",
                    "image": "unused",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": 1,
                            "reason": "Error",
                            "startedAt": now,
                            "finishedAt": now,
                        }
                    },
                }
            ],
        }
    }
    kube.core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, status)


def condition(obj: dict[str, Any], kind: str) -> str | None:
    """The status of condition `kind` ("True"/"False"/…), None if absent."""
    for cond in obj.get("status", {}).get("conditions", []):
        if cond["type"] == kind:
            return str(cond["status"])
    return None


# --- Trainer -> JobSet -> Job -> Pod ----------------------------------------------------------


def test_trainjob_becomes_jobset_jobs_and_pods_at_restart_attempt_0(
    kube: Kube, namespace: str, torch_runtime: str
) -> None:
    trainjob = create_trainjob(kube, namespace, "train", runtime=torch_runtime)

    jobset = wait_until(
        lambda: read_jobset(kube, namespace, "train"),
        what="Trainer to build JobSet train",
        timeout=DEADLINE,
    )
    owners = [ref for ref in jobset["metadata"].get("ownerReferences", []) if ref.get("controller")]
    assert [(ref["kind"], ref["name"], ref["uid"]) for ref in owners] == [
        ("TrainJob", "train", trainjob["metadata"]["uid"])
    ]

    def jobs() -> list[client.V1Job] | None:
        found = kube.batch.list_namespaced_job(namespace, label_selector=f"{JOBSET_NAME}=train")
        return list(found.items) or None

    created = wait_until(jobs, what="JobSet to create its Jobs", timeout=DEADLINE)
    assert [job.metadata.name for job in created if job.metadata] == ["train-node-0"]
    for job in created:
        assert job.metadata is not None
        assert (job.metadata.labels or {})[RESTART_ATTEMPT] == "0"
        job_owner = controller_of(job.metadata)
        assert job_owner is not None
        assert (job_owner.kind, job_owner.uid) == ("JobSet", jobset["metadata"]["uid"])

    pods = wait_for_pods(kube, namespace, "train", attempt="0")
    pod = pods[0]
    assert pod.metadata is not None
    assert pod.spec is not None
    pod_owner = controller_of(pod.metadata)
    assert pod_owner is not None
    assert pod_owner.kind == "Job"
    # spec.trainer travelled TrainJob -> JobSet -> Job -> Pod.
    assert [c.command for c in pod.spec.containers if c.name == "node"] == [COMMAND]


def test_each_controller_writes_as_its_upstream_service_account(
    kube: Kube, namespace: str, torch_runtime: str, control_plane: object
) -> None:
    """Trainer makes the JobSet, JobSet the Job, the Job controller the pod: each as the
    ServiceAccount its upstream install makes, with that install's RBAC, none a cluster admin."""
    plane = getattr(control_plane, "plane", None)  # tests/support's Cluster: not imported here
    if not isinstance(plane, ControlPlane):
        pytest.skip("who wrote what is read in the local control plane's audit log")
    create_trainjob(kube, namespace, "who", runtime=torch_runtime)
    wait_for_pods(kube, namespace, "who", attempt="0")
    users = plane.controller_users
    for key, plural in (("trainer", "jobsets"), ("jobset", "jobs"), ("job-controller", "pods")):
        made = [
            event
            for event in plane.audit_events(users[key])
            # Trainer applies its JobSet (server-side apply: a patch that creates).
            if event["verb"] in ("create", "patch")
            and event["objectRef"].get("namespace") == namespace
            and event["objectRef"]["resource"] == plural
            and event["responseStatus"]["code"] == 201
        ]
        assert made, f"no {plural} created by {users[key]}"
        groups = set(made[0]["user"]["groups"])
        assert "system:masters" not in groups, groups
        assert "system:serviceaccounts" in groups, groups
    assert users["trainer"] == (
        "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"
    )
    assert users["jobset"] == "system:serviceaccount:jobset-system:jobset-controller-manager"
    assert users["job-controller"] == "system:serviceaccount:kube-system:job-controller"
    refused = plane.refusals(namespace)
    assert not refused, [(e["requestURI"], e["responseStatus"]) for e in refused]


def test_failed_trainer_pod_restarts_the_jobset_at_attempt_1(
    kube: Kube, namespace: str, torch_runtime: str
) -> None:
    create_trainjob(kube, namespace, "restart", runtime=torch_runtime)
    (first,) = wait_for_pods(kube, namespace, "restart", attempt="0")
    assert first.metadata is not None

    fail_pod(kube, first)

    def restarted() -> dict[str, Any] | None:
        jobset = read_jobset(kube, namespace, "restart")
        return jobset if jobset and jobset.get("status", {}).get("restarts", 0) >= 1 else None

    wait_until(restarted, what="JobSet status.restarts to reach 1", timeout=DEADLINE)
    (second,) = wait_for_pods(kube, namespace, "restart", attempt="1")
    assert second.metadata is not None
    assert second.metadata.uid != first.metadata.uid
    jobset = read_jobset(kube, namespace, "restart")
    assert jobset is not None
    assert jobset["status"]["restarts"] == 1  # exactly one failure, exactly one restart


# --- Trainer's webhook ------------------------------------------------------------------------


def test_trainer_webhook_freezes_runtime_patches_unless_suspended(
    kube: Kube, namespace: str, torch_runtime: str
) -> None:
    create_trainjob(
        kube, namespace, "guarded", runtime=torch_runtime, runtime_patches=[_admission_patch("0")]
    )
    wait_for_pods(kube, namespace, "guarded", attempt="0")  # running: the JobSet is active

    with pytest.raises(ApiException) as running:
        patch_trainjob(
            kube, namespace, "guarded", {"spec": {"runtimePatches": [_admission_patch("1")]}}
        )
    assert "RuntimePatches can only be modified when the TrainJob is suspended" in str(
        running.value.body
    )
    assert _patch_admission(read_trainjob(kube, namespace, "guarded")) == "0"

    with pytest.raises(ApiException) as trainer:
        patch_trainjob(kube, namespace, "guarded", {"spec": {"trainer": {"command": ["true"]}}})
    assert trainer.value.status == 422
    assert "spec.trainer" in str(trainer.value.body)
    assert "field is immutable" in str(trainer.value.body)

    patch_trainjob(kube, namespace, "guarded", {"spec": {"suspend": True}})

    def inactive() -> dict[str, Any] | None:
        jobset = read_jobset(kube, namespace, "guarded")
        statuses = (jobset or {}).get("status", {}).get("replicatedJobsStatus", [])
        return jobset if statuses and all(s.get("active", 0) == 0 for s in statuses) else None

    wait_until(inactive, what="the suspended JobSet to have no active Jobs", timeout=DEADLINE)

    def accepted() -> dict[str, Any] | None:
        try:
            return patch_trainjob(
                kube, namespace, "guarded", {"spec": {"runtimePatches": [_admission_patch("1")]}}
            )
        except ApiException as e:
            # Trainer reads the JobSet from its informer cache, which may lag what we saw.
            if "is still active" in str(e.body):
                return None
            raise

    written = wait_until(
        accepted, what="the runtimePatches change to be accepted", timeout=DEADLINE
    )
    assert _patch_admission(written) == "1"

    def annotated() -> str | None:
        jobset = read_jobset(kube, namespace, "guarded") or {}
        jobs = jobset.get("spec", {}).get("replicatedJobs", [])
        node: dict[str, Any] = next((job for job in jobs if job["name"] == "node"), {})
        annotations = node.get("template", {}).get("spec", {}).get("template", {})
        value = annotations.get("metadata", {}).get("annotations", {}).get(ADMISSION)
        return value if value == "1" else None

    # While suspended, Trainer re-applies the JobSet: the patch reaches the pod template.
    wait_until(annotated, what="Trainer to carry A=1 into the JobSet", timeout=DEADLINE)


# --- Kueue with an AdmissionCheck ---------------------------------------------------------------


def _workload_of(kube: Kube, namespace: str, uid: str) -> dict[str, Any] | None:
    workloads = _as_dict(kube.custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads"))
    for workload in workloads["items"]:
        owners = workload["metadata"].get("ownerReferences", [])
        if any(ref["uid"] == uid and ref.get("controller") for ref in owners):
            return _as_dict(workload)
    return None


def _check_state(workload: dict[str, Any], check: str) -> str | None:
    for state in workload.get("status", {}).get("admissionChecks", []):
        if state["name"] == check:
            return str(state["state"])
    return None


def test_admission_check_holds_a_reserved_trainjob_until_ready(
    kube: Kube, namespace: str, torch_runtime: str, cluster_scoped: ClusterScoped
) -> None:
    check, flavor, cluster_queue = f"{namespace}-check", f"{namespace}-flavor", f"{namespace}-cq"
    cluster_scoped.create(
        "admissionchecks",
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "AdmissionCheck",
            "metadata": {"name": check},
            "spec": {"controllerName": CHECK_CONTROLLER},
        },
    )
    # As the check's controller would: without Active=True the ClusterQueue stays inactive.
    kube.custom.patch_cluster_custom_object_status(
        *KUEUE,
        "admissionchecks",
        check,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Active",
                        "status": "True",
                        "reason": "Active",
                        "message": "the smoke test plays the check controller",
                        "lastTransitionTime": _now(),
                    }
                ]
            }
        },
    )
    cluster_scoped.create(
        "resourceflavors",
        {"apiVersion": "/".join(KUEUE), "kind": "ResourceFlavor", "metadata": {"name": flavor}},
    )
    cluster_scoped.create(
        "clusterqueues",
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "4"},
                                    {"name": "memory", "nominalQuota": "8Gi"},
                                ],
                            }
                        ],
                    }
                ],
                "admissionChecksStrategy": {"admissionChecks": [{"name": check}]},
            },
        },
    )
    kube.custom.create_namespaced_custom_object(
        *KUEUE,
        namespace,
        "localqueues",
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "LocalQueue",
            "metadata": {"name": "queue", "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        },
    )

    def queue_active() -> bool | None:
        queue = kube.custom.get_cluster_custom_object(*KUEUE, "clusterqueues", cluster_queue)
        return condition(_as_dict(queue), "Active") == "True" or None

    wait_until(queue_active, what=f"ClusterQueue {cluster_queue} Active", timeout=DEADLINE)

    trainjob = create_trainjob(
        kube,
        namespace,
        "queued",
        runtime=torch_runtime,
        labels={QUEUE_NAME: "queue"},
        requests={"cpu": "1", "memory": "1Gi"},
    )
    assert trainjob["spec"]["suspend"] is True  # Kueue's webhook suspends queued jobs on create

    def reserved() -> dict[str, Any] | None:
        workload = _workload_of(kube, namespace, trainjob["metadata"]["uid"])
        if workload and condition(workload, "QuotaReserved") == "True":
            return workload if _check_state(workload, check) == "Pending" else None
        return None

    workload = wait_until(reserved, what="quota reserved with the check Pending", timeout=DEADLINE)
    assert workload["metadata"]["name"].startswith("trainjob-queued-")
    assert condition(workload, "Admitted") != "True"
    assert read_trainjob(kube, namespace, "queued")["spec"]["suspend"] is True

    def approve() -> dict[str, Any] | None:
        live = _workload_of(kube, namespace, trainjob["metadata"]["uid"])
        assert live is not None
        patch = {
            "metadata": {"resourceVersion": live["metadata"]["resourceVersion"]},
            "status": {
                "admissionChecks": [
                    {
                        "name": check,
                        "state": "Ready",
                        "message": "approved by the smoke test",
                        "lastTransitionTime": _now(),
                    }
                ]
            },
        }
        try:
            return _as_dict(
                kube.custom.patch_namespaced_custom_object_status(
                    *KUEUE, namespace, "workloads", live["metadata"]["name"], patch
                )
            )
        except ApiException as e:
            if e.status == 409:  # Kueue wrote the Workload since we read it: read again
                return None
            raise

    wait_until(approve, what="the check to be set Ready", timeout=DEADLINE)

    def admitted() -> dict[str, Any] | None:
        live = _workload_of(kube, namespace, trainjob["metadata"]["uid"])
        return live if live and condition(live, "Admitted") == "True" else None

    wait_until(admitted, what="Kueue to admit the Workload", timeout=DEADLINE)

    def started() -> dict[str, Any] | None:
        live = read_trainjob(kube, namespace, "queued")
        return live if live["spec"].get("suspend") is False else None

    running = wait_until(started, what="Kueue to unsuspend the TrainJob", timeout=DEADLINE)
    managers = [patch["manager"] for patch in running["spec"].get("runtimePatches", [])]
    assert KUEUE_MANAGER in managers  # Kueue's own entry carries the admission to the JobSet
