"""Each of config/'s overlays under a user's own (`namespace: team-x`, `namePrefix: p-`, as
docs/install.md shows), built by the real kustomize: every object moves, and every reference
moves with the object it names (the bindings' subjects and roles, the policy bindings' policies
and parameters, the pods' and workflows' ServiceAccounts, the Argo and Tekton templates and the
AdmissionCheck their parameters name), so none is left naming dispatch-system, default or a name
without the prefix. config/base/references.yaml is what makes kustomize do it."""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import pytest

from release import dist
from tests.support import tools
from tests.support.shipped import Manifest

NAMESPACE: Final = "team-x"
PREFIX: Final = "p-"
# The Argo and Tekton parameter that names the AdmissionCheck.
CHECK_PARAMETER: Final = "check"

Ref = tuple[str, str, str | None]  # kind, name, namespace (None: cluster-scoped)


@functools.cache
def build(overlay: str, *, renamed: bool) -> list[Manifest]:
    """config/OVERLAY as shipped, or under a user's overlay that renames and moves it (built
    once for both tests)."""
    if not renamed:
        return dist.objects(dist.build(dist.CONFIG / overlay, kustomize=tools.kustomize()))
    with tempfile.TemporaryDirectory() as directory:
        base = os.path.relpath(dist.CONFIG / overlay, directory)  # kustomize takes it relative
        (Path(directory) / "kustomization.yaml").write_text(
            f"resources: [{base}]\nnamespace: {NAMESPACE}\nnamePrefix: {PREFIX}\n"
        )
        return dist.objects(dist.build(Path(directory), kustomize=tools.kustomize()))


def ref(kind: str, name: str, namespace: str | None) -> Ref:
    return kind, name, None if kind in dist.CLUSTER_SCOPED else namespace


def identity(o: Manifest) -> Ref:
    return ref(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))


def check_parameters(parameters: list[Mapping[str, Any]], key: str) -> Iterator[Ref]:
    for p in parameters:
        if p["name"] == CHECK_PARAMETER:
            yield ref("AdmissionCheck", p[key], None)


def references(o: Manifest) -> Iterator[Ref]:
    """What O names, each as the object it must find."""
    kind, spec = o["kind"], o.get("spec", {})
    namespace = o["metadata"].get("namespace")
    if kind in {"RoleBinding", "ClusterRoleBinding"}:
        yield ref(o["roleRef"]["kind"], o["roleRef"]["name"], namespace)
        for s in o["subjects"]:
            yield ref(s["kind"], s["name"], s["namespace"])
    elif kind in {"ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicyBinding"}:
        yield ref(kind.removesuffix("Binding"), spec["policyName"], None)
        params = spec.get("paramRef", {})
        if "name" in params:  # the ledger's binding selects its parameters by label
            yield ref("ConfigMap", params["name"], params["namespace"])
    elif kind == "Deployment":
        yield ref("ServiceAccount", spec["template"]["spec"]["serviceAccountName"], namespace)
    elif kind == "WorkflowTemplate":
        yield ref("ServiceAccount", spec["serviceAccountName"], namespace)
        yield from check_parameters(spec.get("arguments", {}).get("parameters", []), "value")
        for template in spec["templates"]:
            inputs = template.get("inputs", {}).get("parameters", [])
            yield from check_parameters(inputs, "default")
            for parallel in template.get("steps", []):
                for step in parallel:
                    yield ref("WorkflowTemplate", step["templateRef"]["name"], namespace)
    elif kind in {"Task", "Pipeline"}:
        yield from check_parameters(spec.get("params", []), "default")
        for task in spec.get("tasks", []):
            yield ref("Task", task["taskRef"]["name"], namespace)


def namespaces(value: object) -> Iterator[object]:
    """Every value of a field named namespace, anywhere in VALUE."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            if key == "namespace":
                yield inner
            yield from namespaces(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from namespaces(inner)


@pytest.mark.parametrize("renamed", [False, True], ids=["as-shipped", "namespace-and-prefix"])
@pytest.mark.parametrize("overlay", dist.OVERLAYS)
def test_every_reference_finds_its_object(overlay: str, renamed: bool) -> None:
    objects = build(overlay, renamed=renamed)
    built = {identity(o) for o in objects}
    named = {(o["kind"], r) for o in objects for r in references(o)}
    assert {referrer for referrer, _ in named} >= {"RoleBinding", "ClusterRoleBinding"}
    missing = sorted((referrer, r) for referrer, r in named if r not in built)
    assert not missing, f"references to no object of the build: {missing}"


@pytest.mark.parametrize("overlay", dist.OVERLAYS)
def test_a_users_namespace_and_prefix_reach_every_object_and_reference(overlay: str) -> None:
    objects = build(overlay, renamed=True)
    for o in objects:
        kind, name = o["kind"], o["metadata"]["name"]
        assert name == NAMESPACE if kind == "Namespace" else name.startswith(PREFIX), (kind, name)
        # kustomize does not know the scope of the CRDs' kinds (Trainer's, Kueue's) nor of
        # MutatingAdmissionPolicy's: it gives them the overlay's namespace, which the API server
        # drops from a cluster-scoped object (tests/pipelines/test_dist_install.py).
        if kind not in dist.CLUSTER_SCOPED:
            assert o["metadata"]["namespace"] == NAMESPACE, (kind, name)
        # Subjects, paramRefs: every namespace an object names is the overlay's.
        left = {n for n in namespaces(o) if n != NAMESPACE}
        assert not left, (kind, name, left)
    referrers = {o["kind"] for o in objects for _ in references(o)}
    assert "ValidatingAdmissionPolicyBinding" in referrers
