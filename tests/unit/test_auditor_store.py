"""The auditor's store: what an audit pass reads instead of listing the namespace again."""

from __future__ import annotations

from typing import Any

from dispatch_k8s.controller.store import (
    JOBS,
    JOBSETS,
    PODS,
    RECORDS,
    SNAPSHOTS,
    TRAINJOBS,
    Store,
)
from dispatch_k8s.core.rules import audit, ownership, wire
from dispatch_k8s.core.shell import auditing
from tests.unit.audit_factories import NAME, UID, jobset_dict, pod_dict, trainjob_dict

KEY = ("team-a", NAME)
JOB_UID = "job-uid-1"
TOKEN = "train-1-g1-n1"


def job_dict(name: str = f"{NAME}-node-0", *, labelled: bool = True) -> dict[str, Any]:
    labels = {wire.JOBSET_NAME_KEY: NAME} if labelled else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": JOB_UID,
            "labels": labels,
            "ownerReferences": [{"kind": "JobSet", "uid": UID, "name": NAME}],
        },
        "spec": {"template": {"spec": {"containers": [trainer(TOKEN)]}}},
    }


def trainer(token: str) -> dict[str, Any]:
    """The trainer container as start builds it: the token among other variables."""
    env = [
        {"name": "DISPATCH_EPOCH", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": wire.ENV_TOKEN_PREFIX, "value": token},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    return {"name": wire.TRAINER_CONTAINER, "image": "train:1", "env": env}


def owned_pod(name: str, **fields: Any) -> dict[str, Any]:
    """A pod of the Job, its JobSet label removed."""
    pod = pod_dict(name, **fields)
    del pod["metadata"]["labels"][wire.JOBSET_NAME_KEY]
    pod["metadata"]["ownerReferences"] = [{"kind": "Job", "uid": JOB_UID, "name": "x"}]
    return pod


def filled(*pods: dict[str, Any]) -> Store:
    store = Store()
    store.put(TRAINJOBS, trainjob_dict(jobset_uid=UID))
    store.put(JOBSETS, jobset_dict())
    store.put(JOBS, job_dict(labelled=False))
    for pod in pods:
        store.put(PODS, pod)
    return store


def names(objects: list[dict[str, Any]]) -> set[str]:
    return {obj["metadata"]["name"] for obj in objects}


def test_a_trainjob_s_view_holds_what_any_mark_claims_and_nothing_else() -> None:
    by_token = pod_dict("by-token", uid="pod-uid-2")
    del by_token["metadata"]["labels"][wire.JOBSET_NAME_KEY]
    by_token["spec"] = {"containers": [trainer(TOKEN)]}
    other = pod_dict("other", uid="pod-uid-3")
    other["metadata"]["labels"][wire.JOBSET_NAME_KEY] = "train-2"
    store = filled(pod_dict("labelled"), owned_pod("by-owner", uid="pod-uid-4"), other, by_token)
    job = trainjob_dict(jobset_uid=UID)
    job["spec"]["trainer"]["env"] = [{"name": wire.ENV_TOKEN_PREFIX, "value": TOKEN}]
    store.put(TRAINJOBS, job)
    view = store.view(KEY)
    assert names(view.jobs) == {f"{NAME}-node-0"}, "claimed by its JobSet's UID, no label"
    assert names(view.pods) == {"labelled", "by-owner", "by-token"}
    assert names(view.unlabelled(NAME)[1]) == {"by-owner", "by-token"}


def test_a_pod_of_a_copy_is_the_original_s_to_audit_too() -> None:
    """A copy under another name runs the original's token: a change of its pods queues the
    audit of every TrainJob of that token, not only the one its label names (issue 43)."""
    store = Store()
    for name in (NAME, "the-copy"):
        job = trainjob_dict(jobset_uid=UID)
        job["metadata"]["name"] = name
        job["spec"]["trainer"]["env"] = [{"name": wire.ENV_TOKEN_PREFIX, "value": TOKEN}]
        store.put(TRAINJOBS, job)
    copy_pod = pod_dict("copy-pod")
    copy_pod["metadata"]["labels"][wire.JOBSET_NAME_KEY] = "the-copy"
    copy_pod["spec"] = {"containers": [trainer(TOKEN)]}
    assert store.sharing_token(PODS, copy_pod) == {KEY, ("team-a", "the-copy")}
    store.remove(TRAINJOBS, ("team-a", "the-copy"))
    assert store.sharing_token(PODS, copy_pod) == {KEY}
    assert store.sharing_token(PODS, pod_dict("no-token")) == set()


def test_a_pod_relabelled_or_removed_leaves_the_view() -> None:
    store = filled(pod_dict("moved"), pod_dict("gone", uid="pod-uid-2"))
    moved = pod_dict("moved")
    moved["metadata"]["labels"][wire.JOBSET_NAME_KEY] = "train-2"
    store.put(PODS, moved)
    store.remove(PODS, ("team-a", "gone"))
    assert names(store.view(KEY).pods) == set()
    assert names(store.view(("team-a", "train-2")).pods) == set(), "no such TrainJob"


def test_the_store_s_audit_decides_as_the_namespace_audit_does() -> None:
    """Same objects, same findings and records, whether listed or kept trimmed in the store."""
    repeated = pod_dict("again", uid="pod-uid-2", completion_index="0")
    restarted = owned_pod("restarted", uid="pod-uid-3", completion_index="1")
    restarted["status"]["containerStatuses"] = [
        {"name": wire.TRAINER_CONTAINER, "restartCount": 2, "image": "x", "ready": True}
    ]
    restarted["status"]["startTime"] = "2026-08-01T12:00:00Z"
    pods = [pod_dict("first", completion_index="0"), repeated, restarted]
    for pod in pods:
        pod["spec"] = {"containers": [trainer(TOKEN)], "volumes": [{"name": "v"}]}
    recorded = audit.Execution(r=1, pods={"node/0/0": "pod-uid-0"}).text()
    job = trainjob_dict(jobset_uid=UID, last_execution=recorded)
    for pod in pods:
        pod["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    store = filled(*pods)
    store.put(TRAINJOBS, job)
    view = store.view(KEY)
    assert all("managedFields" not in pod["metadata"] for pod in view.pods)
    kept = auditing.audit_of(job, view.jobset, runtime_now=None, jobs=view.jobs, pods=view.pods)
    in_order = sorted(pods, key=lambda pod: str(pod["metadata"]["name"]))  # as the API lists
    listed = auditing.audit_of(
        job, jobset_dict(), runtime_now=None, jobs=[job_dict(labelled=False)], pods=in_order
    )
    from_store = auditing.decide(job, view.jobset, kept, jobset_after=view.jobset, created=None)
    from_lists = auditing.decide(
        job, jobset_dict(), listed, jobset_after=jobset_dict(), created=None
    )
    assert from_store == from_lists
    kinds = {finding.kind for finding in from_store.findings}
    assert {audit.FindingKind.REPEATED_R, audit.FindingKind.RESTARTED_IN_PLACE} <= kinds


def test_a_trimmed_pod_keeps_what_ownership_reads() -> None:
    pod = owned_pod("p")
    pod["spec"] = {"containers": [trainer(TOKEN), {"name": "sidecar", "image": "x"}], "volumes": []}
    trimmed = audit.pod_as_audited(pod)
    assert ownership.pod_token(trimmed["spec"]) == TOKEN
    assert ownership.owner_uids(trimmed) == {JOB_UID}
    assert "volumes" not in trimmed["spec"]
    assert trimmed["spec"]["containers"][0]["env"] == [
        {"name": wire.ENV_TOKEN_PREFIX, "value": TOKEN}
    ]


def config_map_dict(name: str, **data: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "resourceVersion": "7",
            "ownerReferences": [{"kind": "TrainJob", "uid": UID, "controller": True}],
            "managedFields": [{"manager": "trainer"}],
        },
        "data": data,
    }


def test_a_trainjob_s_view_holds_its_runtime_snapshot_as_the_audit_reads_it() -> None:
    store = filled()
    assert store.view(KEY).snapshot is None, "no copy taken yet (or a Trainer that takes none)"
    store.put(SNAPSHOTS, config_map_dict(f"{NAME}-runtime-snapshot-2", runtime="kind: x"))
    assert store.view(KEY).snapshot is None, "another job's name"
    store.put(
        SNAPSHOTS,
        config_map_dict(f"{NAME}-runtime-snapshot", runtime="kind: ClusterTrainingRuntime", x="y"),
    )
    kept = store.view(KEY).snapshot
    assert kept is not None
    assert kept["data"] == {wire.RUNTIME_SNAPSHOT_KEY: "kind: ClusterTrainingRuntime"}
    assert "managedFields" not in kept["metadata"]
    taken = auditing.snapshot_of(kept)
    assert (taken.name, taken.owner_uid) == (f"{NAME}-runtime-snapshot", UID)
    assert taken.runtime == {"kind": "ClusterTrainingRuntime"}
    store.remove(SNAPSHOTS, ("team-a", f"{NAME}-runtime-snapshot"))
    assert store.view(KEY).snapshot is None


def test_a_ledger_record_is_kept_by_its_name_as_the_audit_compares_it() -> None:
    store = filled()
    record = config_map_dict("dispatch-ledger-train-1-created", uid=UID)
    store.put(RECORDS, record)
    kept = store.kept(RECORDS, ("team-a", "dispatch-ledger-train-1-created"))
    assert kept is not None
    assert kept["data"] == {"uid": UID}
    assert "managedFields" not in kept["metadata"]
    assert store.kept(RECORDS, ("team-b", "dispatch-ledger-train-1-created")) is None
    assert store.kept(SNAPSHOTS, ("team-a", "dispatch-ledger-train-1-created")) is None
