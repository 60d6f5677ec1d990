"""dispatch-doctor on the real API server: what it reads of the local cluster's install, and
each check failing, with a fix that works, on a cluster broken that way."""

from __future__ import annotations

import datetime
import secrets
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import doctor, wire
from dispatch_k8s.steps.doctor import PROBE
from tests.cluster import kube
from tests.cluster.process import free_ports
from tests.cluster.wait import wait_until
from tests.integration.conftest import with_policies
from tests.support.cluster_under_test import Cluster
from tests.support.diagnosed import diagnosed, jobset_deployment
from tests.support.kubectl import run_kubectl
from tests.support.kueue_objects import KUEUE, KueueSetup
from tests.support.lifecycle import as_dict
from tests.support.policies import Policies
from tests.support.replicas import replicas
from tests.support.step_identity import identity_objects

pytestmark = pytest.mark.integration

PROBES = ("probe/guard", "probe/ledger", "probe/path-guard", "probe/pods")


def test_the_installed_policies_act_and_the_apis_are_read(
    control_plane: Cluster, namespace: str
) -> None:
    _, rows = diagnosed(control_plane.kubeconfig, namespace)
    assert rows["admission-apis"]["status"] == "pass"
    assert "MutatingAdmissionPolicy: every file" in rows["admission-apis"]["found"]
    assert rows["policies"]["status"] == "pass", rows["policies"]
    for probe in PROBES:
        assert rows[probe]["status"] == "pass", rows[probe]
    for component in ("trainer", "jobset", "kueue"):
        assert "is not installed" not in rows[component]["found"], rows[component]


@pytest.mark.policies("none")
def test_where_no_policy_is_bound_the_probes_fail(
    control_plane: Cluster, namespace: str, api_client: client.ApiClient
) -> None:
    code, rows = diagnosed(control_plane.kubeconfig, namespace)
    assert code == doctor.CHECK_FAILED
    for probe in PROBES:
        assert rows[probe]["status"] == "fail", rows[probe]
    # Nothing was written by the probes: the dry runs were accepted, not persisted.
    assert client.CoreV1Api(api_client).list_namespaced_pod(namespace).items == []


@pytest.fixture
def jobset_elsewhere(api_client: client.ApiClient) -> Iterator[str]:
    """JobSet's Deployment as an install in another namespace has it (as Trainer's manifests
    put it in kubeflow-system), run as a ServiceAccount the path guard does not trust:
    replicas 0, so nothing runs, what the doctor reads is the install's objects."""
    name = f"doctor-jobset-{secrets.token_hex(3)}"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    kube.apply(api_client, jobset_deployment(name), namespace=name)
    yield name
    core.delete_namespace(name)


def test_a_jobset_identity_the_guard_does_not_trust_fails_and_its_fix_works(
    control_plane: Cluster, namespace: str, jobset_elsewhere: str, api_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(api_client)
    before = core.read_namespaced_config_map(
        doctor.CONTROLLERS_CONFIG_MAP, doctor.CONTROLLERS_NAMESPACE
    ).data
    code, rows = diagnosed(control_plane.kubeconfig, namespace)
    row = rows["identity/jobset"]
    assert (code, row["status"]) == (doctor.CHECK_FAILED, "fail"), row
    assert f"system:serviceaccount:{jobset_elsewhere}:jobset-controller-manager" in row["found"]
    words = shlex.split(row["fix"])
    assert words[0] == "kubectl"
    try:
        run_kubectl(*words[1:], kubeconfig=control_plane.kubeconfig)
        _, fixed = diagnosed(control_plane.kubeconfig, namespace)
        assert fixed["identity/jobset"]["status"] == "pass", fixed["identity/jobset"]
    finally:  # the shared parameters as they were
        restore = {"data": before}
        core.patch_namespaced_config_map(
            doctor.CONTROLLERS_CONFIG_MAP, doctor.CONTROLLERS_NAMESPACE, restore
        )


def test_the_steps_rights_fail_until_the_shipped_rbac_is_applied(
    control_plane: Cluster, namespace: str, api_client: client.ApiClient, tmp_path: Path
) -> None:
    _, rows = diagnosed(control_plane.kubeconfig, namespace)
    assert rows["steps-access"]["status"] == "fail"
    assert "pipelines/rbac/steps.yaml" in rows["steps-access"]["fix"]
    objects = identity_objects(namespace)
    for document in objects:
        kube.apply(api_client, document, namespace=namespace)
    try:
        _, fixed = diagnosed(control_plane.kubeconfig, namespace)
        assert fixed["steps-access"]["status"] == "pass", fixed["steps-access"]
    finally:
        rbac = client.RbacAuthorizationV1Api(api_client)
        for document in objects:
            if document["kind"] == "ClusterRole":
                rbac.delete_cluster_role(document["metadata"]["name"])
            elif document["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(document["metadata"]["name"])


@pytest.fixture
def webhook_refusing_the_probes(api_client: client.ApiClient, namespace: str) -> Iterator[str]:
    """A validating webhook of the test's own, on the doctor's probes in the test's namespace
    only: failurePolicy Fail and a loopback URL nothing listens on, so the API server refuses
    each probe (its dry runs included: no side effects) once the policies let it through."""
    name = f"{namespace}-refuses-probes"
    (port,) = free_ports(1)
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "refuses-probes.doctor.dispatch-k8s.test",
                "clientConfig": {"url": f"https://127.0.0.1:{port}/refuse"},
                "rules": [
                    {
                        "apiGroups": ["", "batch", wire.TRAINER_GROUP],
                        "apiVersions": ["*"],
                        "operations": ["CREATE"],
                        "resources": ["pods", "configmaps", "jobs", "trainjobs"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "matchConditions": [
                    {"name": "probes", "expression": f"object.metadata.name.endsWith('{PROBE}')"}
                ],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }
        ],
    }
    kube.apply(api_client, body, namespace=None)
    yield name
    kube.delete(api_client, body, namespace=None)


@with_policies("none", "all")
def test_a_probe_refused_by_a_webhook_fails_where_no_policy_acts(
    control_plane: Cluster, namespace: str, webhook_refusing_the_probes: str, installed: Policies
) -> None:
    code, rows = diagnosed(control_plane.kubeconfig, namespace)
    if installed == "all":  # the policies run before any webhook: theirs is the refusal
        for probe in PROBES:
            assert rows[probe]["status"] == "pass", rows[probe]
        return
    assert code == doctor.CHECK_FAILED
    for probe in PROBES:
        row = rows[probe]
        assert row["status"] == "fail", row
        assert "was refused only by another check" in row["found"], row
        # Trainer's own webhook refuses the guard's probe too (its runtime does not exist), and
        # the API server calls validating webhooks in parallel: either refusal may be told.
        if probe != "probe/guard":
            assert "refuses-probes.doctor.dispatch-k8s.test" in row["found"], row
        assert (
            row["fix"] == "kubectl apply -f pipelines/policies/; check the bindings' matchResources"
        )


def controller_deployment(namespace: str) -> dict[str, Any]:
    """The admission controller's Deployment as an install in `namespace` has it (its pods'
    label, its Lease there by --lease-namespace), one replica; no node runs it."""
    labels = {doctor.NAME_LABEL: doctor.CONTROLLER}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": doctor.CONTROLLER, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "controller",
                            "image": "dispatch-k8s:doctor",
                            "args": [doctor.LEASE_NAMESPACE_FLAG, namespace],
                        }
                    ]
                },
            },
        },
    }


def report_ready(api: client.ApiClient, namespace: str) -> None:
    """Plays the kubelet for the Deployment's one pod: Running and Ready, until the
    Deployment's status (the ReplicaSet controller's count) says so."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)

    def pod() -> str | None:
        items = as_dict(core.list_namespaced_pod(namespace))["items"]
        return str(items[0]["metadata"]["name"]) if items else None

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": now}
    status = {"status": {"phase": "Running", "conditions": [ready]}}
    core.patch_namespaced_pod_status(
        wait_until(pod, what="the controller's pod"), namespace, status
    )

    def counted() -> bool | None:
        deployment = as_dict(apps.read_namespaced_deployment_status(doctor.CONTROLLER, namespace))
        return deployment["status"].get("readyReplicas") == 1 or None

    wait_until(counted, what="the controller's Deployment to count its pod ready")


def test_a_controller_ready_whose_lease_is_stale_fails(
    control_plane: Cluster, namespace: str, api_client: client.ApiClient, tmp_path: Path
) -> None:
    kube.apply(api_client, controller_deployment(namespace), namespace=namespace)
    report_ready(api_client, namespace)
    coordination = client.CoordinationV1Api(api_client)
    where = f"{namespace}/{doctor.CONTROLLER}: 1 of 1 replicas ready; Lease "
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "leader") as (leader,):
        wait_until(lambda: leader.leading() or None, what="the replica to take the Lease")
        _, rows = diagnosed(control_plane.kubeconfig, namespace)
        assert rows["controller"]["status"] == "pass", rows["controller"]
        assert rows["controller"]["found"] == where + "held by leader"
        leader.kill()  # no release: the Lease keeps its holder, and its renewTime ages

        def stale() -> bool | None:
            lease = as_dict(coordination.read_namespaced_lease(doctor.CONTROLLER, namespace))
            spec = lease["spec"]
            renewed = datetime.datetime.fromisoformat(spec["renewTime"]).timestamp()
            expired = renewed + spec["leaseDurationSeconds"] < time.time()
            return (spec["holderIdentity"] == "leader" and expired) or None

        wait_until(stale, what="the Lease to expire")
        code, rows = diagnosed(control_plane.kubeconfig, namespace)
    assert code == doctor.CHECK_FAILED
    assert rows["controller"] == {
        "check": "controller",
        "status": "fail",
        "found": where + "not held",
        "fix": f"kubectl -n {namespace} logs deployment/{doctor.CONTROLLER}",
    }


def test_an_active_admission_check_no_cluster_queue_lists_warns(
    control_plane: Cluster,
    namespace: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    kueue.install(cpu="1")
    cluster_queue = f"{namespace}-cq"
    _, rows = diagnosed(control_plane.kubeconfig, namespace, "--check", kueue.check)
    row = rows["admission-check"]
    assert row["status"] == "pass", row
    assert row["found"] == f"AdmissionCheck {kueue.check} is Active; listed by {cluster_queue}"
    unlisted = {"spec": {"admissionChecksStrategy": None}}
    custom.patch_cluster_custom_object(*KUEUE, "clusterqueues", cluster_queue, unlisted)
    _, rows = diagnosed(control_plane.kubeconfig, namespace, "--check", kueue.check)
    assert rows["admission-check"] == {
        "check": "admission-check",
        "status": "warn",
        "found": f"AdmissionCheck {kueue.check} is Active, but no ClusterQueue lists it",
        "fix": "list it in the ClusterQueues' admissionChecksStrategy "
        "(pipelines/kueue/example-queues.yaml)",
    }
