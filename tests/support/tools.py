"""The release tools, kustomize and helm, as versions.toml pins them (built if not cached yet),
and helm run as the tests run the chart: templated, its release's labels, its hooks.

release/ renders dist/ and the chart with the kustomize given to it; here is where the tests
take theirs.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import yaml

from release.chart import CHART, by_key
from release.dist import Key
from release.project import Manifest
from tests.cluster import binaries


def _built(name: str) -> Path:
    """The binary `name` of the release component of that name, built if it is not cached yet."""
    (component,) = [c for c in binaries.components(release=True) if c.name == name]
    return binaries.build(component, binaries.go_version()) / name


def kustomize() -> Path:
    """The kustomize binary of versions.toml."""
    return _built("kustomize")


def helm() -> Path:
    """The helm binary of versions.toml."""
    return _built("helm")


def run_helm(*args: str, home: Path, kubeconfig: Path | None = None) -> str:
    """Run helm with its cache, config and data under `home` (never the user's); its stdout."""
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    done = subprocess.run([str(helm()), *args], env=env, text=True, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def template(
    values: Sequence[str],
    *,
    home: Path,
    namespace: str = "default",
    args: Sequence[str] = (),
    with_tests: bool = False,
) -> str:
    """`helm template` of the checked-in chart, release dispatch-k8s in `namespace`, with these
    `--set` values and other `args`; the helm test Pod only `with_tests` (helm installs it only
    for `helm test`)."""
    sets = [arg for value in values for arg in ("--set", value)]
    where = ["--namespace", namespace, *([] if with_tests else ["--skip-tests"])]
    return run_helm("template", "dispatch-k8s", str(CHART), *where, *sets, *args, home=home)


def release_labels(release: str) -> dict[str, str]:
    """The standard labels the chart gives every object of release `release`."""
    chart_yaml = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return {
        "helm.sh/chart": f"{chart_yaml['name']}-{chart_yaml['version']}",
        "app.kubernetes.io/name": chart_yaml["name"],
        "app.kubernetes.io/instance": release,
        "app.kubernetes.io/version": chart_yaml["appVersion"],
        "app.kubernetes.io/managed-by": "Helm",
    }


def is_hook(o: Manifest) -> bool:
    """Whether helm runs `o` as a hook (the helm test Pod) rather than installing it."""
    return "helm.sh/hook" in o["metadata"].get("annotations", {})


def as_config(text: str, release: str = "dispatch-k8s") -> dict[Key, Manifest]:
    """The installed objects of a `helm template` render, by key, without the standard labels
    the chart adds (what config/ renders has none): to compare with kustomize's."""
    added = release_labels(release)

    def unlabelled(o: Manifest) -> Manifest:
        labels = {k: v for k, v in o["metadata"]["labels"].items() if added.get(k) != v}
        metadata = (
            {**o["metadata"], "labels": labels}
            if labels
            else {k: v for k, v in o["metadata"].items() if k != "labels"}
        )
        return {**o, "metadata": metadata}

    return {k: unlabelled(o) for k, o in by_key(text).items() if not is_hook(o)}
