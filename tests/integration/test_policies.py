"""The admission policies on the real API server, with the real Trainer, JobSet and Kueue.

Every bypass is tried as a team member with ordinary edit rights (tests/support/team.py):
with both policies the API server raises A itself; with the guard alone (clusters before 1.36)
the edit is refused with its rule; with neither, the audit flags the execution that repeated R.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Final

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until
from tests.integration.conftest import wait_suspended
from tests.support.kueue_objects import KUEUE, KueueSetup, condition
from tests.support.lifecycle import (
    DEADLINE,
    JOBSET,
    TRAINER,
    Kubelet,
    Step,
    admit_and_approve,
    content,
    read_jobset,
    read_trainjob,
    run_stage,
    start_args,
    start_queued,
    wait_for_drained_jobset,
)
from tests.support.policies import refused_with
from tests.support.requests import trainjob_body

pytestmark = pytest.mark.integration
OPEN: Final = {"spec": {"suspend": False}}


def opened(step: Step, kubelet: Kubelet, namespace: str, runtime: str, job_id: str) -> str:
    """A started TrainJob opened by dispatch-unsuspend (A = 1), its first pod there."""
    started = step("start", *start_args(namespace, runtime, job_id))
    assert started.code == 0, started.error
    name: str = started.result["name"]
    assert run_stage(step, "unsuspend", "--namespace", namespace, "--name", name).code == 0
    kubelet.wait_for_pod(name, restart=0, admission=1)
    return name


def held(step: Step, api: client.ApiClient, namespace: str, name: str) -> None:
    """dispatch-hold, then wait until the JobSet has drained."""
    assert run_stage(step, "hold", "--namespace", namespace, "--name", name).code == 0
    wait_for_drained_jobset(api, namespace, name)


def patch_trainjob(api: client.ApiClient, namespace: str, name: str, body: Any) -> dict[str, Any]:
    """A merge patch, as `kubectl patch --type merge` sends it."""
    patched = client.CustomObjectsApi(api).patch_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", name, body
    )
    assert isinstance(patched, dict)
    return patched


def test_release_by_hand_gets_a_new_r_from_the_api_server(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
    member: client.ApiClient,
) -> None:
    name = opened(step, kubelet, namespace, torch_runtime, "by-hand")
    first = kubelet.execute(kubelet.wait_for_pod(name, restart=0, admission=1))
    held(step, api_client, namespace, name)

    released = patch_trainjob(member, namespace, name, OPEN)
    assert released["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "2"
    second = kubelet.execute(kubelet.wait_for_pod(name, restart=0, admission=2))
    assert (second.r, second.epoch) == (2, first.epoch + 1)

    held(step, api_client, namespace, name)
    again = run_stage(step, "unsuspend", "--namespace", namespace, "--name", name)
    assert (again.code, again.result.get("admission")) == (0, 3), "one raise for one opening"
    third = kubelet.execute(kubelet.wait_for_pod(name, restart=0, admission=3))
    assert [e.r for e in (first, second, third)] == [1, 2, 3]


@pytest.mark.policies("guard")
def test_release_by_hand_is_refused_where_only_the_guard_is_installed(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    name = opened(step, kubelet, namespace, torch_runtime, "guarded")
    held(step, api_client, namespace, name)
    refused_with("open-after-raise", lambda: patch_trainjob(member, namespace, name, OPEN))
    assert read_trainjob(custom, namespace, name)["spec"]["suspend"] is True
    released = run_stage(step, "unsuspend", "--namespace", namespace, "--name", name)
    assert (released.code, released.result.get("admission")) == (0, 2), released.error


FLAG: Final = {wire.FOREIGN_ANNOTATION: "true", wire.FOREIGN_CAUSE_ANNOTATION: "repeated-r (test)"}
UNFLAG: Final = dict.fromkeys(FLAG)  # a merge patch's null removes each


# With the raise on open the API server raises A in the opening first; the guard refuses it all
# the same, so no opener (a person's kubectl patch here, Kueue in policy mode) gets past.
@pytest.mark.parametrize(
    "policies", ["all", pytest.param("guard", marks=pytest.mark.policies("guard"))]
)
def test_a_job_flagged_foreign_is_opened_by_no_one(
    policies: str,
    step: Step,
    namespace: str,
    torch_runtime: str,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    started = step("start", *start_args(namespace, torch_runtime, f"flagged-{policies}"))
    assert started.code == 0, started.error
    name = started.result["name"]
    patch_trainjob(member, namespace, name, {"metadata": {"annotations": FLAG}})

    said = refused_with("open-while-foreign", lambda: patch_trainjob(member, namespace, name, OPEN))
    assert "repeated-r (test)" in said
    both = {"metadata": {"annotations": UNFLAG}, **OPEN}
    refused_with("open-while-foreign", lambda: patch_trainjob(member, namespace, name, both))
    unsuspended = run_stage(step, "unsuspend", "--namespace", namespace, "--name", name)
    assert unsuspended.code == 7, "the step refuses it too"
    job = read_trainjob(custom, namespace, name)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "0"

    # A person looked, and cleared the flag: the job opens again, with a raise.
    patch_trainjob(member, namespace, name, {"metadata": {"annotations": UNFLAG}})
    released = run_stage(step, "unsuspend", "--namespace", namespace, "--name", name)
    assert (released.code, released.result.get("admission")) == (0, 1), released.error


@pytest.mark.policies("none")
def test_release_by_hand_is_flagged_by_the_audit_where_no_policy_is_installed(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    name = opened(step, kubelet, namespace, torch_runtime, "unguarded")
    target = ["--namespace", namespace, "--name", name]
    first_pod = kubelet.wait_for_pod(name, restart=0, admission=1)
    assert run_stage(step, "audit", *target).code == 0, "the audit records the execution"
    held(step, api_client, namespace, name)

    patch_trainjob(member, namespace, name, OPEN)  # nothing stops it here

    def repeated() -> dict[str, Any] | None:
        pod = kubelet.wait_for_pod(name, restart=0, admission=1)
        return pod if pod["metadata"]["uid"] != first_pod["metadata"]["uid"] else None

    second_pod = wait_until(repeated, what="the execution opened by hand", timeout=DEADLINE)
    assert kubelet.execute(second_pod).r == kubelet.execute(first_pod).r == 1

    audited = run_stage(step, "audit", *target)
    assert audited.code == 7
    assert "began an execution with R = 1" in audited.error
    assert first_pod["metadata"]["uid"] in audited.error
    annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
    assert annotations[wire.FOREIGN_ANNOTATION] == "true"
    warnings = events_of(api_client, namespace, name, "FlaggedForeign")
    assert any("repeated-r" in (event.message or "") for event in warnings)
    assert all(event.type == "Warning" for event in warnings)


def events_of(
    api: client.ApiClient, namespace: str, name: str, reason: str
) -> list[client.CoreV1Event]:
    """The Events on TrainJob `name` with `reason`, as `kubectl describe` lists them."""
    listed = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason={reason}"
    )
    return list(listed.items)


def test_every_raise_is_an_event_on_the_trainjob(
    step: Step, kubelet: Kubelet, namespace: str, torch_runtime: str, api_client: client.ApiClient
) -> None:
    name = opened(step, kubelet, namespace, torch_runtime, "evented")
    [raised] = events_of(api_client, namespace, name, "AdmissionRaised")
    assert raised.type == "Normal"
    assert raised.message == "A raised to 1: the next execution starts with R = A + J = 1 + 0 = 1"
    assert raised.involved_object.kind == "TrainJob"


def test_kueue_readmission_through_a_queue_without_the_check_still_raises_a(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    kueue.install(cpu="1")
    started = start_queued(step, namespace, torch_runtime, kueue, "unchecked")
    name = started.result["name"]
    admit_and_approve(step, namespace, name, kueue.check)
    first = kubelet.execute(kubelet.wait_for_pod(name, restart=0, admission=1))

    custom.patch_cluster_custom_object(
        *KUEUE, "clusterqueues", f"{namespace}-cq", {"spec": {"admissionChecksStrategy": None}}
    )
    kueue.set_active(started.result["uid"], active=False)
    wait_suspended(custom, namespace, name)
    kueue.set_active(started.result["uid"], active=True)
    # Kueue admits with no check at all now, and unsuspends: the API server raises A.
    second = kubelet.execute(kubelet.wait_for_pod(name, restart=0, admission=2))
    assert (first.r, second.r) == (1, 2)
    readmitted = kueue.workload_of(started.result["uid"])
    assert readmitted is not None
    assert condition(readmitted, "Admitted") == "True"
    assert readmitted["status"].get("admissionChecks", []) == [], "no check gated it"


# --- each edit that would repeat or lower R is refused, naming its rule -------------------


def _floor(value: str | None) -> Callable[[dict[str, Any]], None]:
    def edit(job: dict[str, Any]) -> None:
        job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] = value

    return edit


def _our_patch(job: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in job["spec"]["runtimePatches"] if p["manager"] == wire.PATCH_MANAGER)


def _lower_a(job: dict[str, Any]) -> None:
    replicated = _our_patch(job)["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    replicated["template"]["spec"]["template"]["metadata"]["annotations"][
        wire.ADMISSION_ANNOTATION
    ] = "0"


def _drop_patch(job: dict[str, Any]) -> None:
    job["spec"]["runtimePatches"].remove(_our_patch(job))


def _annotation(key: str, value: str | None) -> Callable[[dict[str, Any]], None]:
    def edit(job: dict[str, Any]) -> None:
        job["metadata"]["annotations"][key] = value

    return edit


def _unmanage(job: dict[str, Any]) -> None:
    job["metadata"]["labels"][wire.MANAGED_BY_LABEL] = None


EDITS: Final[dict[str, tuple[str, Callable[[dict[str, Any]], None]]]] = {
    "lower-floor": ("keep-floor", _floor("0")),
    "remove-floor": ("keep-floor", _floor(None)),
    "lower-a": ("keep-admission", _lower_a),
    "remove-patch": ("keep-patch", _drop_patch),
    "remove-jobset-uid": ("keep-jobset-uid", _annotation(wire.JOBSET_UID_ANNOTATION, None)),
    "remove-highest-j": (
        "keep-highest-restart",
        _annotation(wire.HIGHEST_RESTART_ANNOTATION, None),
    ),
    "forge-open-until": (
        "open-until-generation",
        _annotation(wire.OPEN_UNTIL_GENERATION_ANNOTATION, "999"),
    ),
    "raise-floor-alone": ("whole-raise", _floor("7")),
    "forge-raised-for": ("raised-for", _annotation(wire.RAISED_FOR_ANNOTATION, "uid 2026")),
    "unmanage": ("keep-managed-label", _unmanage),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_each_edit_of_the_identity_records_is_refused(
    edit: str,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    name = opened(step, kubelet, namespace, torch_runtime, f"edit-{edit}")
    held(step, api_client, namespace, name)  # Trainer allows patch edits only now
    rule, change = EDITS[edit]
    before = read_trainjob(custom, namespace, name)

    def attempt() -> object:
        body = copy.deepcopy(before)
        change(body)
        return client.CustomObjectsApi(member).patch_namespaced_custom_object(
            *TRAINER, namespace, "trainjobs", name, _merge_patch(before, body)
        )

    refused_with(rule, attempt)
    assert content(read_trainjob(custom, namespace, name)) == content(before)


def _merge_patch(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The merge patch from `before` to `after` (lists replaced whole, None removes)."""
    patch: dict[str, Any] = {}
    for key in before.keys() | after.keys():
        old, new = before.get(key), after.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            if inner := _merge_patch(old, new):
                patch[key] = inner
        elif old != new:
            patch[key] = new
    return patch


def test_the_jobset_and_the_pods_keep_j_and_a(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    name = opened(step, kubelet, namespace, torch_runtime, "keeps")
    uid = read_jobset(custom, namespace, name)["metadata"]["uid"]
    as_member = client.CustomObjectsApi(member)
    refused_with(
        "keep-jobset",
        lambda: as_member.delete_namespaced_custom_object(*JOBSET, namespace, "jobsets", name),
    )
    assert read_jobset(custom, namespace, name)["metadata"]["uid"] == uid
    pod = kubelet.wait_for_pod(name, restart=0, admission=1)
    pods = client.CoreV1Api(member)
    for value in ("5", None):
        change = {"metadata": {"annotations": {wire.ADMISSION_ANNOTATION: value}}}
        refused_with(
            "keep-pod-admission",
            lambda change=change: pods.patch_namespaced_pod(  # type: ignore[misc]
                pod["metadata"]["name"], namespace, change
            ),
        )
    pods.patch_namespaced_pod(
        pod["metadata"]["name"], namespace, {"metadata": {"annotations": {"note": "ok"}}}
    )  # any other edit of the pod goes through


def test_a_managed_trainjob_is_created_suspended(
    namespace: str, torch_runtime: str, member: client.ApiClient
) -> None:
    body = trainjob_body("created-open", runtime=torch_runtime, namespace=namespace)
    body["spec"]["suspend"] = False
    refused_with(
        "create-suspended",
        lambda: client.CustomObjectsApi(member).create_namespaced_custom_object(
            *TRAINER, namespace, "trainjobs", body
        ),
    )


def test_the_garbage_collector_still_deletes_the_jobset_of_a_deleted_trainjob(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    name = opened(step, kubelet, namespace, torch_runtime, "deleted")
    client.CustomObjectsApi(member).delete_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", name
    )

    def gone() -> bool | None:
        try:
            read_jobset(custom, namespace, name)
        except ApiException as e:
            return True if e.status == 404 else None
        return None

    wait_until(gone, what=f"the garbage collector to delete JobSet {name}", timeout=DEADLINE)
