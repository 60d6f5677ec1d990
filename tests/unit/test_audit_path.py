"""The audit along the whole path: the objects between the TrainJob and the pod (issue 23).

Each case is an edit someone with the built-in `edit` role (or the steps' ServiceAccount) can
make where no policy refuses it, shaped as the API server returns the objects; each must be a
finding, and the untouched path none.
"""

from __future__ import annotations

import copy
from typing import Any, Final

import pytest

from dispatch_k8s.core.rules import ownership
from dispatch_k8s.core.rules.audit import Finding, FindingKind, JobAudit
from dispatch_k8s.core.rules.errors import BadInput
from dispatch_k8s.core.rules.wire import (
    ADMISSION_ANNOTATION,
    ANCESTOR_LABEL,
    ENV_TOKEN_PREFIX,
    HIGHEST_RESTART_ANNOTATION,
    JOBSET_NAME_KEY,
    REPLICATED_JOB_NAME_KEY,
    RESTART_ATTEMPT_KEY,
)
from dispatch_k8s.core.shell.settings import load_settings
from dispatch_k8s.steps.audit import AuditSettings
from tests.unit.audit_factories import NAME, UID, decide_audit, jobset_dict, pod_dict, trainjob_dict

TOKEN: Final = "job-7.3.1"
JOB_UID: Final = "job-uid-node-0"
LAUNCHER: Final = "launcher"
# A two-rank trainer job's spec as Trainer and JobSet's webhook leave it in the JobSet.
JOB_SPEC: Final = {
    "parallelism": 2,
    "completions": 2,
    "backoffLimit": 0,
    "completionMode": "Indexed",
}


def trainjob(**options: Any) -> dict[str, Any]:
    """A running TrainJob whose trainer env carries its token, as start builds it."""
    job = trainjob_dict(jobset_uid=UID, **options)
    job["spec"]["trainer"]["env"] = [{"name": ENV_TOKEN_PREFIX, "value": TOKEN}]
    return job


def jobset(*, restarts: int = 0, trainer_jobs: tuple[str, ...] = ("node",)) -> dict[str, Any]:
    body = jobset_dict(restarts=restarts)
    body["spec"] = {
        "replicatedJobs": [
            {
                "name": name,
                "template": {
                    "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                    "spec": {**JOB_SPEC, "template": {"spec": trainer_spec()}},
                },
            }
            for name in trainer_jobs
        ]
    }
    return body


def trainer_spec() -> dict[str, Any]:
    """The trainer pod's spec as the runtime rules pass it, with the trainer's token."""
    container = {"name": "node", "env": [{"name": ENV_TOKEN_PREFIX, "value": TOKEN}]}
    return {"restartPolicy": "Never", "containers": [container]}


def child_job(*, restart: str = "0", admission: str = "1", owned: bool = True) -> dict[str, Any]:
    """The trainer child Job JobSet made, its template as JobSet stamped it."""
    metadata: dict[str, Any] = {
        "name": f"{NAME}-node-0",
        "uid": JOB_UID,
        "labels": {
            JOBSET_NAME_KEY: NAME,
            RESTART_ATTEMPT_KEY: restart,
            ANCESTOR_LABEL: "trainer",
            REPLICATED_JOB_NAME_KEY: "node",
        },
    }
    if owned:
        metadata["ownerReferences"] = [{"kind": "JobSet", "name": NAME, "uid": UID}]
    template = {
        "metadata": {
            "labels": {RESTART_ATTEMPT_KEY: restart},
            "annotations": {ADMISSION_ANNOTATION: admission},
        },
        "spec": trainer_spec(),
    }
    # As the API server defaults the Job JobSet made from the template.
    spec = {**JOB_SPEC, "manualSelector": False, "podReplacementPolicy": "Failed"}
    return {"metadata": metadata, "spec": {**spec, "template": template}}


def trainer_pod(**options: Any) -> dict[str, Any]:
    """A live trainer pod made from child_job(), owned by it."""
    owned = options.pop("owned", True)
    pod = pod_dict(**options)
    if owned:
        pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": JOB_UID}]
    pod["spec"] = trainer_spec()
    return pod


def audit(
    job: dict[str, Any],
    the_jobset: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    jobs: tuple[dict[str, Any], ...] = (),
    *,
    after: dict[str, Any] | None = None,
) -> tuple[Finding, ...]:
    return decide_audit(job, the_jobset, pods=pods, jobs=jobs, jobset_after=after)[0]


def kinds(findings: tuple[Finding, ...]) -> list[FindingKind]:
    return sorted(finding.kind for finding in findings)


def test_the_untouched_path_is_clean() -> None:
    assert audit(trainjob(), jobset(), [trainer_pod()], (child_job(),)) == ()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("parallelism", 1),
        ("completions", 1),
        ("backoffLimit", 2),
        ("backoffLimitPerIndex", 1),
        ("podFailurePolicy", {"rules": [{"action": "Ignore", "onExitCodes": {"values": [1]}}]}),
        ("successPolicy", {"rules": [{"succeededIndexes": "0"}]}),
        ("completionMode", "NonIndexed"),
        ("manualSelector", True),
    ],
)
def test_a_child_job_spec_not_the_jobsets_template_is_found(field: str, value: Any) -> None:
    # A scale 2 -> 1 -> 2 removes rank 1's pod without a failure (J stays) and makes it again.
    edited = child_job()
    edited["spec"][field] = value
    findings = [
        f for f in audit(trainjob(), jobset(), [], (edited,)) if f.kind is FindingKind.JOB_SPEC
    ]
    assert len(findings) == 1, findings
    assert f"Job train-1-node-0 spec.{field} is " in findings[0].reason
    assert "spec.replicatedJobs[0].template.spec" in findings[0].reason


def test_what_the_api_server_defaults_in_a_child_job_is_not_a_finding() -> None:
    # A template that leaves parallelism, completions, backoffLimit and the mode out: the Job
    # JobSet made holds the batch/v1 defaults, and a podFailurePolicy rule its defaulted status.
    the_jobset = jobset()
    template = the_jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    for field in JOB_SPEC:
        del template[field]
    rule = {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}
    template["podFailurePolicy"] = {"rules": [rule]}
    job = child_job()
    job["spec"].update(parallelism=1, completions=1, backoffLimit=6, completionMode="NonIndexed")
    defaulted = {**rule, "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    job["spec"]["podFailurePolicy"] = {"rules": [defaulted]}
    found = [f for f in audit(trainjob(), the_jobset, [], (job,)) if f.kind is FindingKind.JOB_SPEC]
    assert found == []


def test_a_child_job_of_another_jobset_is_not_compared_with_this_template() -> None:
    other = child_job()
    other["metadata"]["ownerReferences"] = [{"kind": "JobSet", "name": NAME, "uid": "other"}]
    other["spec"]["parallelism"] = 1
    assert FindingKind.JOB_SPEC not in kinds(audit(trainjob(), jobset(), [], (other,)))


def test_j_set_on_a_suspended_child_jobs_template_is_found_before_any_pod() -> None:
    edited = child_job()
    edited["spec"]["template"]["metadata"]["labels"][RESTART_ATTEMPT_KEY] = "500"
    findings = audit(trainjob(), jobset(), [], (edited,))
    assert kinds(findings) == [FindingKind.JOB_IDENTITY]
    assert "label jobset.sigs.k8s.io/restart-attempt is '500'" not in findings[0].reason
    assert "is 500, not the Job's own 0" in findings[0].reason


def test_a_pod_running_a_j_its_job_and_jobset_never_counted_is_found() -> None:
    pod = trainer_pod(restart="500")
    findings = audit(trainjob(), jobset(), [pod], (child_job(),))
    assert kinds(findings) == [FindingKind.POD_IDENTITY, FindingKind.POD_IDENTITY]
    reasons = " ".join(f.reason for f in findings)
    assert "its Job train-1-node-0 is restart attempt 0" in reasons
    assert "above the JobSet's status.restarts 0" in reasons


def test_a_restart_during_the_audit_is_judged_by_the_jobset_read_after_the_pods() -> None:
    """JobSet read at J = 0, then a restart: the pods listed after it carry J = 1."""
    pod = trainer_pod(restart="1")
    assert kinds(audit(trainjob(), jobset(), [pod])) == [FindingKind.POD_IDENTITY]
    assert audit(trainjob(), jobset(), [pod], after=jobset(restarts=1)) == ()


def test_a_second_patch_entry_setting_a_is_found() -> None:
    job = trainjob()
    template = {"metadata": {"annotations": {ADMISSION_ANNOTATION: "700"}}}
    job["spec"]["runtimePatches"].insert(
        0,
        {
            "manager": "someone.example/tweaks",
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {"name": "node", "template": {"spec": {"template": template}}}
                        ]
                    }
                }
            },
        },
    )
    # Trainer merged it: the pods run with A = 700 while our patch says 1.
    findings = audit(job, jobset(), [trainer_pod(admission="700")], (child_job(admission="700"),))
    assert kinds(findings) == [FindingKind.FOREIGN_PATCH, FindingKind.STALE_POD]
    assert "(manager someone.example/tweaks) sets pod template metadata annotation" in " ".join(
        f.reason for f in findings
    )


@pytest.mark.parametrize(
    ("where", "edit"),
    [
        (
            "label",
            lambda t: t["metadata"].setdefault("labels", {}).update({RESTART_ATTEMPT_KEY: "9"}),
        ),
        (
            "env",
            lambda t: t.setdefault("spec", {}).update(
                {
                    "containers": [
                        {"name": "node", "env": [{"name": "DISPATCH_K8S_ADMISSION", "value": "9"}]}
                    ]
                }
            ),
        ),
        (
            "command",
            lambda t: t.setdefault("spec", {}).update(
                {"containers": [{"name": "node", "command": ["/bin/true"]}]}
            ),
        ),
    ],
    ids=["j-label", "dispatch-env", "trainer-command"],
)
def test_any_other_entry_touching_the_identity_is_found(where: str, edit: Any) -> None:
    job = trainjob()
    template: dict[str, Any] = {"metadata": {}}
    edit(template)
    replicated = {"name": "node", "template": {"spec": {"template": template}}}
    job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"] = {
        "template": {"spec": {"replicatedJobs": [replicated]}}
    }
    assert kinds(audit(job, jobset(), [])) == [FindingKind.FOREIGN_PATCH]


def test_our_patch_naming_another_job_than_the_trainer_is_found() -> None:
    """The two-job runtime: our entry renamed from the launcher to the `node` workers."""
    job = trainjob()  # our patch names `node`
    findings = audit(job, jobset(trainer_jobs=(LAUNCHER,)), [])
    assert kinds(findings) == [FindingKind.RUNTIME_PATCH]
    assert "names node, not the trainer replicated job launcher" in findings[0].reason


def test_the_launcher_pods_are_checked_whatever_the_patch_names() -> None:
    job = trainjob(admission="2", floor="2")
    stale = trainer_pod(replicated_job=LAUNCHER, admission="1")
    findings = audit(job, jobset(trainer_jobs=(LAUNCHER,)), [stale])
    assert FindingKind.POD_ADMISSION in kinds(findings)  # A = 1 below the floor 2


def test_a_pod_without_the_jobset_label_is_still_claimed_by_its_owner_and_its_trainer() -> None:
    job, js = trainjob(), jobset()
    hidden = trainer_pod()
    del hidden["metadata"]["labels"][JOBSET_NAME_KEY]
    lineage = ownership.lineage_of(job, js).with_jobs([child_job()])
    assert lineage.claims_pod(hidden)
    del hidden["metadata"]["ownerReferences"]
    assert lineage.claims_pod(hidden)  # by the token its trainer container runs with
    hidden["spec"] = {"containers": [{"name": "node"}]}
    assert not lineage.claims_pod(hidden)


def test_another_jobs_pod_is_not_claimed() -> None:
    other = pod_dict()
    other["metadata"]["labels"][JOBSET_NAME_KEY] = "someone-else"
    other["spec"] = {
        "containers": [{"name": "node", "env": [{"name": ENV_TOKEN_PREFIX, "value": "x.1.1"}]}]
    }
    assert not JobAudit(trainjob(), jobset(), jobs=[child_job()]).claims(other)


def test_a_child_job_whose_owner_references_were_removed_is_found() -> None:
    findings = audit(trainjob(), jobset(), [], (child_job(owned=False),))
    assert kinds(findings) == [FindingKind.ORPHANED]
    assert ownership.lineage_of(trainjob(), jobset()).claims_job(child_job(owned=False))


def test_a_trainer_pod_no_job_owns_is_found() -> None:
    findings = audit(trainjob(), jobset(), [trainer_pod(owned=False)], (child_job(),))
    assert kinds(findings) == [FindingKind.ORPHANED]


def test_an_execution_with_r_zero_is_found_even_once_it_is_over() -> None:
    job = trainjob(admission="0", floor="0")
    live = trainer_pod(admission="0")
    assert kinds(audit(job, jobset(), [live])) == [FindingKind.ZERO_R]
    over = trainer_pod(admission="0", phase="Failed")
    over["status"]["startTime"] = "2026-12-02T03:00:00Z"
    assert kinds(audit(job, jobset(), [over])) == [FindingKind.ZERO_R]
    never_ran = trainer_pod(admission="0", phase="Failed")
    assert audit(job, jobset(), [never_ran]) == ()


def test_j_below_the_highest_recorded_without_a_raise_past_it_is_found() -> None:
    """A new JobSet (J = 0) accepted by recording its UID, with A never raised past J = 2."""
    job = trainjob(highest_restart="2")
    assert kinds(audit(job, jobset(), [trainer_pod(admission="1")])) == [FindingKind.RESTART_BELOW]
    # A raise after the reset: max(A, floor) + (2 - 0) + 1 = 4, so R = 4 > every earlier R.
    raised = trainjob(highest_restart="2", admission="4", floor="4")
    assert audit(raised, jobset(), [trainer_pod(admission="4")], (child_job(admission="4"),)) == ()


def test_a_running_jobs_pod_above_the_patch_is_stale_too() -> None:
    findings = audit(trainjob(), jobset(), [trainer_pod(admission="3")])
    assert kinds(findings) == [FindingKind.STALE_POD]


def test_the_audit_streams_pods_through_jobaudit_once() -> None:
    job_audit = JobAudit(trainjob(), jobset(), jobs=[child_job()])
    pods = [trainer_pod(), copy.deepcopy(trainer_pod(restart="7"))]
    for pod in pods:
        job_audit.see(pod)
    findings, observed = job_audit.result(jobset_after=jobset(restarts=0))
    assert observed.highest_restart == 7
    assert FindingKind.POD_IDENTITY in kinds(findings)


def test_the_highest_restart_record_is_read_from_the_trainjob() -> None:
    job = trainjob()
    job["metadata"]["annotations"][HIGHEST_RESTART_ANNOTATION] = "garbage"
    assert audit(job, jobset(), [trainer_pod()], (child_job(),)) == ()


# --- many TrainJobs at once: which audit each Job and pod goes to ------------------------------


def test_claims_route_each_object_to_the_trainjobs_that_own_it_once() -> None:
    claims: ownership.Claims[str] = ownership.Claims()
    ours = ownership.lineage_of(trainjob(), jobset()).with_jobs([child_job()])
    claims.add(ours, "ours", uids=ours.job_uids)
    other = ownership.Lineage(name="other", jobset_uid="other-js", token="other.1.1")
    claims.add(other, "other", uids=["other-job"])
    pod = trainer_pod()
    assert claims.owners_of_pod(pod) == ["ours"], "three marks, one owner, named once"
    del pod["metadata"]["labels"][JOBSET_NAME_KEY]
    del pod["metadata"]["ownerReferences"]
    assert claims.owners_of_pod(pod) == ["ours"], "by the trainer's token alone"
    by_job = pod_dict()
    by_job["metadata"]["labels"] = {ownership.BATCH_CONTROLLER_UID_KEY: "other-job"}
    assert claims.owners_of_pod(by_job) == ["other"], "by the Job controller's label"
    assert claims.owners_of_pod({"metadata": {}}) == []


def test_a_copy_under_another_name_is_claimed_by_every_trainjob_of_its_token() -> None:
    """`dispatch-audit --all` (issue 43): the original listed first, its copy (the same trainer
    token, from `kubectl get -o yaml`) after it; the copy's pods are the original's to compare
    too, as `--name` of the original claims them, not only the last listed's."""
    claims: ownership.Claims[str] = ownership.Claims()
    for name in ("original", "the-copy"):
        lineage = ownership.Lineage(name=name, jobset_uid=f"{name}-js", token=TOKEN)
        claims.add(lineage, name, uids=[f"{name}-job"])
    copy_pod = trainer_pod()
    copy_pod["metadata"]["labels"][JOBSET_NAME_KEY] = "the-copy"
    copy_pod["metadata"]["ownerReferences"] = [{"kind": "Job", "uid": "the-copy-job"}]
    assert claims.owners_of_pod(copy_pod) == ["the-copy", "original"]
    assert ownership.lineage_of(trainjob(), jobset()).claims_pod(copy_pod), "as --name does"


@pytest.mark.parametrize(
    "argv",
    [[], ["--name", "a", "--all"], ["--all", "--selector", "team=a"]],
    ids=["none", "name-and-all", "all-and-selector"],
)
def test_audit_takes_exactly_one_target(argv: list[str]) -> None:
    with pytest.raises(BadInput, match="give exactly one of --name, --all and --selector"):
        load_settings(AuditSettings, prog="dispatch-audit", argv=argv)
