"""The path guard's default controller identities (pipelines/policies/controllers.yaml) name
every upstream install layout's ServiceAccounts, in the policies, the bundles and the chart."""

from __future__ import annotations

from typing import Final

import pytest
import yaml

from tests.support.shipped import REPO, documents

# JobSet as its own release installs it, and as Trainer's manifests/overlays/manager does
# (JobSet's release with namespace kubeflow-system set over it).
JOBSET_IDENTITIES: Final = frozenset(
    {
        "system:serviceaccount:jobset-system:jobset-controller-manager",
        "system:serviceaccount:kubeflow-system:jobset-controller-manager",
    }
)
CONFIGMAP: Final = "dispatch-k8s-controllers"


def _identities(path_name: str) -> dict[str, set[str]]:
    (configmap,) = [
        doc
        for doc in documents(REPO / path_name)
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == CONFIGMAP
    ]
    return {key: set(users.split()) for key, users in configmap["data"].items()}


@pytest.mark.parametrize(
    "path_name",
    ["pipelines/policies/controllers.yaml", "dist/install.yaml", "dist/install-kueue.yaml"],
)
def test_the_shipped_defaults_name_jobset_in_both_upstream_layouts(path_name: str) -> None:
    assert _identities(path_name)["jobset"] == JOBSET_IDENTITIES


def test_the_charts_defaults_name_jobset_in_both_upstream_layouts() -> None:
    values = yaml.safe_load((REPO / "charts" / "dispatch-k8s" / "values.yaml").read_text())
    assert set(values["controllerIdentities"]["jobset"]) == JOBSET_IDENTITIES
