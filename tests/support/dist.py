"""The release bundles under dist/, rendered from config/'s overlays by the real kustomize.

`python -m tests.support.dist` (scripts/render-dist) writes them; tests/unit/test_dist.py fails when
the checked-in files differ from what config/ renders. kustomize is built from its Go module like
the control plane's binaries (tests/cluster/versions.toml), and is built here if missing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Final

import yaml

from tests.cluster import binaries
from tests.support.shipped import REPO, Manifest, version

CONFIG: Final = REPO / "config"
DIST: Final = REPO / "dist"
# Bundle file -> the overlay it is rendered from.
BUNDLES: Final = {
    "install.yaml": "plain",
    "install-kueue.yaml": "kueue",
    "install-kueue-policy.yaml": "kueue-policy",
    "install-guard-only.yaml": "plain-guard-only",
}
# The kinds the bundles hold with no namespace.
CLUSTER_SCOPED: Final = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterTrainingRuntime",
        "AdmissionCheck",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
)
OVERLAYS: Final = (
    "default",
    "plain",
    "kueue",
    "kueue-policy",
    "policies-guard-only",
    "plain-guard-only",
    "monitoring",
    "argo",
    "tekton",
)


def kustomize() -> Path:
    """The kustomize binary of versions.toml, built if it is not cached yet."""
    (component,) = [c for c in binaries.components(release=True) if c.name == "kustomize"]
    return binaries.build(component, binaries.go_version()) / "kustomize"


def build(directory: Path) -> str:
    """`kustomize build DIRECTORY`: the rendered YAML stream."""
    done = subprocess.run(
        [str(kustomize()), "build", str(directory)], text=True, capture_output=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"kustomize build {directory}: {done.stderr.strip()}")
    return done.stdout


def bundle(name: str) -> str:
    """The text of dist/NAME as config/ renders it now."""
    overlay = BUNDLES[name]
    header = (
        f"# dispatch-k8s {version()}, config/{overlay} rendered by scripts/render-dist: do not\n"
        "# edit. Install or upgrade: kubectl apply --server-side -f dist/"
        f"{name}\n# (README, Install).\n"
    )
    return header + build(CONFIG / overlay)


def objects(text: str) -> list[Manifest]:
    """The objects of a rendered stream, in its order."""
    return [d for d in yaml.safe_load_all(text) if d]


def main(argv: list[str]) -> int:
    """Write every bundle; with --check, only report (exit 1) which differ."""
    check = argv == ["--check"]
    stale = []
    for name in BUNDLES:
        text, path = bundle(name), DIST / name
        if path.exists() and path.read_text() == text:
            continue
        stale.append(name)
        if not check:
            DIST.mkdir(exist_ok=True)
            path.write_text(text)
    for name in stale:
        sys.stderr.write(f"dist/{name}: {'differs from config/' if check else 'written'}\n")
    return 1 if check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
