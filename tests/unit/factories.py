"""Plain-dict builders for unit tests: API objects as read, camelCase keys."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

from dispatch_k8s.core.rules.wire import (
    ALLOW_RANK_RESTART_ANNOTATION,
    ANCESTOR_LABEL,
    ANCESTOR_TRAINER,
)

# The `configuration` of a stand-in for the client's ApiClient: the API server it names.
SERVER = types.SimpleNamespace(host="https://127.0.0.1:6443")


def container_dict(name: str = "node", **fields: Any) -> dict[str, Any]:
    """A container; `fields` are added as given (camelCase)."""
    return {"name": name, "image": "registry.example/train:1", **fields}


def replicated_job_dict(
    name: str = "node",
    *,
    trainer: bool = True,
    restart_policy: str | None = "Never",
    backoff_limit: Any = 0,
    containers: list[dict[str, Any]] | None = None,
    job_fields: Mapping[str, Any] | None = None,
    pod_fields: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A JobSet replicated job, dispatch-ready by default; None leaves a field unset."""
    pod: dict[str, Any] = {"containers": containers or [container_dict()], **(pod_fields or {})}
    if restart_policy is not None:
        pod["restartPolicy"] = restart_policy
    job: dict[str, Any] = {"template": {"spec": pod}, **(job_fields or {})}
    if backoff_limit is not None:
        job["backoffLimit"] = backoff_limit
    template: dict[str, Any] = {"spec": job}
    if trainer:
        template["metadata"] = {"labels": {ANCESTOR_LABEL: ANCESTOR_TRAINER}}
    return {"name": name, "template": template}


def runtime_dict(
    *replicated_jobs: dict[str, Any],
    kind: str = "ClusterTrainingRuntime",
    name: str = "test-runtime",
    namespace: str | None = None,
    allow_rank_restart: Any = None,
    ml_policy: Mapping[str, Any] | None = None,
    failure_policy: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A (Cluster)TrainingRuntime, by default torch with one dispatch-ready trainer job."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if allow_rank_restart is not None:
        metadata["annotations"] = {ALLOW_RANK_RESTART_ANNOTATION: allow_rank_restart}
    jobset: dict[str, Any] = {"replicatedJobs": list(replicated_jobs or [replicated_job_dict()])}
    if failure_policy is not None:
        jobset["failurePolicy"] = dict(failure_policy)
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": kind,
        "metadata": metadata,
        "spec": {
            "mlPolicy": dict(ml_policy or {"numNodes": 1, "torch": {}}),
            "template": {"spec": jobset},
        },
    }


def mpi_runtime_dict(
    *, node: dict[str, Any] | None = None, launcher: dict[str, Any] | None = None, **fields: Any
) -> dict[str, Any]:
    """An MPI runtime: `node` workers first, then the `launcher` trainer job, as upstream."""
    return runtime_dict(
        node or replicated_job_dict("node", trainer=False),
        launcher or replicated_job_dict("launcher"),
        ml_policy={"numNodes": 2, "mpi": {"numProcPerNode": 1, "runLauncherAsNode": True}},
        **fields,
    )


def torch_runtime_with(
    *,
    job_fields: Mapping[str, Any] | None = None,
    pod_fields: Mapping[str, Any] | None = None,
    **container_fields: Any,
) -> dict[str, Any]:
    """A dispatch-ready torch runtime whose trainer Job, pod and `node` container add fields."""
    container = container_dict(**container_fields)
    return runtime_dict(
        replicated_job_dict(job_fields=job_fields, pod_fields=pod_fields, containers=[container])
    )
