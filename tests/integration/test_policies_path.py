"""The path guard (pipelines/policies/guard-path.yaml, and guard.yaml's rules on what reaches
the pods through the TrainJob) on the real API server, with the real Trainer, JobSet and
kube-controller-manager.

Every edit is tried as the team member with ordinary edit rights (tests/support/team.py),
as the steps' ServiceAccount where it is the one with the rights, or as the admin
(system:masters, whom the path guard does not trust either): each is refused with its rule and
leaves the object as it was. The controllers' own writes on the same objects go through: the
probe TrainJob's JobSet and Jobs here are built while the rules are in force, and
test_plain_mode.py, test_policies.py and test_kueue_mode.py run whole lifecycles (open, JobSet
restart, hold, release, garbage collection) under them, as the local control plane's
controller identities (tests/support/policies.py), not the shipped defaults.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.rules.audit import Execution
from tests.cluster import kube
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.lifecycle import (
    DEADLINE,
    JOBSET,
    TRAINER,
    Kubelet,
    Step,
    as_dict,
    content,
    read_jobset,
    read_trainjob,
    run_stage,
    start_args,
)
from tests.support.policies import message, refused_with
from tests.support.step_identity import install_identity

pytestmark = pytest.mark.integration
OTHER_MANAGER: Final = "example.com/other"
MERGE_PATCH: Final = "application/merge-patch+json"
LAST: Final = wire.LAST_EXECUTION_ANNOTATION
# What the audit recorded of an execution before it kept every slot (read, and upgraded).
RECORDED: Final = {"pod": "uid-of-the-first", "r": 3, "slot": "node/0/0"}


def execution(**changes: object) -> str:
    """The last-execution annotation, as the audit writes it, with `changes`."""
    return json.dumps({**RECORDED, **changes}, sort_keys=True, separators=(",", ":"))


def child_job(name: str) -> str:
    """The name of the trainer child Job of TrainJob `name` (torch runtime: job `node`)."""
    return f"{name}-node-0"


def read_job(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The live Job `name`."""
    return as_dict(client.BatchV1Api(api).read_namespaced_job(name, namespace))


@pytest.fixture
def started(step: Step, namespace: str, torch_runtime: str, api_client: client.ApiClient) -> str:
    """A started TrainJob, never opened, once JobSet has made its (suspended) child Job, with
    the audit's records on it (written as the audit writes them: first sight, no one's yet)."""
    run = step("start", *start_args(namespace, torch_runtime, "path"))
    assert run.code == 0, run.error
    name: str = run.result["name"]

    def made() -> bool | None:
        try:
            return read_job(api_client, namespace, child_job(name)) is not None
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    wait_until(made, what=f"JobSet to make Job {child_job(name)}", timeout=DEADLINE)
    custom = client.CustomObjectsApi(api_client)
    uid = read_jobset(custom, namespace, name)["metadata"]["uid"]
    records = {
        wire.LAST_EXECUTION_ANNOTATION: execution(),
        wire.HIGHEST_RESTART_ANNOTATION: "2",
        wire.JOBSET_UID_ANNOTATION: uid,
    }
    custom.patch_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", name, {"metadata": {"annotations": records}}
    )
    return name


# --- the TrainJob: what reaches the pods through it, and the audit's records ------------


def _our_entry(job: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in job["spec"]["runtimePatches"] if p["manager"] == wire.PATCH_MANAGER)


def _pod_metadata(entry: dict[str, Any]) -> dict[str, Any]:
    replicated = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    metadata: dict[str, Any] = replicated["template"]["spec"]["template"]["metadata"]
    return metadata


def _other_entry(pod_template: dict[str, Any]) -> Callable[[dict[str, Any]], Any]:
    """A second runtime-patch entry, for the trainer job `node`, with `pod_template`."""

    def edit(job: dict[str, Any]) -> Any:
        replicated = {"name": "node", "template": {"spec": {"template": pod_template}}}
        entry = {
            "manager": OTHER_MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated]}}},
        }
        return {"spec": {"runtimePatches": [*job["spec"]["runtimePatches"], entry]}}

    return edit


def _our_j(job: dict[str, Any]) -> Any:
    patches = copy.deepcopy(job["spec"]["runtimePatches"])
    _pod_metadata(_our_entry({"spec": {"runtimePatches": patches}})).setdefault("labels", {})[
        wire.RESTART_ATTEMPT_KEY
    ] = "500"
    return {"spec": {"runtimePatches": patches}}


def _records(changes: dict[str, str | None]) -> Callable[[dict[str, Any]], Any]:
    def edit(job: dict[str, Any]) -> Any:
        return {"metadata": {"annotations": changes}}

    return edit


TRAINJOB_EDITS: Final[dict[str, tuple[str, Callable[[dict[str, Any]], Any]]]] = {
    "another-entry-sets-a": (
        "foreign-patch-admission",
        _other_entry({"metadata": {"annotations": {wire.ADMISSION_ANNOTATION: "700"}}}),
    ),
    "another-entry-sets-j": (
        "patch-jobset-keys",
        _other_entry({"metadata": {"labels": {wire.RESTART_ATTEMPT_KEY: "500"}}}),
    ),
    "our-entry-sets-j": ("patch-jobset-keys", _our_j),
    "an-entry-sets-dispatch-env": (
        "patch-dispatch-env",
        _other_entry(
            {
                "spec": {
                    "initContainers": [
                        {"name": "x", "env": [{"name": wire.ENV_ADMISSION, "value": "700"}]}
                    ]
                }
            }
        ),
    ),
    "remove-last-execution": (
        "keep-last-execution",
        _records({wire.LAST_EXECUTION_ANNOTATION: None}),
    ),
    "lower-last-execution": (
        "keep-last-execution",
        _records({wire.LAST_EXECUTION_ANNOTATION: execution(r=2)}),
    ),
    "same-r-another-pod": (
        "keep-last-execution",
        _records({wire.LAST_EXECUTION_ANNOTATION: execution(pod="uid-of-a-rerun")}),
    ),
    "new-jobset-without-its-records": (
        "keep-last-execution",
        _records({wire.JOBSET_UID_ANNOTATION: "another", wire.LAST_EXECUTION_ANNOTATION: None}),
    ),
    "new-jobset-with-a-lower-highest-j": (
        "keep-highest-restart",
        _records({wire.JOBSET_UID_ANNOTATION: "another", wire.HIGHEST_RESTART_ANNOTATION: "0"}),
    ),
    "change-the-start-record": (
        "keep-start-record",
        _records({wire.JOB_ID_ANNOTATION: "another-job"}),
    ),
    "remove-the-runtime-record": (
        "keep-start-record",
        _records({wire.RUNTIME_SEEN_ANNOTATION: None}),
    ),
    "widen-the-runtime-opt-ins": (
        "keep-start-record",
        _records({wire.RUNTIME_ALLOWS_ANNOTATION: "pod-failure-ignore"}),
    ),
}


@pytest.mark.parametrize("edit", sorted(TRAINJOB_EDITS))
def test_each_edit_of_what_reaches_the_pods_through_the_trainjob_is_refused(
    edit: str,
    started: str,
    namespace: str,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    rule, change = TRAINJOB_EDITS[edit]
    before = read_trainjob(custom, namespace, started)
    refused_with(
        rule,
        lambda: client.CustomObjectsApi(member).patch_namespaced_custom_object(
            *TRAINER, namespace, "trainjobs", started, change(before)
        ),
    )
    assert content(read_trainjob(custom, namespace, started)) == content(before)


@pytest.mark.parametrize(
    "changes",
    [
        {wire.LAST_EXECUTION_ANNOTATION: execution(r=4, pod="uid-of-the-next")},
        # A person accepting a new JobSet (docs/operations.md: A job flagged foreign) keeps the
        # records.
        {wire.JOBSET_UID_ANNOTATION: "the-accepted-one"},
    ],
    ids=["raise-last-execution", "accept-a-new-jobset"],
)
def test_the_records_may_be_raised_and_a_new_jobset_accepted(
    changes: dict[str, str],
    started: str,
    namespace: str,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    client.CustomObjectsApi(member).patch_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", started, {"metadata": {"annotations": changes}}
    )
    annotations = read_trainjob(custom, namespace, started)["metadata"]["annotations"]
    assert {key: annotations[key] for key in changes} == changes


def test_at_the_same_r_the_audits_record_only_gains_slots(
    started: str,
    namespace: str,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    """The record of the earlier format is upgraded to one of a slot per pod, keeping its
    slot; a slot seen later is appended; a recorded slot is never dropped or given another pod
    (its rank made again would not be found)."""
    first = {"node/0/0": "uid-of-the-first"}
    upgraded = Execution(r=3, pods=first).text()
    appended = Execution(r=3, pods={**first, "node/0/1": "uid-of-rank-1"}).text()
    members = client.CustomObjectsApi(member)

    def record(text: str) -> Any:
        return members.patch_namespaced_custom_object(
            *TRAINER, namespace, "trainjobs", started, _records({LAST: text})({})
        )

    for text in (upgraded, appended):
        record(text)
        assert read_trainjob(custom, namespace, started)["metadata"]["annotations"][LAST] == text
    for pods in (
        {"node/0/1": "uid-of-rank-1"},  # slot node/0/0 dropped
        {"node/0/0": "uid-of-a-rerun", "node/0/1": "uid-of-rank-1"},  # another pod for it
        {"node/0/1": "uid-of-rank-1", **first},  # the same slots, the first moved
    ):
        text = Execution(r=3, pods=pods).text()
        refused_with("keep-last-execution", lambda: record(text))  # noqa: B023
    assert read_trainjob(custom, namespace, started)["metadata"]["annotations"][LAST] == appended


def test_the_steps_identity_cannot_move_our_patch_to_another_replicated_job(
    started: str,
    namespace: str,
    api_client: client.ApiClient,
    control_plane: Cluster,
    tmp_path: Path,
    custom: client.CustomObjectsApi,
) -> None:
    """The steps' ServiceAccount may update TrainJobs (it raises A): renaming the replicated
    job our entry names would land every raise on another job, so it is refused."""
    identity = install_identity(
        api_client, namespace, admin_kubeconfig=control_plane.kubeconfig, work=tmp_path
    )
    before = read_trainjob(custom, namespace, started)
    renamed = copy.deepcopy(before)
    replicated = _our_entry(renamed)["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    replicated[0]["name"] = "launcher"
    with contextlib.closing(identity.api_client()) as steps:  # it may update, not patch
        text = refused_with(
            "keep-patch-jobs",
            lambda: client.CustomObjectsApi(steps).replace_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", started, renamed
            ),
        )
    assert "names the replicated jobs node" in text
    assert content(read_trainjob(custom, namespace, started)) == content(before)


# --- the JobSet -----------------------------------------------------------------------------


def _jobset_edits(jobset: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    replicated = copy.deepcopy(jobset["spec"]["replicatedJobs"])
    replicated[0]["template"]["spec"]["template"]["metadata"]["annotations"][
        wire.ADMISSION_ANNOTATION
    ] = "700"
    owners = copy.deepcopy(jobset["metadata"]["ownerReferences"])
    owners[0]["uid"] = "00000000-0000-0000-0000-000000000000"
    return {
        "open-by-hand": ("jobset-suspend", {"spec": {"suspend": False}}),
        "set-a-in-a-template": ("jobset-template", {"spec": {"replicatedJobs": replicated}}),
        "rewrite-the-owner": ("jobset-owner", {"metadata": {"ownerReferences": owners}}),
        "remove-the-owner": ("jobset-owner", {"metadata": {"ownerReferences": None}}),
        "label-j": ("jobset-identity", {"metadata": {"labels": {wire.RESTART_ATTEMPT_KEY: "500"}}}),
    }


@pytest.mark.parametrize(
    "edit",
    ["open-by-hand", "set-a-in-a-template", "rewrite-the-owner", "remove-the-owner", "label-j"],
)
def test_each_edit_of_the_jobset_is_refused(
    edit: str,
    started: str,
    namespace: str,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    before = read_jobset(custom, namespace, started)
    rule, change = _jobset_edits(before)[edit]
    refused_with(
        rule,
        lambda: client.CustomObjectsApi(member).patch_namespaced_custom_object(
            *JOBSET, namespace, "jobsets", started, change
        ),
    )
    after = read_jobset(custom, namespace, started)
    assert (after["metadata"]["uid"], content(after)["spec"]) == (
        before["metadata"]["uid"],
        content(before)["spec"],
    )
    assert after["metadata"]["ownerReferences"] == before["metadata"]["ownerReferences"]


def test_the_jobset_status_is_the_jobset_controllers_even_against_the_admin(
    started: str, namespace: str, custom: client.CustomObjectsApi
) -> None:
    """status.restarts is J: with jobsets/status rights (here system:masters) anyone could set
    it, and the next Jobs would carry that J."""
    before = read_jobset(custom, namespace, started)
    refused_with(
        "jobset-status",
        lambda: custom.patch_namespaced_custom_object_status(
            *JOBSET, namespace, "jobsets", started, {"status": {"restarts": 5}}
        ),
    )
    assert read_jobset(custom, namespace, started).get("status", {}).get("restarts", 0) == (
        before.get("status", {}).get("restarts", 0)
    )


# --- the child Jobs -------------------------------------------------------------------------


JOB_EDITS: Final[dict[str, tuple[str | None, Any]]] = {
    # Kubernetes 1.36 lets a suspended Job's template labels change; JobSet never puts J back.
    "label-j-in-the-template": (
        "job-template-identity",
        {"spec": {"template": {"metadata": {"labels": {wire.RESTART_ATTEMPT_KEY: "500"}}}}},
    ),
    "set-a-in-the-template": (
        "job-template-identity",
        {"spec": {"template": {"metadata": {"annotations": {wire.ADMISSION_ANNOTATION: "700"}}}}},
    ),
    "open-by-hand": ("job-suspend", {"spec": {"suspend": False}}),
    "remove-the-owner": ("job-owner", {"metadata": {"ownerReferences": None}}),
    # A rank scaled away and back is made again from the same template, with the same A and J
    # (the Job does not fail, so JobSet does not restart); a rank added runs beside them.
    "scale-down": ("job-spec", {"spec": {"parallelism": 0}}),
    "scale-up": ("job-spec", {"spec": {"parallelism": 2, "completions": 2}}),
    # The Job controller would make a failed rank's pod again, with the same A and J.
    "retry-a-failed-rank": ("job-spec", {"spec": {"backoffLimit": 2}}),
    # A replacement while the old pod still terminates: two pods of one slot at once.
    "replace-while-terminating": (
        "job-spec",
        {"spec": {"podReplacementPolicy": "TerminatingOrFailed"}},
    ),
    "manual-selector": ("job-spec", {"spec": {"manualSelector": True}}),
    # What the API server itself refuses, before any policy (immutable in Kubernetes 1.36, or
    # valid only with a field that is): job-spec names them too, should that change.
    "completion-mode": (None, {"spec": {"completionMode": "NonIndexed"}}),
    "backoff-limit-per-index": (None, {"spec": {"backoffLimitPerIndex": 1}}),
    "max-failed-indexes": (None, {"spec": {"maxFailedIndexes": 1}}),
    "pod-failure-policy": (
        None,
        {
            "spec": {
                "podFailurePolicy": {
                    "rules": [
                        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]}}
                    ]
                }
            }
        },
    ),
    "success-policy": (None, {"spec": {"successPolicy": {"rules": [{"succeededCount": 1}]}}}),
}


@pytest.mark.parametrize("edit", sorted(JOB_EDITS))
def test_each_edit_of_a_child_job_is_refused(
    edit: str,
    started: str,
    namespace: str,
    member: client.ApiClient,
    api_client: client.ApiClient,
) -> None:
    rule, change = JOB_EDITS[edit]
    name = child_job(started)
    before = read_job(api_client, namespace, name)

    def patch() -> object:
        return client.BatchV1Api(member).patch_namespaced_job(name, namespace, change)

    if rule is None:
        with pytest.raises(ApiException) as invalid:
            patch()
        assert invalid.value.status == 422, message(invalid.value)
    else:
        refused_with(rule, patch)
    after = read_job(api_client, namespace, name)
    assert content(after) == content(before)
    assert after["metadata"]["ownerReferences"] == before["metadata"]["ownerReferences"]


def test_a_child_job_has_no_scale_subresource(
    started: str,
    namespace: str,
    member: client.ApiClient,
    api_client: client.ApiClient,
    control_plane: Cluster,
    tmp_path: Path,
) -> None:
    """`kubectl scale job` and any client of jobs/scale: the `edit` role does not grant it (the
    member and the steps get RBAC's 403), and Kubernetes 1.36 does not serve it (the admin
    gets 404). Were it served, job-spec would have to match it: this test says when."""
    scale = f"/apis/batch/v1/namespaces/{namespace}/jobs/{child_job(started)}/scale"
    body = {"spec": {"replicas": 2}}
    identity = install_identity(
        api_client, namespace, admin_kubeconfig=control_plane.kubeconfig, work=tmp_path
    )
    with contextlib.closing(identity.api_client()) as steps:
        for actor in (member, steps):
            with pytest.raises(ApiException) as refused:
                kube.request(actor, "PATCH", scale, body=body, content_type=MERGE_PATCH)
            text = message(refused.value)
            assert refused.value.status == 403, text
            assert ' cannot patch resource "jobs/scale"' in text, text
    for method in ("GET", "PATCH"):
        with pytest.raises(ApiException) as missing:
            kube.request(api_client, method, scale, body=body, content_type=MERGE_PATCH)
        assert missing.value.status == 404, message(missing.value)
    discovered = kube.request(api_client, "GET", "/apis/batch/v1")["resources"]
    assert "jobs/scale" not in {resource["name"] for resource in discovered}


def test_jobsets_own_resume_of_a_child_job_passes(
    running_pod: dict[str, Any],
    started: str,
    namespace: str,
    api_client: client.ApiClient,
) -> None:
    """JobSet resumes its child Job (suspend, and the template's labels and annotations it
    merges from the JobSet) under job-spec and the other rules, and leaves the guarded spec
    fields as it made them."""
    job = read_job(api_client, namespace, child_job(started))["spec"]
    assert job["suspend"] is False
    guarded = ("parallelism", "completions", "backoffLimit", "podReplacementPolicy")
    assert {key: job.get(key) for key in guarded} == {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 0,
        "podReplacementPolicy": "Failed",
    }


def test_a_child_job_is_neither_deleted_nor_made_by_hand(
    started: str, namespace: str, member: client.ApiClient, api_client: client.ApiClient
) -> None:
    jobs = client.BatchV1Api(member)
    name = child_job(started)
    uid = read_job(api_client, namespace, name)["metadata"]["uid"]
    # JobSet would make it again and rerun its execution with the same A and J.
    refused_with("keep-job", lambda: jobs.delete_namespaced_job(name, namespace))
    assert read_job(api_client, namespace, name)["metadata"]["uid"] == uid

    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(annotations={wire.ADMISSION_ANNOTATION: "700"}),
        spec=client.V1PodSpec(
            restart_policy="Never", containers=[client.V1Container(name="c", image="x")]
        ),
    )
    made = client.V1Job(
        metadata=client.V1ObjectMeta(name="by-hand"),
        spec=client.V1JobSpec(template=template, suspend=True),
    )
    refused_with("job-create", lambda: jobs.create_namespaced_job(namespace, made))


# --- the pods -------------------------------------------------------------------------------


@pytest.fixture
def running_pod(step: Step, kubelet: Kubelet, started: str, namespace: str) -> dict[str, Any]:
    """The first pod of the started job, opened by dispatch-unsuspend (J = 0; A = 3, above the
    highest J recorded)."""
    opened = run_stage(step, "unsuspend", "--namespace", namespace, "--name", started)
    assert opened.code == 0, opened.error
    assert opened.result["admission"] == 3
    return kubelet.wait_for_pod(started, restart=0, admission=3)


POD_EDITS: Final[dict[str, tuple[str, Any]]] = {
    # The audit lists an execution's pods by this label; so did keep-pod-admission's selector.
    "remove-the-jobset-name": (
        "keep-pod-identity",
        {"metadata": {"labels": {wire.JOBSET_NAME_KEY: None}}},
    ),
    "change-j": ("keep-pod-identity", {"metadata": {"labels": {wire.RESTART_ATTEMPT_KEY: "500"}}}),
    "change-the-jobset-uid": (
        "keep-pod-identity",
        {"metadata": {"labels": {wire.JOBSET_UID_KEY: "another"}}},
    ),
    "remove-the-job-name": (
        "keep-pod-identity",
        {"metadata": {"labels": {"batch.kubernetes.io/job-name": None}}},
    ),
    "change-a": (
        "keep-pod-admission",
        {"metadata": {"annotations": {wire.ADMISSION_ANNOTATION: "5"}}},
    ),
    "remove-the-owner": ("pod-owner", {"metadata": {"ownerReferences": None}}),
}


@pytest.mark.parametrize("edit", sorted(POD_EDITS))
def test_each_edit_of_a_pods_identity_is_refused(
    edit: str,
    running_pod: dict[str, Any],
    namespace: str,
    member: client.ApiClient,
    api_client: client.ApiClient,
) -> None:
    rule, change = POD_EDITS[edit]
    name = running_pod["metadata"]["name"]
    pods = client.CoreV1Api(member)
    refused_with(rule, lambda: pods.patch_namespaced_pod(name, namespace, change))
    after = as_dict(client.CoreV1Api(api_client).read_namespaced_pod(name, namespace))
    for key in ("labels", "annotations", "ownerReferences"):
        assert after["metadata"].get(key) == running_pod["metadata"].get(key)


def test_other_edits_of_a_pod_pass_and_no_pod_carrying_a_is_made_by_hand(
    running_pod: dict[str, Any], namespace: str, member: client.ApiClient
) -> None:
    pods = client.CoreV1Api(member)
    name = running_pod["metadata"]["name"]
    noted = as_dict(
        pods.patch_namespaced_pod(name, namespace, {"metadata": {"labels": {"note": "ok"}}})
    )
    assert noted["metadata"]["labels"]["note"] == "ok"  # matched, and let through

    made = client.V1Pod(
        metadata=client.V1ObjectMeta(
            name="by-hand",
            labels=running_pod["metadata"]["labels"],  # the Job's selector would adopt it
            annotations={wire.ADMISSION_ANNOTATION: "700"},
        ),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="x")]),
    )
    refused_with("pod-create", lambda: pods.create_namespaced_pod(namespace, made))


def test_a_pod_carrying_a_is_deleted_by_its_controllers_alone(
    step: Step,
    running_pod: dict[str, Any],
    started: str,
    namespace: str,
    member: client.ApiClient,
    api_client: client.ApiClient,
) -> None:
    """Deleted by hand after it ran, a pod leaves the audit nothing to compare a rerun with."""
    name = running_pod["metadata"]["name"]
    by_member = client.CoreV1Api(member)
    text = refused_with("pod-delete", lambda: by_member.delete_namespaced_pod(name, namespace))
    assert f"pod {name} ran with A = 3" in text, text
    by_admin = client.CoreV1Api(api_client)  # no user is trusted: the cluster's admin neither
    refused_with("pod-delete", lambda: by_admin.delete_namespaced_pod(name, namespace))

    # A hold: the job controller deletes it (and, the pod never bound, the pod GC), and passes.
    held = run_stage(step, "hold", "--namespace", namespace, "--name", started)
    assert held.code == 0, held.error
    core = client.CoreV1Api(api_client)

    def gone() -> bool | None:
        listed = as_dict(core.list_namespaced_pod(namespace))["items"]
        return None if any(p["metadata"]["name"] == name for p in listed) else True

    wait_until(gone, what=f"the hold to delete pod {name}", timeout=DEADLINE)


# --- the runtime snapshot (Trainer v2.3.0 and later) -----------------------------------------


def snapshot_of(name: str) -> str:
    """The name of the ConfigMap Trainer keeps TrainJob `name`'s runtime snapshot in."""
    return f"{name}{wire.RUNTIME_SNAPSHOT_SUFFIX}"


def read_snapshot(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """TrainJob `name`'s runtime snapshot; this Trainer takes none (v2.2.1): the test is skipped,
    as the cluster says, not as configured."""
    try:
        return as_dict(
            client.CoreV1Api(api).read_namespaced_config_map(snapshot_of(name), namespace)
        )
    except ApiException as e:
        if e.status == 404:
            pytest.skip("this Trainer builds from the runtime itself and takes no snapshot")
        raise


def _snapshot_edits(
    member: client.ApiClient, namespace: str, taken: dict[str, Any]
) -> dict[str, tuple[str, Callable[[], object]]]:
    """Each way the team member tries to change what the job is built from, and its rule."""
    core = client.CoreV1Api(member)
    name = taken["metadata"]["name"]
    # The trainer Job given retries: a failed rank replaced with the same A and J.
    original = taken["data"][wire.RUNTIME_SNAPSHOT_KEY]
    retried = original.replace("backoffLimit: 0", "backoffLimit: 6")
    assert retried != original, original
    owner = taken["metadata"]["ownerReferences"][0]
    controlled = [
        client.V1OwnerReference(
            api_version=owner["apiVersion"],
            kind=owner["kind"],
            name=owner["name"],
            uid=owner["uid"],
            controller=True,
        )
    ]
    replaced = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(
            name=name,
            resource_version=taken["metadata"]["resourceVersion"],
            owner_references=controlled,
        ),
        data={wire.RUNTIME_SNAPSHOT_KEY: retried},
    )
    other_owner = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "someone-else",
        "uid": "00000000-0000-0000-0000-000000000000",
        "controller": True,
    }
    # Made again under its TrainJob's control, as Trainer would take it.
    made = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, owner_references=controlled),
        data={wire.RUNTIME_SNAPSHOT_KEY: retried},
    )
    return {
        "edit": (
            "snapshot-change",
            lambda: core.patch_namespaced_config_map(
                name, namespace, {"data": {wire.RUNTIME_SNAPSHOT_KEY: retried}}
            ),
        ),
        "replace": (
            "snapshot-change",
            lambda: core.replace_namespaced_config_map(name, namespace, replaced),
        ),
        "give-another-owner": (
            "snapshot-change",
            lambda: core.patch_namespaced_config_map(  # the list replaced, not merged
                name,
                namespace,
                {"metadata": {"ownerReferences": [other_owner]}},
                _content_type=MERGE_PATCH,
            ),
        ),
        "delete": ("snapshot-delete", lambda: core.delete_namespaced_config_map(name, namespace)),
        # Deleted and made again is refused at each step; the create alone, here.
        "make-again": (
            "snapshot-create",
            lambda: core.create_namespaced_config_map(namespace, made),
        ),
    }


def test_no_snapshot_is_made_by_hand_before_start(
    namespace: str, member: client.ApiClient, api_client: client.ApiClient
) -> None:
    """Made before the TrainJob, and controlled by it once it exists, a copy would be what
    Trainer v2.3.0 builds the new job from: made controlled, or given a controller later, it is
    refused, whatever the controller's kind and name (Trainer checks its UID alone)."""
    forged = {
        "apiVersion": "example.com/v1",
        "kind": "Forged",  # a kind the garbage collector cannot resolve, so it leaves the copy
        "name": "anything",
        "uid": "00000000-0000-0000-0000-00000000e411",
        "controller": True,
    }
    core = client.CoreV1Api(member)
    copied = {wire.RUNTIME_SNAPSHOT_KEY: "kind: ClusterTrainingRuntime\n"}
    forged_ref = client.V1OwnerReference(
        api_version=forged["apiVersion"],
        kind=forged["kind"],
        name=forged["name"],
        uid=forged["uid"],
        controller=True,
    )
    made = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=snapshot_of("early"), owner_references=[forged_ref]),
        data=copied,
    )
    refused_with("snapshot-create", lambda: core.create_namespaced_config_map(namespace, made))
    with pytest.raises(ApiException) as missing:
        client.CoreV1Api(api_client).read_namespaced_config_map(snapshot_of("early"), namespace)
    assert missing.value.status == 404

    # Controlled by nothing, it is no snapshot (Trainer builds no job from it; start refuses a
    # job of its name): made, but not given a controller.
    unowned = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=snapshot_of("early")), data=copied
    )
    core.create_namespaced_config_map(namespace, unowned)
    given = {"metadata": {"ownerReferences": [forged]}}
    refused_with(
        "snapshot-change",
        lambda: core.patch_namespaced_config_map(snapshot_of("early"), namespace, given),
    )
    kept = as_dict(core.read_namespaced_config_map(snapshot_of("early"), namespace))
    assert "ownerReferences" not in kept["metadata"], kept["metadata"]


def test_a_configmap_of_that_name_controlled_by_nothing_is_the_users_own(
    namespace: str, member: client.ApiClient
) -> None:
    """Not every ConfigMap named *-runtime-snapshot is a snapshot: one no object controls is
    created, changed and deleted as any other ConfigMap, as the team member."""
    core = client.CoreV1Api(member)
    name = snapshot_of("my-model")
    data = {"notes": "the runtime snapshot I keep of my own model"}
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data)
    )
    core.patch_namespaced_config_map(name, namespace, {"data": {"notes": "changed"}})
    assert as_dict(core.read_namespaced_config_map(name, namespace))["data"] == {"notes": "changed"}
    core.delete_namespaced_config_map(name, namespace)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map(name, namespace)
    assert gone.value.status == 404


@pytest.mark.parametrize("state", ["suspended", "running"])
def test_the_snapshot_is_neither_edited_nor_replaced_nor_deleted_by_hand(
    state: str,
    request: pytest.FixtureRequest,
    started: str,
    namespace: str,
    member: client.ApiClient,
    api_client: client.ApiClient,
) -> None:
    if state == "running":
        request.getfixturevalue("running_pod")
    taken = read_snapshot(api_client, namespace, started)
    for edit, (rule, attempt) in _snapshot_edits(member, namespace, taken).items():
        refused_with(rule, attempt)
        after = read_snapshot(api_client, namespace, started)
        assert (edit, after["metadata"]["resourceVersion"]) == (
            edit,
            taken["metadata"]["resourceVersion"],
        )


def test_the_snapshot_goes_with_its_trainjob(
    started: str, namespace: str, custom: client.CustomObjectsApi, api_client: client.ApiClient
) -> None:
    """The garbage collector's delete passes: the copy goes with the job, never before it."""
    read_snapshot(api_client, namespace, started)
    custom.delete_namespaced_custom_object(*TRAINER, namespace, "trainjobs", started)
    core = client.CoreV1Api(api_client)

    def gone() -> bool | None:
        try:
            core.read_namespaced_config_map(snapshot_of(started), namespace)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return None

    wait_until(
        gone, what=f"the garbage collector to delete {snapshot_of(started)}", timeout=DEADLINE
    )
