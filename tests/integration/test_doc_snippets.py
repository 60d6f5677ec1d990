"""The docs' shell blocks marked `run: integration`, run in document order against the test
cluster: KUBECONFIG is the cluster's, the pinned kubectl is first on PATH, and `team-a` is the
test's namespace (docs/development.md, "Commands in the docs")."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Final

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support import snippets
from tests.support.cluster_under_test import Cluster
from tests.support.kubectl import HOW_TO_BUILD, find_kubectl

pytestmark = pytest.mark.integration

# install.md's RBAC blocks apply the shipped cluster-scoped pair under this name and add the
# namespace to the binding's subjects.
_CLUSTER_WIDE: Final = "dispatch-steps-runtimes"


@pytest.fixture
def shipped_cluster_rbac(api_client: client.ApiClient) -> Iterator[None]:
    """No dispatch-steps-runtimes before the test, and none after it: the shipped name is
    cluster-wide, so the blocks may neither replace a cluster's own nor leave theirs behind."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    held = rbac.list_cluster_role_binding(field_selector=f"metadata.name={_CLUSTER_WIDE}")
    if held.items:
        pytest.skip(f"the cluster has its own {_CLUSTER_WIDE}: the blocks would replace it")
    try:
        yield
    finally:
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                delete(_CLUSTER_WIDE)
            except ApiException as e:
                if e.status != 404:
                    raise


def test_the_blocks_run_in_order(
    namespace: str, control_plane: Cluster, shipped_cluster_rbac: None
) -> None:
    kubectl = find_kubectl()
    assert kubectl is not None, f"scripts/setup builds kubectl: {HOW_TO_BUILD}"
    blocks = snippets.run_by("integration")
    env = {"KUBECONFIG": str(control_plane.kubeconfig)}
    for block in blocks:
        done = snippets.execute(
            block, replace={"team-a": namespace}, env=env, first=[kubectl.parent]
        )
        assert done.returncode == 0, f"{block.where}\n{block.body}\n{done.stdout}\n{done.stderr}"
    # What install.md says the RBAC blocks give: the steps' ServiceAccount of this namespace
    # reads ClusterTrainingRuntimes, which the shipped binding alone grants only in `default`.
    can = subprocess.run(
        [
            str(kubectl),
            "auth",
            "can-i",
            "get",
            "clustertrainingruntimes.trainer.kubeflow.org",
            f"--as=system:serviceaccount:{namespace}:dispatch-steps",
        ],
        env={"KUBECONFIG": env["KUBECONFIG"]},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert can.stdout.strip() == "yes", can.stdout + can.stderr
