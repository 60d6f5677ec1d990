"""The docs' shell blocks marked `run: integration`, run in document order against the test
cluster: KUBECONFIG is the cluster's, the pinned kubectl is first on PATH, and `team-a` is the
test's namespace (docs/development.md, "Commands in the docs")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from tests.support import snippets
from tests.support.cluster_under_test import Cluster
from tests.support.kubectl import HOW_TO_BUILD, find_kubectl, run_kubectl

pytestmark = pytest.mark.integration

# The cluster-wide objects the blocks make under their shipped names: install.md's RBAC pair
# (the binding then lists the namespace too) and kueue.md's AdmissionCheck, marked Active.
_CLUSTER_WIDE: Final = (
    "clusterrole/dispatch-steps-runtimes",
    "clusterrolebinding/dispatch-steps-runtimes",
    "admissionchecks.kueue.x-k8s.io/dispatch-admission",
)


@pytest.fixture
def kubectl(control_plane: Cluster) -> Iterator[Path]:
    """The pinned kubectl, with none of the blocks' cluster-wide objects before the test nor
    after it: their names are the shipped ones, so the blocks may neither replace a cluster's
    own nor leave theirs behind for the next test."""
    found = find_kubectl()
    assert found is not None, f"scripts/setup builds kubectl: {HOW_TO_BUILD}"
    config = control_plane.kubeconfig
    held = run_kubectl(
        "get", *_CLUSTER_WIDE, "--ignore-not-found", "-o", "name", kubeconfig=config, timeout=60
    ).strip()
    if held:
        pytest.skip(f"the cluster has its own {held.split()}: the blocks would replace them")
    try:
        yield found
    finally:
        run_kubectl("delete", *_CLUSTER_WIDE, "--ignore-not-found", kubeconfig=config, timeout=60)


def test_the_blocks_run_in_order_and_do_what_the_docs_say(
    namespace: str, control_plane: Cluster, kubectl: Path
) -> None:
    config = control_plane.kubeconfig
    for block in snippets.run_by("integration"):
        done = snippets.execute(
            block,
            replace={"team-a": namespace},
            env={"KUBECONFIG": str(config)},
            first=[kubectl.parent],
        )
        assert done.returncode == 0, f"{block.where}\n{block.body}\n{done.stdout}\n{done.stderr}"
    # install.md: the steps' ServiceAccount of the namespace added to the binding reads
    # ClusterTrainingRuntimes, which the shipped binding alone grants only in `default`.
    can = run_kubectl(
        "auth",
        "can-i",
        "get",
        "clustertrainingruntimes.trainer.kubeflow.org",
        f"--as=system:serviceaccount:{namespace}:dispatch-steps",
        kubeconfig=config,
        timeout=60,
    ).strip()
    assert can == "yes"
    # kueue.md: the AdmissionCheck is Active, so a ClusterQueue listing it admits.
    active = run_kubectl(
        "get",
        "admissioncheck",
        "dispatch-admission",
        "-o",
        "jsonpath={.status.conditions[?(@.type=='Active')].status}",
        kubeconfig=config,
        timeout=60,
    ).strip()
    assert active == "True"
