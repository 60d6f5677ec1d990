"""Argo Workflows', Tekton's and prometheus-operator's CRDs, read from their Go modules in the
module cache.

Pinned in tests/cluster/versions.toml (the entries with `crds`): the engines' with their
controllers, prometheus-operator's alone (nothing of it runs). The API server validates
WorkflowTemplates, CronWorkflows, Tasks and Pipelines against the engines' own structural
schemas, whether or not the engines run (tests/cluster/engines.py), and pipelines/monitoring/'s
ServiceMonitor and PrometheusRule against prometheus-operator's.

`python -m tests.cluster.crds download` fills the module cache (scripts/setup runs it).
"""

from __future__ import annotations

import copy
import functools
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes import client

from tests.cluster import binaries, kube
from tests.cluster.wait import wait_until

VERSIONS_FILE: Final = binaries.VERSIONS_FILE
CRD_API: Final = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
ESTABLISHED_TIMEOUT: Final = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CrdModule:
    """One pinned module and the CRD files in it to install."""

    name: str
    module: str
    version: str
    crds: tuple[str, ...]


def pinned() -> list[CrdModule]:
    """The pinned modules with CRDs, as versions.toml lists them."""
    table = tomllib.loads(VERSIONS_FILE.read_text())
    return [
        CrdModule(
            name=name,
            module=entry["module"],
            version=entry["version"],
            crds=tuple(entry["crds"]),
        )
        for name, entry in table.items()
        if "crds" in entry
    ]


def source(engine: CrdModule) -> Path:
    """The module's source in the module cache (downloaded if missing)."""
    return binaries.module_dir(engine.module, engine.version)


def _for_a_server_without_the_engine(crd: dict[str, Any]) -> dict[str, Any]:
    # Tekton converts v1beta1 <-> v1 with its webhook, which is not running here. The shipped
    # Tasks and Pipelines are v1, the storage version, so no conversion is ever needed.
    crd = copy.deepcopy(crd)
    if crd.get("spec", {}).get("conversion", {}).get("strategy") == "Webhook":
        crd["spec"]["conversion"] = {"strategy": "None"}
    return crd


def crds(engine: CrdModule) -> list[dict[str, Any]]:
    """The engine's CRDs, as its module ships them (but for the conversion webhook)."""
    root = source(engine)
    found = []
    for relative in engine.crds:
        for document in yaml.safe_load_all((root / relative).read_text()):
            if document and document.get("kind") == CRD_API[1]:
                found.append(_for_a_server_without_the_engine(document))
    if not found:
        raise LookupError(f"no CRD in {engine.module}@{engine.version}: {engine.crds}")
    return found


def every_crd() -> Iterator[dict[str, Any]]:
    """Every pinned module's CRDs, module by module, read as each is reached."""
    for engine in pinned():
        yield from crds(engine)


def _established(api: client.ApiClient, name: str) -> bool | None:
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    conditions = kube.request(api, "GET", path).get("status", {}).get("conditions") or []
    ok = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
    return ok or None


def install(api: client.ApiClient) -> list[str]:
    """Apply every pinned module's CRDs and wait until the server serves them."""
    names = []
    for crd in every_crd():
        # Server-side apply: Argo's full CRDs are too large for client-side apply's
        # last-applied annotation (its manifests/base/crds/full/README.md).
        kube.apply(api, crd, namespace=None)
        names.append(crd["metadata"]["name"])
    for name in names:
        wait_until(
            functools.partial(_established, api, name),
            what=f"CRD {name} to be Established",
            timeout=ESTABLISHED_TIMEOUT,
        )
    return names


def main(argv: list[str]) -> int:
    """`download`: put every pinned module with CRDs into the module cache."""
    if argv != ["download"]:
        sys.stderr.write("usage: python -m tests.cluster.crds download\n")
        return 2
    for engine in pinned():
        sys.stderr.write(f"{engine.name} {engine.version}: {source(engine)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
