"""dist/'s bundles on a cluster of their own, as `kubectl apply --server-side -f` and
`kubectl delete -f` use them: install, apply again (nothing changes), upgrade in place (the
guard-only bundle to the plain one, as a cluster moving to 1.36 would, then to the Kueue one, then
a new image), delete, and nothing left but Events. Then a user's overlay that moves everything
into a namespace of its own, with a name prefix, installs and deletes the same way, and
dispatch-doctor finds it there.

The plane is this module's own: the bundle's objects have the names the session's fixtures give
theirs (the policies, the torch runtime, dispatch-system), and deleting it would remove those.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kubernetes import client

from release import dist
from tests.cluster import kube
from tests.cluster.wait import wait_until
from tests.pipelines.conftest import FreshPlane
from tests.pipelines.installed import CONTROLLER, EVENT_KINDS
from tests.support import tools
from tests.support.diagnosed import finds_the_install
from tests.support.shipped import Manifest, default_image

pytestmark = [pytest.mark.pipelines, pytest.mark.cluster]


def apply_all(api: client.ApiClient, objects: list[Manifest]) -> dict[kube.Key, tuple[str, str]]:
    """Server-side apply each object in the bundle's order: by key, its uid and the revision of
    what was applied (metadata.generation where the kind has one: its controllers' status
    writes, Kueue's on the AdmissionCheck, move the resourceVersion but not that)."""
    applied = {}
    for o in objects:
        metadata = kube.apply(api, o, namespace=None)["metadata"]
        revision = metadata.get("generation", metadata["resourceVersion"])
        applied[kube.key(o)] = (metadata["uid"], str(revision))
    return applied


def users_kueue_bundle(tmp_path: Path, choices: str) -> list[Manifest]:
    """config/kueue under a user's overlay making CHOICES (kustomization.yaml lines)."""
    base = os.path.relpath(dist.CONFIG / "kueue", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(f"resources: [{base}]\n{choices}")
    return dist.objects(dist.build(tmp_path, kustomize=tools.kustomize()))


def renamed_kueue_bundle(tmp_path: Path, image: str) -> list[Manifest]:
    """config/kueue with the image renamed, as a user's overlay would: the next release."""
    name, tag = image.rsplit(":", 1)
    images = f"images: [{{name: dispatch-k8s, newName: {name}, newTag: '{tag}'}}]\n"
    return users_kueue_bundle(tmp_path, images)


def delete_to_nothing_but_events(
    api: client.ApiClient, objects: list[Manifest], before: set[kube.Key]
) -> None:
    """`kubectl delete -f`: each object, in the bundle's order; then nothing is left that was
    not there BEFORE but Events."""
    for o in objects:
        kube.delete(api, o, namespace=o["metadata"].get("namespace"))
    wait_until(
        lambda: all(kube.stored(api, kube.key(o)) is None for o in objects) or None,
        what="every object of the bundle gone (its namespace finishes deleting)",
        timeout=120,
    )
    left = kube.everything(api) - before
    assert {(api_version, kind) for api_version, kind, _, _ in left} <= EVENT_KINDS, sorted(left)


def test_the_bundles_install_upgrade_in_place_and_delete_to_nothing_but_events(
    fresh_plane: FreshPlane, tmp_path: Path
) -> None:
    api = fresh_plane.api
    before = kube.everything(api)
    guard_only = dist.objects((dist.DIST / "install-guard-only.yaml").read_text())
    plain = dist.objects((dist.DIST / "install.yaml").read_text())
    kueue = dist.objects((dist.DIST / "install-kueue.yaml").read_text())
    assert {kube.key(o) for o in guard_only} < {kube.key(o) for o in plain}
    assert {kube.key(o) for o in plain} < {kube.key(o) for o in kueue}

    # Kubernetes 1.30 to 1.35's bundle, from nothing.
    first = apply_all(api, guard_only)
    assert set(first) == {kube.key(o) for o in guard_only}
    assert not set(first) & before

    # Applied again, the same bundle changes nothing.
    assert apply_all(api, guard_only) == first

    # The plain bundle over it (the cluster now serves MutatingAdmissionPolicy): the same
    # objects, and the raise on open added.
    installed = apply_all(api, plain)
    assert {k: installed[k][0] for k in first} == {k: uid for k, (uid, _) in first.items()}
    assert {kind for _, kind, _, _ in set(installed) - set(first)} == {
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }

    # The Kueue bundle over the plain one: the objects they share are the same objects.
    upgraded = apply_all(api, kueue)
    assert {k: upgraded[k][0] for k in installed} == {k: uid for k, (uid, _) in installed.items()}
    assert CONTROLLER in upgraded

    # The next release's image: the controller's Deployment changes in place, nothing else.
    image = "registry.example/team/dispatch-k8s:9.9"
    released = apply_all(api, renamed_kueue_bundle(tmp_path, image))
    assert {k: uid for k, (uid, _) in released.items()} == {k: u for k, (u, _) in upgraded.items()}
    changed = {k for k in released if released[k][1] != upgraded[k][1]}
    assert changed == {CONTROLLER}
    deployment = kube.stored(api, CONTROLLER)
    assert deployment is not None
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == image != default_image()

    delete_to_nothing_but_events(api, kueue, before)  # kubectl delete -f dist/install-kueue.yaml


def test_a_users_overlay_with_its_own_namespace_and_prefix_installs_and_deletes(
    fresh_plane: FreshPlane, tmp_path: Path
) -> None:
    api = fresh_plane.api
    before = kube.everything(api)
    objects = users_kueue_bundle(tmp_path, "namespace: team-x\nnamePrefix: p-\n")
    # kustomize names team-x on the kinds whose scope it does not know (Trainer's and Kueue's,
    # MutatingAdmissionPolicy's): the API server takes them as the cluster-scoped objects they are.
    for o in objects:
        stored = kube.apply(api, o, namespace=None)
        assert stored["metadata"].get("namespace") == (
            None if o["kind"] in dist.CLUSTER_SCOPED else "team-x"
        ), kube.key(o)
    binding = kube.stored(
        api,
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            "",
            "p-dispatch-admission-controller",
        ),
    )
    assert binding is not None
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "p-dispatch-admission-controller", "namespace": "team-x"}
    ]
    finds_the_install(api, fresh_plane.kubeconfig, "team-x", prefix="p-")
    delete_to_nothing_but_events(api, objects, before)
