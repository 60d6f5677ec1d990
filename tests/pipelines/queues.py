"""The shipped Kueue wiring (pipelines/kueue/) installed for one test namespace.

Cluster-scoped names get the namespace appended, and every reference between them follows,
so tests never share a ClusterQueue. The AdmissionCheck is marked Active the way docs/kueue.md
tells users to: with a status patch, as there is no long-running controller.
"""

from __future__ import annotations

import copy
import datetime
import functools
from dataclasses import dataclass
from typing import Any, Final

from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster import kube
from tests.cluster.wait import wait_until
from tests.support.shipped import PIPELINES, Manifest, documents

KUEUE: Final = PIPELINES / "kueue"
FILES: Final = ("admission-check.yaml", "example-queues.yaml", "example-local-queue.yaml")
ACTIVE_TIMEOUT: Final = 120.0


def _renamed(document: Manifest, suffix: str) -> Manifest:
    document = copy.deepcopy(document)
    kind, spec = document["kind"], document.get("spec", {})
    if kind in ("AdmissionCheck", "ResourceFlavor", "ClusterQueue"):
        document["metadata"]["name"] += suffix
    if kind == "ClusterQueue":
        for check in spec["admissionChecksStrategy"]["admissionChecks"]:
            check["name"] += suffix
        for group in spec["resourceGroups"]:
            for flavor in group["flavors"]:
                flavor["name"] += suffix
    if kind == "LocalQueue":
        spec["clusterQueue"] += suffix
    return document


@dataclass(slots=True)
class Queues:
    """The check, queues and flavor made for one namespace."""

    api: client.ApiClient
    namespace: str
    objects: list[Manifest]

    def named(self, kind: str) -> str:
        """The name of the one object of `kind`."""
        return str(next(d for d in self.objects if d["kind"] == kind)["metadata"]["name"])

    def remove(self) -> None:
        """Delete the cluster-scoped objects, newest first."""
        for document in reversed(self.objects):
            if document["kind"] != "LocalQueue":
                kube.delete(self.api, document, namespace=None)


def _mark_active(api: client.ApiClient, check: str) -> None:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "Active",
        "status": "True",
        "reason": "Active",
        "message": "dispatch-k8s admit/approve steps",
        "lastTransitionTime": now,
    }
    client.CustomObjectsApi(api).patch_cluster_custom_object_status(
        wire.KUEUE_GROUP,
        wire.KUEUE_VERSION,
        "admissionchecks",
        check,
        {"status": {"conditions": [condition]}},
    )


def _active(api: client.ApiClient, cluster_queue: str) -> bool | None:
    queue = client.CustomObjectsApi(api).get_cluster_custom_object(
        wire.KUEUE_GROUP, wire.KUEUE_VERSION, "clusterqueues", cluster_queue
    )
    assert isinstance(queue, dict)
    conditions: list[dict[str, Any]] = queue.get("status", {}).get("conditions") or []
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions) or None


def install_queues(api: client.ApiClient, namespace: str) -> Queues:
    """Apply the shipped check and example queues, mark the check Active, wait for the queue."""
    objects = [
        _renamed(document, f"-{namespace}")
        for name in FILES
        for document in documents(KUEUE / name)
    ]
    queues = Queues(api=api, namespace=namespace, objects=objects)
    for document in objects:
        kube.apply(api, document, namespace=namespace)
    _mark_active(api, queues.named("AdmissionCheck"))
    cluster_queue = queues.named("ClusterQueue")
    wait_until(
        functools.partial(_active, api, cluster_queue),
        what=f"ClusterQueue {cluster_queue} to be Active",
        timeout=ACTIVE_TIMEOUT,
    )
    return queues
