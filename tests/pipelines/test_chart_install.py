"""charts/dispatch-k8s on a cluster of its own, as a cluster admin uses it with helm: install
plain mode, upgrade to Kueue mode with the next image (the objects already installed stay the
same objects), upgrade again with the same values (nothing changes), uninstall, and nothing left
but Events: helm's release records go too.

The plane is this module's own, as for the bundles (tests/pipelines/test_dist_install.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

import pytest
from kubernetes import client

from tests.cluster import kube
from tests.cluster.wait import wait_until
from tests.pipelines.conftest import FreshPlane
from tests.support import chart
from tests.support.installed import CONTROLLER, EVENT_KINDS

pytestmark = [pytest.mark.pipelines, pytest.mark.cluster]

RELEASE: Final = "dispatch-k8s"
RELEASE_NAMESPACE: Final = "default"  # where helm keeps the release's records (Secrets)
NEXT: Final = [
    "image.repository=registry.example/team/dispatch-k8s",
    "image.tag=9.9",
    "controller.replicas=1",
    "policies=guard-only",
]


def sets(values: list[str]) -> list[str]:
    return [arg for value in values for arg in ("--set", value)]


def revisions(api: client.ApiClient, keys: set[kube.Key]) -> dict[kube.Key, tuple[str, str]]:
    """By key, each stored object's uid and revision (metadata.generation where the kind has
    one: controllers' status writes move the resourceVersion but not that)."""
    found = {}
    for k in keys:
        o = kube.stored(api, k)
        assert o is not None, f"{k} not installed"
        metadata = o["metadata"]
        assert metadata["labels"]["app.kubernetes.io/managed-by"] == "Helm", k
        assert metadata["annotations"]["meta.helm.sh/release-name"] == RELEASE, k
        found[k] = (metadata["uid"], str(metadata.get("generation", metadata["resourceVersion"])))
    return found


def test_the_chart_installs_upgrades_in_place_and_uninstalls_to_nothing_but_events(
    fresh_plane: FreshPlane, tmp_path: Path
) -> None:
    api, home = fresh_plane.api, tmp_path / "helm"

    def helm(*args: str) -> str:
        where = ["--namespace", RELEASE_NAMESPACE]
        return chart.run_helm(*args, *where, home=home, kubeconfig=fresh_plane.kubeconfig)

    def releases() -> list[dict[str, str]]:
        listed: list[dict[str, str]] = json.loads(helm("list", "--all-namespaces", "-o", "json"))
        return listed

    before = kube.everything(api)
    plain = set(chart.by_key(chart.template(["kueue.enabled=false"], home=home)))
    helm("install", RELEASE, str(chart.CHART), *sets(["kueue.enabled=false"]))
    installed = revisions(api, plain)
    assert not plain & before  # from nothing
    assert CONTROLLER not in installed

    # Kueue mode with the next image, one replica and the guard-only policies: the objects the
    # two share are the same objects; the MutatingAdmissionPolicy and its binding are removed.
    kueue = set(chart.by_key(chart.template(NEXT, home=home)))
    helm("upgrade", RELEASE, str(chart.CHART), *sets(NEXT))
    upgraded = revisions(api, kueue)
    shared = plain & kueue
    assert {k: upgraded[k][0] for k in shared} == {k: installed[k][0] for k in shared}
    removed = plain - kueue
    assert {kind for _, kind, _, _ in removed} == {
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
    assert all(kube.stored(api, k) is None for k in removed)
    deployment = kube.stored(api, CONTROLLER)
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 1
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/team/dispatch-k8s:9.9"

    # The same values again: a new revision of the release, no object changed.
    helm("upgrade", RELEASE, str(chart.CHART), *sets(NEXT))
    assert revisions(api, kueue) == upgraded
    (release,) = releases()
    assert (release["name"], release["revision"], release["status"]) == (RELEASE, "3", "deployed")

    helm("uninstall", RELEASE)
    wait_until(
        lambda: all(kube.stored(api, k) is None for k in kueue) or None,
        what="every object of the release gone (dispatch-system finishes deleting)",
        timeout=120,
    )
    left = kube.everything(api) - before
    assert {(api_version, kind) for api_version, kind, _, _ in left} <= EVENT_KINDS, sorted(left)
    assert releases() == []
