"""pipelines/controller/'s RBAC installed for one test's namespace, with a token kubeconfig of
its ServiceAccount: the identity the admission controller runs as."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from kubernetes import client

from tests.cluster import kube
from tests.support.cluster_under_test import Cluster
from tests.support.shipped import PIPELINES, monitoring_object
from tests.support.step_identity import (
    StepIdentity,
    identity_objects,
    service_account_token,
    token_kubeconfig,
)

CONTROLLER: Final = PIPELINES / "controller"
RBAC: Final = CONTROLLER / "10-rbac.yaml"
DEPLOYMENT: Final = CONTROLLER / "20-deployment.yaml"
SERVICE_ACCOUNT: Final = "dispatch-admission-controller"
PROMETHEUS: Final = "prometheus"  # the scraper's ServiceAccount, in the test's namespace


@pytest.fixture
def controller_identity(
    api_client: client.ApiClient, namespace: str, control_plane: Cluster, tmp_path: Path
) -> Iterator[StepIdentity]:
    """pipelines/controller/10-rbac.yaml for the test's namespace, with a token kubeconfig."""
    objects = identity_objects(namespace, rbac=RBAC)
    identity = StepIdentity(
        api=api_client, namespace=namespace, kubeconfig=tmp_path / "none", objects=[]
    )
    try:
        for document in objects:
            kube.apply(api_client, document, namespace=namespace)
            identity.objects.append(document)
        token = service_account_token(api_client, namespace, SERVICE_ACCOUNT)
        identity.kubeconfig = token_kubeconfig(
            control_plane.kubeconfig, token, tmp_path / f"{SERVICE_ACCOUNT}.kubeconfig"
        )
        yield identity
    finally:
        identity.remove()


@contextlib.contextmanager
def metrics_reader(api: client.ApiClient, namespace: str) -> Iterator[str]:
    """A token of ServiceAccount `prometheus` in `namespace`, bound to
    pipelines/monitoring/metrics-reader.yaml's ClusterRole as its comment says to bind it to
    Prometheus' (the ClusterRole renamed for the namespace: tests never share cluster objects)."""
    client.CoreV1Api(api).create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=PROMETHEUS))
    )
    reader = copy.deepcopy(monitoring_object("ClusterRole"))
    reader["metadata"]["name"] += f"-{namespace}"
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": reader["metadata"]["name"]},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": reader["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": PROMETHEUS, "namespace": namespace}],
    }
    kube.apply(api, reader, namespace=None)
    kube.apply(api, binding, namespace=None)
    try:
        yield service_account_token(api, namespace, PROMETHEUS)
    finally:
        kube.delete(api, binding, namespace=None)
        kube.delete(api, reader, namespace=None)
