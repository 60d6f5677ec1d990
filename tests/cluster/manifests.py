"""CRDs, webhook configurations and RBAC of JobSet, Kueue and Trainer, read from the Go modules.

Nothing is copied into the repository: each project's YAML is read at test time from the module
source `binaries.module_dir` returns, shaped by the same kustomize instructions upstream deploys
with (JSON 6902 and strategic-merge patches, Kueue's `replacements`, `namePrefix`), then pointed at
a controller running on 127.0.0.1: every `clientConfig.service` becomes a loopback `url` plus the
harness CA as `caBundle` (envtest's WebhookInstallOptions; docs/development.md).

Only the kustomize features these three projects use are implemented; anything else raises, so an
upstream change is noticed rather than half-applied.
"""

from __future__ import annotations

import base64
import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from tests.cluster import binaries

Manifest = dict[str, Any]

WEBHOOK_KINDS: Final = frozenset({"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"})
CRD_KIND: Final = "CustomResourceDefinition"


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Where one project keeps its CRD and webhook kustomizations inside its module."""

    component: str  # the name in versions.toml
    crds: str
    webhooks: str
    default: str | None  # the overlay whose namePrefix the webhook configurations get
    rbac: str  # the ServiceAccount, its roles and bindings
    release: str  # the overlay a release is built from: its namespace and namePrefix


LAYOUTS: Final = {
    "jobset": Layout(
        component="jobset",
        crds="config/components/crd",
        webhooks="config/components/webhook",
        default="config/default",
        rbac="config/components/rbac",
        release="config/default",
    ),
    "kueue": Layout(
        component="kueue",
        crds="config/components/crd",
        webhooks="config/components/webhook",
        default="config/default",
        rbac="config/components/rbac",
        release="config/default",
    ),
    "trainer": Layout(
        component="trainer",
        crds="manifests/base/crds",
        webhooks="manifests/base/webhook",
        default=None,  # manifests/overlays/manager keeps the names its patches give
        rbac="manifests/base/rbac",
        # Trainer's standard install, which also includes JobSet's release (LAYOUTS in
        # tests/cluster/identities.py).
        release="manifests/overlays/manager",
    ),
}


def source_dir(component: str) -> Path:
    """The module-cache source of a pinned component."""
    for pinned in binaries.components():
        if pinned.name == component:
            return binaries.module_dir(pinned.module, pinned.version)
    raise KeyError(f"{component} is not pinned in {binaries.VERSIONS_FILE}")


# libyaml parses the ~2 MB of CRD YAML in well under a second; pure Python takes several.
_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=_LOADER)


def _documents(path: Path) -> list[Manifest]:
    return [d for d in yaml.load_all(path.read_text(), Loader=_LOADER) if d]


def _kustomization(directory: Path) -> Manifest:
    loaded = _load(directory / "kustomization.yaml")
    return loaded if isinstance(loaded, dict) else {}


def _resources(directory: Path, kustomization: Manifest) -> list[Manifest]:
    found: list[Manifest] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        if path.is_dir():
            raise NotImplementedError(f"nested kustomization {path}")
        found += _documents(path)
    return found


# --- the kustomize subset -----------------------------------------------------------------


def _pointer(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for raw in path.lstrip("/").split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        parts.append(int(token) if token.isdigit() else token)
    return parts


def _json6902(target: Manifest, operations: list[Manifest]) -> None:
    for op in operations:
        *parents, last = _pointer(op["path"])
        node: Any = target
        for part in parents:
            node = node[part]
        if op["op"] in ("replace", "add"):
            if isinstance(node, list) and op["op"] == "add" and isinstance(last, int):
                node.insert(last, copy.deepcopy(op["value"]))
            else:
                node[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del node[last]
        else:
            raise NotImplementedError(f"JSON 6902 op {op['op']!r}")


def _merge(base: Any, patch: Any) -> Any:
    """Strategic merge as kustomize does it for these manifests: maps merge, `webhooks` by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            if key == "webhooks" and isinstance(value, list):
                merged[key] = _merge_named(base.get(key, []), value)
            elif key in merged:
                merged[key] = _merge(merged[key], value)
            else:
                merged[key] = copy.deepcopy(value)
        return merged
    return copy.deepcopy(patch)


def _merge_named(base: list[Manifest], patch: list[Manifest]) -> list[Manifest]:
    by_name = {item["name"]: item for item in patch}
    merged = [
        _merge(item, by_name.pop(item["name"])) if item["name"] in by_name else item
        for item in base
    ]
    return merged + list(by_name.values())


def _matches(resource: Manifest, selector: Manifest) -> bool:
    name = selector.get("name")
    return resource.get("kind") == selector.get("kind") and (
        name is None or resource["metadata"]["name"] == name
    )


def _apply_patches(resources: list[Manifest], directory: Path, kustomization: Manifest) -> None:
    for entry in kustomization.get("patches", []):
        patch = (
            _load(directory / entry["path"]) if "path" in entry else yaml.safe_load(entry["patch"])
        )
        if isinstance(patch, list):  # JSON 6902: needs a target
            for resource in resources:
                if _matches(resource, entry["target"]):
                    _json6902(resource, patch)
            continue
        for index, resource in enumerate(resources):
            if _matches(resource, {"kind": patch["kind"], "name": patch["metadata"]["name"]}):
                resources[index] = _merge(resource, patch)


_FIELD_PATH: Final = re.compile(r"\[[^\]]*\]|[^.]+")


def _walk(node: Any, field_path: str, *, create: bool) -> tuple[Any, str]:
    """The parent of the last segment of a kustomize field path, and that segment."""
    *parents, last = _FIELD_PATH.findall(field_path)
    for segment in parents:
        if segment.startswith("["):
            key, _, value = segment[1:-1].partition("=")
            node = next(item for item in node if item.get(key) == value)
        else:
            if segment not in node and create:
                node[segment] = {}
            node = node[segment]
    return node, last


def _apply_replacements(resources: list[Manifest], kustomization: Manifest) -> None:
    for replacement in kustomization.get("replacements", []):
        source = replacement["source"]
        origin = next(r for r in resources if _matches(r, source))
        parent, last = _walk(origin, source["fieldPath"], create=False)
        value = parent[last]
        for target in replacement["targets"]:
            create = bool(target.get("options", {}).get("create"))
            for resource in resources:
                if not _matches(resource, target["select"]):
                    continue
                for field_path in target["fieldPaths"]:
                    try:
                        node, key = _walk(resource, field_path, create=create)
                    except StopIteration:
                        continue  # kustomize skips targets whose list item is absent
                    node[key] = copy.deepcopy(value)


def _build(directory: Path) -> list[Manifest]:
    kustomization = _kustomization(directory)
    resources = _resources(directory, kustomization)
    _apply_patches(resources, directory, kustomization)
    _apply_replacements(resources, kustomization)
    return resources


# --- pointing everything at loopback ------------------------------------------------------


def _client_config(port: int, path: str, ca_bundle: bytes) -> Manifest:
    return {
        "url": f"https://127.0.0.1:{port}{path}",
        "caBundle": base64.b64encode(ca_bundle).decode(),
    }


def crds(component: str, *, webhook_port: int, ca_bundle: bytes) -> list[Manifest]:
    """The CRDs of `component`, with conversion webhooks (if upstream enables any) on loopback."""
    layout = LAYOUTS[component]
    directory = source_dir(layout.component) / layout.crds
    kustomization = _kustomization(directory)
    found = [d for d in _resources(directory, kustomization) if d.get("kind") == CRD_KIND]
    # Of the CRD patches only the conversion webhook matters here: cert-manager's CA injection
    # annotations are replaced by the caBundle below.
    conversions = {}
    for entry in kustomization.get("patches", []):
        patch = _load(directory / entry["path"])
        conversion = patch.get("spec", {}).get("conversion")
        if conversion:
            conversions[patch["metadata"]["name"]] = conversion
    for crd in found:
        conversion = copy.deepcopy(conversions.get(crd["metadata"]["name"]))
        if conversion is None:
            continue
        webhook = conversion["webhook"]
        path = webhook["clientConfig"]["service"].get("path", "/convert")
        webhook["clientConfig"] = _client_config(webhook_port, path, ca_bundle)
        crd.setdefault("spec", {})["conversion"] = conversion
    return found


def webhook_configurations(
    component: str, *, webhook_port: int, ca_bundle: bytes
) -> list[Manifest]:
    """The admission webhook configurations of `component`, calling 127.0.0.1:`webhook_port`."""
    layout = LAYOUTS[component]
    root = source_dir(layout.component)
    prefix = ""
    if layout.default:
        prefix = _kustomization(root / layout.default).get("namePrefix", "")
    configurations = [d for d in _build(root / layout.webhooks) if d.get("kind") in WEBHOOK_KINDS]
    for configuration in configurations:
        configuration["metadata"]["name"] = prefix + configuration["metadata"]["name"]
        for webhook in configuration["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = _client_config(webhook_port, path, ca_bundle)
    return configurations


# --- the controllers' identities ----------------------------------------------------------

RBAC_KINDS: Final = frozenset(
    {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
)
NAMESPACED_RBAC: Final = frozenset({"ServiceAccount", "Role", "RoleBinding"})


def release_namespace(component: str) -> str:
    """The namespace `component`'s release overlay installs it in (its `namespace:`)."""
    layout = LAYOUTS[component]
    namespace = _kustomization(source_dir(layout.component) / layout.release).get("namespace")
    if not isinstance(namespace, str):
        raise NotImplementedError(f"{layout.release} of {component} sets no namespace")
    return namespace


def rbac(component: str, *, namespace: str) -> list[Manifest]:
    """`component`'s ServiceAccount, roles and bindings as its release overlay installs them
    (its namePrefix), with the namespace `namespace`, which an overlay over the release may
    change (Trainer's does JobSet's).

    As kustomize does: every name gets the prefix, and so do a binding's roleRef and its
    ServiceAccount subjects, which also move to `namespace` (the build's own ServiceAccount).
    """
    layout = LAYOUTS[component]
    root = source_dir(layout.component)
    prefix = _kustomization(root / layout.release).get("namePrefix", "")
    found = _build(root / layout.rbac)
    unknown = sorted({d["kind"] for d in found} - RBAC_KINDS)
    if unknown:
        raise NotImplementedError(f"{layout.rbac} of {component} also has {unknown}")
    names = {(d["kind"], d["metadata"]["name"]) for d in found}
    for document in found:
        metadata = document["metadata"]
        metadata["name"] = prefix + metadata["name"]
        if document["kind"] in NAMESPACED_RBAC:
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        role = document.get("roleRef", {})
        if (role.get("kind"), role.get("name")) in names:  # a role of the build, renamed
            role["name"] = prefix + role["name"]
        for subject in document.get("subjects", []):
            if (subject["kind"], subject["name"]) in names:
                subject["name"] = prefix + subject["name"]
                subject["namespace"] = namespace
    return found
