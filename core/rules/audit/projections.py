"""What the admission controller's store keeps of the objects the audit reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from dispatch_k8s.core.rules import ownership, shapes
from dispatch_k8s.core.rules.wire import (
    ADMISSION_ANNOTATION,
    COMPLETION_INDEX_KEY,
    ENV_TOKEN_PREFIX,
    JOB_INDEX_KEY,
    JOBSET_NAME_KEY,
    JOBSET_UID_KEY,
    REPLICATED_JOB_NAME_KEY,
    RESTART_ATTEMPT_KEY,
    RUNTIME_SNAPSHOT_KEY,
)


def job_as_audited(job: Mapping[str, Any]) -> dict[str, Any]:
    """A TrainJob, JobSet, Job or ledger record less its managedFields (unread), to be kept."""
    return shapes.without_managed_fields(job)


def pod_as_audited(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A pod with only what the audit and core.rules.ownership read, for a store of thousands.

    Its names, UID and the labels, annotations and owner references they read; its containers'
    names and token (the one env entry core.rules.ownership reads), its phase, start time and its
    containers' restart counts.
    """
    spec, status = shapes.mapping(pod.get("spec")), shapes.mapping(pod.get("status"))
    containers = [
        {
            "name": container.get("name"),
            "env": [
                e
                for e in shapes.mappings(container.get("env"))
                if e.get("name") == ENV_TOKEN_PREFIX
            ],
        }
        for container in shapes.mappings(spec.get("containers"))
    ]
    statuses = [
        {"name": s.get("name"), "restartCount": s.get("restartCount")}
        for s in shapes.mappings(status.get("containerStatuses"))
    ]
    kept = {key: status[key] for key in ("phase", "startTime") if key in status}
    meta = shapes.mapping(pod.get("metadata"))
    return {
        "metadata": {
            **{key: meta[key] for key in POD_METADATA_READ if key in meta},
            "labels": _only(shapes.labels_of(pod), POD_LABELS_READ),
            "annotations": _only(shapes.annotations_of(pod), POD_ANNOTATIONS_READ),
            "ownerReferences": [
                {key: ref[key] for key in ("uid", "kind", "controller") if key in ref}
                for ref in shapes.mappings(meta.get("ownerReferences"))
            ],
        },
        "spec": {"containers": containers},
        "status": {**kept, "containerStatuses": statuses},
    }


def snapshot_as_audited(config_map: Mapping[str, Any]) -> dict[str, Any]:
    """A runtime snapshot ConfigMap with only what the audit reads (auditing.snapshot_of)."""
    meta = shapes.mapping(config_map.get("metadata"))
    data = shapes.mapping(config_map.get("data"))
    return {
        "metadata": {
            **{key: meta[key] for key in ("name", "namespace", "resourceVersion") if key in meta},
            "ownerReferences": [dict(ref) for ref in shapes.mappings(meta.get("ownerReferences"))],
        },
        "data": {key: data[key] for key in (RUNTIME_SNAPSHOT_KEY,) if key in data},
    }


# What the audit and core.rules.ownership read of a pod. JobSet and the Job controller put some 18
# labels and 14 annotations on each pod: kept whole, they were most of a stored pod's memory.
POD_METADATA_READ: Final = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")
POD_LABELS_READ: Final = frozenset(
    {
        JOBSET_NAME_KEY,
        JOBSET_UID_KEY,
        REPLICATED_JOB_NAME_KEY,
        JOB_INDEX_KEY,
        COMPLETION_INDEX_KEY,
        RESTART_ATTEMPT_KEY,
        ownership.BATCH_CONTROLLER_UID_KEY,
    }
)
POD_ANNOTATIONS_READ: Final = frozenset({ADMISSION_ANNOTATION})


def _only(values: Mapping[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if key in keys}
