"""Building the TrainJob at Start, and reading the identity values back out of one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from core import wire
from core.prologue import wrap_command
from core.request import StartRequest

INITIAL_ADMISSION: Final = "0"  # A before the first admission; R = 1 only once it is raised
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "dispatch-k8s"
IDENTITY_ANNOTATIONS: Final = (
    wire.JOB_ID_ANNOTATION,
    wire.GENERATION_ANNOTATION,
    wire.SUBMISSION_ANNOTATION,
    wire.ATTEMPT_ANNOTATION,
    wire.REQUEST_DIGEST_ANNOTATION,
)


def build_env(request: StartRequest) -> list[dict[str, Any]]:
    """`spec.trainer.env` in DESIGN §2 order: the job's own, then the prologue's inputs."""
    identity = request.identity
    env: list[dict[str, Any]] = [{"name": k, "value": request.env[k]} for k in sorted(request.env)]
    env.append({"name": wire.ENV_EPOCH_PREFIX, "value": str(identity.epoch_prefix)})
    env.append({"name": wire.ENV_TOKEN_PREFIX, "value": identity.token_prefix})
    if request.workdir is not None:
        env.append({"name": wire.ENV_WORKDIR, "value": request.workdir})
    # A and J reach the container through the Downward API: a runtime patch may not set env
    # on the `node` container, and spec.trainer is immutable (reference/trainer.md §2).
    admission_path = f"metadata.annotations['{wire.ADMISSION_ANNOTATION}']"
    env.append(_downward(wire.ENV_ADMISSION, admission_path))
    env.append(_downward(wire.ENV_RESTART, f"metadata.labels['{wire.RESTART_ATTEMPT_KEY}']"))
    return env


def _downward(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": field_path}}}


def build_runtime_patch(trainer_job: str, admission: str) -> dict[str, Any]:
    """This project's runtimePatches entry: A on the trainer job's pod template, nothing else.

    Pod-template metadata only: Job-level metadata is immutable in JobSet, and env may not
    be patched onto the `node` container (reference/trainer.md §2-3).
    """
    pod_metadata = {"annotations": {wire.ADMISSION_ANNOTATION: admission}}
    pod_template = {"metadata": pod_metadata}
    replicated_job = {"name": trainer_job, "template": {"spec": {"template": pod_template}}}
    return {
        "manager": wire.PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated_job]}}},
    }


def build_trainjob(request: StartRequest, *, trainer_job: str) -> dict[str, Any]:
    """The suspended TrainJob `start` creates, with the identity recorded in annotations."""
    identity = request.identity
    trainer: dict[str, Any] = {
        "image": request.image,
        "command": wrap_command(request.command),
        "args": list(request.args),
        "env": build_env(request),
    }
    if request.num_nodes is not None:
        trainer["numNodes"] = request.num_nodes
    if request.resources_per_node is not None:
        trainer["resourcesPerNode"] = request.resources_per_node
    labels = {MANAGED_BY_LABEL: MANAGED_BY}
    if request.queue is not None:
        labels[wire.QUEUE_LABEL] = request.queue
    annotations = {
        wire.JOB_ID_ANNOTATION: identity.job_id,
        wire.GENERATION_ANNOTATION: str(identity.generation),
        wire.SUBMISSION_ANNOTATION: str(identity.submission),
        wire.ATTEMPT_ANNOTATION: str(identity.attempt),
        wire.ADMISSION_FLOOR_ANNOTATION: INITIAL_ADMISSION,
    }
    trainjob: dict[str, Any] = {
        "apiVersion": f"{wire.TRAINER_GROUP}/{wire.TRAINER_VERSION}",
        "kind": "TrainJob",
        "metadata": {
            "name": request.trainjob_name,
            "namespace": request.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "suspend": True,
            "runtimeRef": {
                "apiGroup": wire.TRAINER_GROUP,
                "kind": request.runtime_kind,
                "name": request.runtime_name,
            },
            "trainer": trainer,
            "runtimePatches": [build_runtime_patch(trainer_job, INITIAL_ADMISSION)],
        },
    }
    annotations[wire.REQUEST_DIGEST_ANNOTATION] = request_digest(trainjob)
    return trainjob


def request_digest(trainjob: Mapping[str, Any]) -> str:
    """A digest of what was asked for, so a repeated start can tell 'same' from 'different'."""
    canonical = json.dumps(trainjob, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def recorded_identity(trainjob: Mapping[str, Any]) -> dict[str, str | None]:
    """The identity annotations of a TrainJob, None where one is absent."""
    annotations = trainjob.get("metadata", {}).get("annotations") or {}
    return {key: annotations.get(key) for key in IDENTITY_ANNOTATIONS}
