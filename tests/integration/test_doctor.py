"""dispatch-doctor on the real API server: what it reads of the local cluster's install, and
each check failing, with a fix that works, on a cluster broken that way."""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import doctor
from tests.cluster import kube
from tests.support.cluster_under_test import Cluster
from tests.support.diagnosed import diagnosed, jobset_deployment
from tests.support.kubectl import run_kubectl
from tests.support.step_identity import identity_objects

pytestmark = pytest.mark.integration


def test_the_installed_policies_act_and_the_apis_are_read(
    control_plane: Cluster, namespace: str
) -> None:
    _, rows = diagnosed(control_plane.kubeconfig, namespace)
    assert rows["admission-apis"]["status"] == "pass"
    assert "MutatingAdmissionPolicy: every file" in rows["admission-apis"]["found"]
    assert rows["policies"]["status"] == "pass", rows["policies"]
    for probe in ("probe/guard", "probe/ledger", "probe/path-guard", "probe/pods"):
        assert rows[probe]["status"] == "pass", rows[probe]
    for component in ("trainer", "jobset", "kueue"):
        assert "is not installed" not in rows[component]["found"], rows[component]


@pytest.mark.policies("none")
def test_where_no_policy_is_bound_the_probes_fail(
    control_plane: Cluster, namespace: str, api_client: client.ApiClient
) -> None:
    code, rows = diagnosed(control_plane.kubeconfig, namespace)
    assert code == doctor.CHECK_FAILED
    for probe in ("probe/guard", "probe/ledger", "probe/path-guard", "probe/pods"):
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
