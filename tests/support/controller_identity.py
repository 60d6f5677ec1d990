"""pipelines/controller/'s RBAC installed for one test's namespace, with a token kubeconfig of
its ServiceAccount: the identity the admission controller runs as."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from kubernetes import client

from tests.cluster import kube
from tests.support.cluster_under_test import Cluster
from tests.support.shipped import PIPELINES
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
