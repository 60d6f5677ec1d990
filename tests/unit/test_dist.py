"""config/'s overlays, rendered by the real kustomize: the checked-in bundles under dist/ are
what config/ renders, each overlay holds what docs/install.md says, and one images: entry
renames the image in every manifest."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import pytest

from release import dist
from tests.support import tools
from tests.support.shipped import default_image

# What each overlay leaves out or adds, by (kind, name), against config/default.
MAP_OBJECTS: Final = {
    ("MutatingAdmissionPolicy", "dispatch-k8s-raise-on-open"),
    ("MutatingAdmissionPolicyBinding", "dispatch-k8s-raise-on-open"),
}
# Plain mode runs no pod of its own: the steps run as the Jobs or pipelines a user submits.
NO_IMAGE: Final = {"plain", "plain-guard-only"}
STEPS_KINDS: Final = {"WorkflowTemplate", "Task", "Pipeline"}  # in the steps' namespace
ARGO_EXECUTOR: Final = {
    ("Role", "dispatch-argo-executor"),
    ("RoleBinding", "dispatch-argo-executor"),
}


def identities(overlay: str) -> set[tuple[str, str]]:
    return {
        (o["kind"], o["metadata"]["name"])
        for o in dist.objects(dist.build(dist.CONFIG / overlay, kustomize=tools.kustomize()))
    }


@pytest.mark.parametrize("name", sorted(dist.BUNDLES))
def test_the_checked_in_bundle_is_what_config_renders(name: str) -> None:
    checked_in = (dist.DIST / name).read_text()
    assert checked_in == dist.bundle(name, kustomize=tools.kustomize()), (
        f"dist/{name} drifted: run scripts/render-dist"
    )


def test_each_overlay_adds_or_leaves_out_only_its_own_choice() -> None:
    default = identities("default")
    kinds = {kind for kind, _ in default}
    assert {"Namespace", "Deployment", "AdmissionCheck", "ClusterTrainingRuntime"} <= kinds
    assert {"ValidatingAdmissionPolicy", "MutatingAdmissionPolicy", "ServiceAccount"} <= kinds
    assert not default & ARGO_EXECUTOR
    assert identities("kueue") == default

    plain = identities("plain")
    left_out = default - plain
    assert {kind for kind, _ in left_out} >= {"AdmissionCheck", "Deployment", "ClusterRole"}
    assert all(name.startswith("dispatch-admission") for _, name in left_out)
    assert plain < default

    assert default - identities("policies-guard-only") == MAP_OBJECTS
    assert plain - identities("plain-guard-only") == MAP_OBJECTS
    monitoring = identities("monitoring") - default
    assert {kind for kind, _ in monitoring} == {
        "Service",
        "ServiceMonitor",
        "PrometheusRule",
        "ClusterRole",  # who may scrape: metrics-reader.yaml
    }
    argo = identities("argo") - default
    assert argo > ARGO_EXECUTOR
    assert {kind for kind, _ in argo - ARGO_EXECUTOR} == {"WorkflowTemplate"}
    assert {kind for kind, _ in identities("tekton") - default} == {"Task", "Pipeline"}


def test_namespaced_objects_go_to_the_controllers_or_the_steps_namespace() -> None:
    for overlay in dist.OVERLAYS:
        for o in dist.objects(dist.build(dist.CONFIG / overlay, kustomize=tools.kustomize())):
            kind, name = o["kind"], o["metadata"]["name"]
            if kind in dist.CLUSTER_SCOPED:
                expected = None
            elif kind in STEPS_KINDS or name.startswith(("dispatch-steps", "dispatch-argo")):
                expected = "default"
            else:
                expected = "dispatch-system"
            assert o["metadata"].get("namespace") == expected, (overlay, kind, name)


@pytest.mark.parametrize("overlay", dist.OVERLAYS)
def test_one_images_entry_renames_the_image_everywhere(overlay: str, tmp_path: Path) -> None:
    renamed = "registry.example/team/dispatch:9.9"
    # kustomize takes a base by a relative path only.
    base = os.path.relpath(dist.CONFIG / overlay, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [{base}]\n"
        "images: [{name: dispatch-k8s, newName: registry.example/team/dispatch, newTag: '9.9'}]\n"
    )
    before = dist.build(dist.CONFIG / overlay, kustomize=tools.kustomize())
    assert (default_image() in before) == (overlay not in NO_IMAGE)
    assert dist.build(tmp_path, kustomize=tools.kustomize()) == before.replace(
        default_image(), renamed
    )
