"""The release bundles under dist/, rendered from config/'s overlays by the real kustomize.

`python -m release.dist --kustomize PATH` (scripts/render-dist) writes them; tests/unit/test_dist.py
fails when the checked-in files differ from what config/ renders. The kustomize run is the one
its caller gives: built from its Go module like the control plane's binaries
(tests/cluster/versions.toml).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import yaml

from release.project import REPO, Manifest, version

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


Key = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" if cluster-scoped), name


def key(o: dict[str, Any]) -> Key:
    """An object's identity on the server."""
    metadata = o["metadata"]
    return (o["apiVersion"], o["kind"], metadata.get("namespace", ""), metadata["name"])


def build(directory: Path, *, kustomize: Path) -> str:
    """`kustomize build DIRECTORY`: the rendered YAML stream."""
    done = subprocess.run([str(kustomize), "build", str(directory)], text=True, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"kustomize build {directory}: {done.stderr.strip()}")
    return done.stdout


def bundle(name: str, *, kustomize: Path) -> str:
    """The text of dist/NAME as config/ renders it now."""
    overlay = BUNDLES[name]
    header = (
        f"# dispatch-k8s {version()}, config/{overlay} rendered by scripts/render-dist: do not\n"
        "# edit. Install or upgrade: kubectl apply --server-side -f dist/"
        f"{name}\n# (README, Install).\n"
    )
    return header + build(CONFIG / overlay, kustomize=kustomize)


def objects(text: str) -> list[Manifest]:
    """The objects of a rendered stream, in its order."""
    return [d for d in yaml.safe_load_all(text) if d]


def arguments(argv: list[str], *, about: str) -> argparse.Namespace:
    """`--kustomize PATH [--check]`: the kustomize to run, and whether only to check."""
    parser = argparse.ArgumentParser(description=about)
    parser.add_argument("--kustomize", type=Path, required=True, help="the kustomize binary")
    parser.add_argument("--check", action="store_true", help="only report (exit 1) a difference")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    """Write every bundle; with --check, only report (exit 1) which differ."""
    given = arguments(argv, about="Render dist/ from config/.")
    check = given.check
    stale = []
    for name in BUNDLES:
        text, path = bundle(name, kustomize=given.kustomize), DIST / name
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
