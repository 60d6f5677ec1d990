"""Plain-dict builders for audit tests: a TrainJob, its JobSet and pods, as read from the API."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from dispatch_k8s.core.rules.audit import UNREAD, Finding, JobAudit, Observed, Unread
from dispatch_k8s.core.rules.snapshot import Snapshot
from dispatch_k8s.core.rules.trainjob import build_runtime_patch
from dispatch_k8s.core.rules.wire import (
    ADMISSION_ANNOTATION,
    ADMISSION_FLOOR_ANNOTATION,
    COMPLETION_INDEX_KEY,
    FOREIGN_ANNOTATION,
    FOREIGN_CAUSE_ANNOTATION,
    HIGHEST_RESTART_ANNOTATION,
    JOB_INDEX_KEY,
    JOBSET_NAME_KEY,
    JOBSET_UID_ANNOTATION,
    JOBSET_UID_KEY,
    LAST_EXECUTION_ANNOTATION,
    OPEN_UNTIL_GENERATION_ANNOTATION,
    REPLICATED_JOB_NAME_KEY,
    RESTART_ATTEMPT_KEY,
)

NAME: Final = "train-1"
UID: Final = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
OTHER_UID: Final = "6fa459ea-ee8a-3ca4-894e-db77e160355e"
TRAINER_JOB: Final = "node"


def trainjob_dict(
    *,
    admission: Any = "1",
    floor: Any = "1",
    jobset_uid: Any = None,
    foreign: str | None = None,
    cause: str | None = None,
    patched: bool = True,
    trainer_job: str = TRAINER_JOB,
    highest_restart: str | None = None,
    last_execution: str | None = None,
    generation: Any = 3,
    open_until: str | None = "3",
) -> dict[str, Any]:
    """A TrainJob as the steps leave it after one raise; None leaves an annotation unset."""
    annotations = {
        ADMISSION_FLOOR_ANNOTATION: floor,
        JOBSET_UID_ANNOTATION: jobset_uid,
        FOREIGN_ANNOTATION: foreign,
        FOREIGN_CAUSE_ANNOTATION: cause,
        HIGHEST_RESTART_ANNOTATION: highest_restart,
        LAST_EXECUTION_ANNOTATION: last_execution,
        OPEN_UNTIL_GENERATION_ANNOTATION: open_until,  # the raise's, which opened it
    }
    # Someone else's patch sits beside ours, as a Kueue or platform patch would.
    patches: list[dict[str, Any]] = [{"manager": "platform.example/limits"}]
    if patched:
        patch = build_runtime_patch(trainer_job, "0")
        pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        pod_metadata = pod["template"]["spec"]["template"]["metadata"]
        pod_metadata["annotations"] = _set({ADMISSION_ANNOTATION: admission})
        patches.append(patch)
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": NAME,
            "namespace": "team-a",
            "resourceVersion": "4711",
            "generation": generation,
            "annotations": _set(annotations),
        },
        "spec": {"suspend": False, "trainer": {"image": "train:1"}, "runtimePatches": patches},
    }


def jobset_dict(*, uid: str = UID, restarts: int = 0) -> dict[str, Any]:
    """The JobSet Trainer keeps for the TrainJob: same name, its own UID."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": NAME, "namespace": "team-a", "uid": uid},
        "status": {"restarts": restarts},
    }


def pod_dict(
    name: str = f"{NAME}-node-0-0-x7k2p",
    *,
    admission: Any = "1",
    jobset_uid: str | None = UID,
    replicated_job: str | None = TRAINER_JOB,
    phase: str = "Running",
    terminating: bool = False,
    restart: str = "0",
    completion_index: str | None = None,
    uid: str = "pod-uid-1",
) -> dict[str, Any]:
    """A pod of the JobSet with the keys JobSet stamps on it; None leaves a key unset."""
    labels = _set(
        {
            JOBSET_NAME_KEY: NAME,
            JOBSET_UID_KEY: jobset_uid,
            REPLICATED_JOB_NAME_KEY: replicated_job,
            RESTART_ATTEMPT_KEY: restart,
            JOB_INDEX_KEY: "0",
            COMPLETION_INDEX_KEY: completion_index,
        }
    )
    metadata: dict[str, Any] = {
        "name": name,
        "uid": uid,
        "namespace": "team-a",
        "labels": labels,
        "annotations": _set({ADMISSION_ANNOTATION: admission}),
    }
    if terminating:
        metadata["deletionTimestamp"] = "2026-08-01T12:00:00Z"
    return {"metadata": metadata, "status": {"phase": phase}}


def _set(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def decide_audit(
    trainjob: Mapping[str, Any],
    jobset: Mapping[str, Any] | None,
    *,
    pods: Iterable[Mapping[str, Any]],
    runtime_now: Mapping[str, Any] | Snapshot | Unread | None = UNREAD,
    jobs: Iterable[Mapping[str, Any]] = (),
    jobset_after: Mapping[str, Any] | None = None,
) -> tuple[tuple[Finding, ...], Observed]:
    """The findings and what was observed, from one pass over `pods`, as core.shell.auditing's
    `audit_of` and `decide` reach them (see core.rules.audit.JobAudit)."""
    job_audit = JobAudit(trainjob, jobset, runtime_now=runtime_now, jobs=jobs)
    for pod in pods:
        job_audit.see(pod)
    return job_audit.result(jobset_after=jobset_after)


def decide_findings(
    trainjob: Mapping[str, Any],
    jobset: Mapping[str, Any] | None,
    *,
    pods: Iterable[Mapping[str, Any]],
) -> tuple[Finding, ...]:
    """Every finding for a TrainJob, its JobSet (None if absent) and its pods."""
    return decide_audit(trainjob, jobset, pods=pods)[0]
