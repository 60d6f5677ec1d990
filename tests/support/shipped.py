"""What the project ships under pipelines/ and images/, as the tests read and install it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import wire

# The repository, its version and default image as the release reads them, for the tests too.
from release.project import REPO as REPO
from release.project import Manifest as Manifest
from release.project import default_image as default_image
from release.project import version as version

PIPELINES: Final = REPO / "pipelines"
RUNTIMES: Final = PIPELINES / "runtimes"
TORCH_RUNTIME: Final = RUNTIMES / "torch-distributed.yaml"
MONITORING: Final = PIPELINES / "monitoring"
# In a directory of its own: `kubectl apply -f pipelines/monitoring/` reads every .json file
# there too, and a dashboard is no Kubernetes object.
DASHBOARD: Final = MONITORING / "grafana" / "dashboard.json"


def manifest_files() -> list[Path]:
    """Every YAML file under pipelines/, sorted."""
    return sorted(PIPELINES.rglob("*.yaml"))


def documents(path: Path) -> list[Manifest]:
    """The Kubernetes objects in one YAML file (empty documents dropped)."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def all_documents() -> Iterator[tuple[Path, Manifest]]:
    """Every object shipped under pipelines/, with the file it came from."""
    for path in manifest_files():
        for document in documents(path):
            yield path, document


def monitoring_object(kind: str) -> Manifest:
    """The one object of `kind` in pipelines/monitoring/'s manifests, read afresh."""
    (found,) = [
        d
        for path in sorted(MONITORING.glob("*.yaml"))
        for d in documents(path)
        if d["kind"] == kind
    ]
    return found


def install_runtime(api: client.ApiClient, path: Path = TORCH_RUNTIME) -> str:
    """Create a shipped ClusterTrainingRuntime unless it exists; return its name."""
    runtime = documents(path)[0]
    try:
        client.CustomObjectsApi(api).create_cluster_custom_object(
            wire.TRAINER_GROUP, wire.TRAINER_VERSION, "clustertrainingruntimes", runtime
        )
    except ApiException as e:
        if e.status != 409:  # installed by an earlier test of this run
            raise
    return str(runtime["metadata"]["name"])
