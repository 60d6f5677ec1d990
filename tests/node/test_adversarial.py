"""Adversarial paths on the real node: the edits a team member with ordinary edit rights (or
the steps' own ServiceAccount) can make on the way from the TrainJob to the container.

Each attack is tried once per policy install (tests/policies.py): with both policies and with
the guard alone the API server must refuse it (403, naming its `dispatch-k8s guard` rule,
pipelines/policies/); where none is installed the audit must flag the job (exit 7), from the
objects as they are. An attack neither refused nor flagged would let an execution begin with
an R the job already had, unseen. What each execution saw is what its own process printed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core import wire
from tests.integration.conftest import Step
from tests.integration.lifecycle import (
    JOBSET,
    add_foreign_admission_entry,
    as_dict,
    read_trainjob,
    run_stage,
)
from tests.node.executions import DEADLINE, TRAINER, printed, start_flags
from tests.policies import message
from tests.wait import wait_until

pytestmark = [pytest.mark.node, pytest.mark.cluster]
Stage = Literal["suspended", "running"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """The job under attack, and the clients to attack it with."""

    namespace: str
    name: str
    member: client.ApiClient  # the built-in edit role's rights on the training objects
    admin: client.ApiClient  # the test's own reads

    def trainer_job(self) -> dict[str, Any]:
        """The trainer child Job JobSet made."""

        def made() -> dict[str, Any] | None:
            listed = as_dict(
                client.BatchV1Api(self.admin).list_namespaced_job(
                    self.namespace, label_selector=f"{wire.JOBSET_NAME_KEY}={self.name}"
                )
            )
            for job in listed["items"]:
                if job["metadata"]["labels"].get(wire.ANCESTOR_LABEL) == wire.ANCESTOR_TRAINER:
                    return dict(job)
            return None

        return wait_until(made, what=f"the trainer Job of {self.name}", timeout=DEADLINE)

    def trainer_pod(self) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            listed = as_dict(
                client.CoreV1Api(self.admin).list_namespaced_pod(
                    self.namespace, label_selector=f"{wire.JOBSET_NAME_KEY}={self.name}"
                )
            )
            live = [p for p in listed["items"] if not p["metadata"].get("deletionTimestamp")]
            return live[0] if live else None

        return wait_until(running, what=f"a live pod of {self.name}", timeout=DEADLINE)


def _child_job_j(target: Target) -> None:
    """J set on a suspended child Job's pod template: the next pods would print it."""
    job = target.trainer_job()["metadata"]["name"]
    edit = {"spec": {"template": {"metadata": {"labels": {wire.RESTART_ATTEMPT_KEY: "500"}}}}}
    client.BatchV1Api(target.member).patch_namespaced_job(job, target.namespace, edit)


def _second_patch_entry(target: Target) -> None:
    """Another manager's runtime-patch entry that sets A on the trainer's pods."""
    custom = client.CustomObjectsApi(target.member)
    add_foreign_admission_entry(custom, target.namespace, target.name, admission="700")


def _orphaned_child_job(target: Target) -> None:
    """A child Job taken from JobSet (its owner references removed): unsuspended, it runs."""
    job = target.trainer_job()["metadata"]["name"]
    remove = [{"op": "remove", "path": "/metadata/ownerReferences"}]
    client.BatchV1Api(target.member).patch_namespaced_job(job, target.namespace, remove)


def _hidden_pod(target: Target) -> None:
    """A running pod taken out of label selectors, then its A changed."""
    pod = target.trainer_pod()["metadata"]["name"]
    core = client.CoreV1Api(target.member)
    core.patch_namespaced_pod(
        pod, target.namespace, {"metadata": {"labels": {wire.JOBSET_NAME_KEY: None}}}
    )
    core.patch_namespaced_pod(
        pod, target.namespace, {"metadata": {"annotations": {wire.ADMISSION_ANNOTATION: "9"}}}
    )


def _jobset_owner_rewritten(target: Target) -> None:
    """The JobSet's owner reference pointed elsewhere: the garbage collector deletes it as an
    orphan and Trainer builds a new one whose J starts again at 0."""
    custom = client.CustomObjectsApi(target.member)
    jobset = custom.get_namespaced_custom_object(*JOBSET, target.namespace, "jobsets", target.name)
    assert isinstance(jobset, dict)
    old_uid = jobset["metadata"]["uid"]
    owners = jobset["metadata"]["ownerReferences"]
    owners[0]["uid"] = "00000000-0000-0000-0000-000000000000"
    custom.replace_namespaced_custom_object(
        *JOBSET, target.namespace, "jobsets", target.name, jobset
    )

    def rebuilt() -> bool | None:
        try:
            now = client.CustomObjectsApi(target.admin).get_namespaced_custom_object(
                *JOBSET, target.namespace, "jobsets", target.name
            )
        except ApiException:
            return None
        assert isinstance(now, dict)
        return now["metadata"]["uid"] != old_uid or None

    wait_until(rebuilt, what="the JobSet to be replaced", timeout=DEADLINE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Attack:
    """One edit on the identity's path, where it is made, and what the audit then reports."""

    name: str
    stage: Stage
    edit: Callable[[Target], None]
    refused_by: str  # the guard rule that refuses it where the policies are installed
    flagged_as: str  # in the audit's message where no policy refused the edit


ATTACKS: Final = [
    Attack(
        name="child-job-j",
        refused_by="job-template-identity",
        stage="suspended",
        edit=_child_job_j,
        flagged_as="is 500, not the Job's own 0",
    ),
    Attack(
        name="second-patch-entry",
        refused_by="foreign-patch-admission",
        stage="suspended",
        edit=_second_patch_entry,
        flagged_as="(manager someone.example/tweaks) sets pod template metadata annotation",
    ),
    Attack(
        name="orphaned-child-job",
        refused_by="job-owner",
        stage="suspended",
        edit=_orphaned_child_job,
        flagged_as="runs the trainer but no JobSet owns it",
    ),
    Attack(
        name="hidden-pod",
        refused_by="keep-pod-identity",
        stage="running",
        edit=_hidden_pod,
        flagged_as="runs with A = 9",
    ),
    Attack(
        name="jobset-owner-rewritten",
        refused_by="jobset-owner",
        stage="running",
        edit=_jobset_owner_rewritten,
        flagged_as="is not the recorded",
    ),
]


def refused(edit: Callable[[], None]) -> ApiException | None:
    """The API server's refusal of `edit`, or None when it was accepted."""
    try:
        edit()
    except ApiException as e:
        return e
    return None


INSTALLS: Final = [
    pytest.param(which, marks=pytest.mark.policies(which), id=which)
    for which in ("all", "guard", "none")
]


@pytest.mark.parametrize("installed", INSTALLS)
@pytest.mark.parametrize("attack", ATTACKS, ids=[attack.name for attack in ATTACKS])
def test_every_edit_on_the_path_is_refused_or_flagged(
    attack: Attack,
    installed: str,
    step: Step,
    namespace: str,
    real_node_runtime: str,
    api_client: client.ApiClient,
    member: client.ApiClient,
) -> None:
    started = step("start", *start_flags(namespace, real_node_runtime, job_id=attack.name))
    assert started.code == 0, started.error
    name = started.result["name"]
    target = Target(namespace=namespace, name=name, member=member, admin=api_client)
    if attack.stage == "running":
        assert run_stage(step, "unsuspend", "--namespace", namespace, "--name", name).code == 0
        printed(client.CoreV1Api(api_client), namespace, name, restart=0, admission=1)
        audited = run_stage(step, "audit", "--namespace", namespace, "--name", name)
        assert audited.code == 0, "a clean execution, recorded before the attack"
    else:
        target.trainer_job()  # JobSet has made the suspended Jobs the attack edits

    refusal = refused(lambda: attack.edit(target))
    if installed != "none":  # both policies, or the guard alone: the API server refuses it
        assert refusal is not None, f"{attack.name} was accepted where the guard is installed"
        assert refusal.status == 403, message(refusal)
        assert f"dispatch-k8s guard {attack.refused_by}:" in message(refusal)
        return
    assert refusal is None, f"refused where no policy is installed: {message(refusal)}"
    audit = run_stage(step, "audit", "--namespace", namespace, "--name", name)
    assert audit.code == 7, (
        f"{attack.name} was accepted ({installed}) and not flagged: an execution could repeat R"
    )
    assert attack.flagged_as in audit.error
    flag = read_trainjob(client.CustomObjectsApi(api_client), namespace, name)["metadata"][
        "annotations"
    ].get(wire.FOREIGN_ANNOTATION)
    assert flag == wire.FOREIGN


@pytest.mark.parametrize("installed", INSTALLS)
def test_a_trainjob_deleted_after_it_ran_is_not_started_again_at_a_0(
    installed: str,
    step: Step,
    namespace: str,
    real_node_runtime: str,
    api_client: client.ApiClient,
    member: client.ApiClient,
) -> None:
    """Deleted by the team member once it ran R = 1, the same request would start at A = 0
    and run R = 1 again: start's ledger refuses it (exit 6) whatever the install."""
    flags = start_flags(namespace, real_node_runtime, job_id="recreated")
    started = step("start", *flags)
    assert started.code == 0, started.error
    name = started.result["name"]
    assert run_stage(step, "unsuspend", "--namespace", namespace, "--name", name).code == 0
    printed(client.CoreV1Api(api_client), namespace, name, restart=0, admission=1)
    client.CustomObjectsApi(member).delete_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", name
    )

    def gone() -> bool | None:
        try:
            read_trainjob(client.CustomObjectsApi(api_client), namespace, name)
        except ApiException as e:
            return e.status == 404 or None
        return None

    wait_until(gone, what=f"TrainJob {name} to be deleted", timeout=DEADLINE)
    again = step("start", *flags)
    assert again.code == 6, (installed, again.code, again.error)
    assert "with a new submission number N" in again.error
