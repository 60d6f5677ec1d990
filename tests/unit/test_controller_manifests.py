"""The shipped controller Deployment (pipelines/controller/): what spreads and protects its two
replicas selects its own pods, so a label renamed in one place cannot silently turn it off."""

from __future__ import annotations

from typing import Any, Final

from tests.support.shipped import PIPELINES, documents

DEPLOYMENT_FILE: Final = PIPELINES / "controller" / "20-deployment.yaml"


def shipped(kind: str) -> dict[str, Any]:
    (found,) = [d for d in documents(DEPLOYMENT_FILE) if d["kind"] == kind]
    return found


def selects_pods(selector: dict[str, Any]) -> bool:
    labels = shipped("Deployment")["spec"]["template"]["metadata"]["labels"]
    wanted = selector["matchLabels"]
    return bool(wanted) and all(labels.get(key) == value for key, value in wanted.items())


def test_the_replicas_prefer_different_nodes() -> None:
    spec = shipped("Deployment")["spec"]
    assert spec["replicas"] == 2
    (term,) = spec["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert selects_pods(term["podAffinityTerm"]["labelSelector"])


def test_a_voluntary_disruption_leaves_one_replica() -> None:
    budget = shipped("PodDisruptionBudget")["spec"]
    assert budget["minAvailable"] == 1
    assert selects_pods(budget["selector"])
