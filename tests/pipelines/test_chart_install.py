"""charts/dispatch-k8s on a cluster of its own, as a cluster admin uses it with helm, with a
release name and namespace of their own: install plain mode into a namespace helm creates
(everything namespaced lands there; every policy, the API server serving them all), upgrade to
Kueue mode with the next image, one replica (no PodDisruptionBudget) and the guard-only policies
(the objects already installed stay the same objects), upgrade again with the same values
(nothing changes), dispatch-doctor finds it in the release's namespace, uninstall, delete the
namespace, and nothing left but Events: helm's release records go too.

The plane is this module's own, as for the bundles (tests/pipelines/test_dist_install.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client

from release import chart
from tests.cluster import kube
from tests.cluster.wait import wait_until
from tests.pipelines.conftest import FreshPlane
from tests.pipelines.installed import CONTROLLER, EVENT_KINDS, account_kubeconfig
from tests.support import tools
from tests.support.diagnosed import finds_the_install

pytestmark = [pytest.mark.pipelines, pytest.mark.cluster]

RELEASE: Final = "ml-dispatch"
# Where the chart installs and helm keeps the release's records (Secrets); helm creates it.
RELEASE_NAMESPACE: Final = "team-ops"
NEXT: Final = [
    "image.repository=registry.example/team/dispatch-k8s",
    "image.tag=9.9",
    "controller.replicas=1",
    "policies=guard-only",
]


BIN: Final = Path(sys.executable).parent  # the console scripts, as the image has them
# The controller's Deployment, in the release's namespace.
CONTROLLER_HERE: Final = (*CONTROLLER[:2], RELEASE_NAMESPACE, CONTROLLER[3])


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
        assert metadata["labels"]["app.kubernetes.io/instance"] == RELEASE, k
        assert metadata["annotations"]["meta.helm.sh/release-name"] == RELEASE, k
        found[k] = (metadata["uid"], str(metadata.get("generation", metadata["resourceVersion"])))
    return found


def test_the_chart_installs_upgrades_in_place_and_uninstalls_to_nothing_but_events(
    fresh_plane: FreshPlane, tmp_path: Path
) -> None:
    api, home = fresh_plane.api, tmp_path / "helm"

    def helm(*args: str) -> str:
        where = ["--namespace", RELEASE_NAMESPACE]
        return tools.run_helm(*args, *where, home=home, kubeconfig=fresh_plane.kubeconfig)

    def releases() -> list[dict[str, str]]:
        listed: list[dict[str, str]] = json.loads(helm("list", "--all-namespaces", "-o", "json"))
        return listed

    def rendered(values: list[str]) -> set[kube.Key]:
        text = tools.template(values, home=home, namespace=RELEASE_NAMESPACE)
        return {k for k, o in chart.by_key(text).items() if not tools.is_hook(o)}

    def hooks(values: list[str]) -> list[dict[str, Any]]:
        text = tools.template(values, home=home, namespace=RELEASE_NAMESPACE, with_tests=True)
        return [o for o in chart.by_key(text).values() if tools.is_hook(o)]

    before = kube.everything(api)
    plain = rendered(["kueue.enabled=false"])
    assert {ns for _, _, ns, _ in plain} == {"", RELEASE_NAMESPACE}
    helm("install", RELEASE, str(chart.CHART), "--create-namespace", *sets(["kueue.enabled=false"]))
    installed = revisions(api, plain)
    assert not plain & before  # from nothing
    assert CONTROLLER not in installed
    # policies=auto: this API server serves MutatingAdmissionPolicy, so every policy went in.
    assert "MutatingAdmissionPolicy" in {kind for _, kind, _, _ in installed}
    # What the helm test Pod runs, run here as its ServiceAccount (the plane has no node to run
    # the Pod): the installed rights let it read all it needs, and it writes nothing.
    (test_pod,) = [o for o in hooks(["kueue.enabled=false"]) if o["kind"] == "Pod"]
    (container,) = test_pod["spec"]["containers"]
    account = account_kubeconfig(
        api,
        fresh_plane.kubeconfig,
        test_pod["metadata"]["namespace"],
        test_pod["spec"]["serviceAccountName"],
        tmp_path / "steps-kubeconfig",
    )
    everything_then = kube.everything(api)
    command, *args = container["command"]
    done = subprocess.run(
        [str(BIN / command), *args, "--kubeconfig", str(account)], text=True, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    assert kube.everything(api) == everything_then

    # Kueue mode with the next image, one replica and the guard-only policies: the objects the
    # two share are the same objects; the MutatingAdmissionPolicy and its binding are removed.
    kueue = rendered(NEXT)
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
    # At one replica no PodDisruptionBudget, which would block every drain.
    assert "PodDisruptionBudget" not in {kind for _, kind, _, _ in kueue}
    deployment = kube.stored(api, CONTROLLER_HERE)
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 1
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/team/dispatch-k8s:9.9"

    # The same values again: a new revision of the release, no object changed.
    helm("upgrade", RELEASE, str(chart.CHART), *sets(NEXT))
    assert revisions(api, kueue) == upgraded
    (release,) = releases()
    assert (release["name"], release["revision"], release["status"]) == (RELEASE, "3", "deployed")
    finds_the_install(api, fresh_plane.kubeconfig, RELEASE_NAMESPACE)

    helm("uninstall", RELEASE)
    wait_until(
        lambda: all(kube.stored(api, k) is None for k in kueue) or None,
        what="every object of the release gone",
        timeout=120,
    )
    assert releases() == []
    # helm leaves the namespace --create-namespace made; the admin deletes it.
    client.CoreV1Api(api).delete_namespace(RELEASE_NAMESPACE)
    namespace = ("v1", "Namespace", "", RELEASE_NAMESPACE)
    wait_until(
        lambda: kube.stored(api, namespace) is None or None,
        what=f"{RELEASE_NAMESPACE} deleted",
        timeout=120,
    )
    left = kube.everything(api) - before
    assert {(api_version, kind) for api_version, kind, _, _ in left} <= EVENT_KINDS, sorted(left)
