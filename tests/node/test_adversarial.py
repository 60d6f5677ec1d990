"""Adversarial paths on the real node: every edit a team member with the built-in `edit` rights
(tests/support/team.py) or the steps' own ServiceAccount (pipelines/rbac/steps.yaml) can
make on the way from the TrainJob to the container, object by object and verb by verb.

Each cell of the matrix below is one small attack function, tried once per policy install
(tests/support/policies.py: `all` both policies, `guard` the ValidatingAdmissionPolicies alone,
`none` detection only), with what that install must do:

- `refused RULE`: the API server refuses it, HTTP 403 naming `dispatch-k8s guard RULE:`;
- `flagged`: accepted, and `dispatch-audit` then exits 7 with the cell's message fragment and
  flags the TrainJob foreign (a create's: the one it made); under `none` (detection only, as
  it ships) the admission controller's auditor runs beside every cell and has flagged it
  first, with that fragment in its cause;
- `flagged by the auditor`: accepted, and the auditor flags it, with the fragment in its
  cause: a record erased, which it puts back; `dispatch-audit`, run after, finds nothing of
  its own (exit 0). Without the auditor the erasure is seen by nothing (docs/policies.md: The
  trust boundary);
- `not flagged (the audit's own record)`: accepted, and neither flags it: the record was
  forged with the value the audit itself writes at first sight, raised or not (J 0), which
  bounds R no lower than the earned one;
- `R up`: accepted, and every execution that ran after it printed an R above every earlier
  one's (what each execution saw is what its own process printed: pods/log); `last N`: the
  last printed N, the R the raise rule gives;
- `copied again by Trainer, not flagged (else flagged)`: a runtime snapshot deleted and made
  again by the member; Trainer, which watches the snapshots it owns, copies the runtime again
  as soon as the delete lands, over hers where hers came first: built from what `start`
  checked, nothing to flag (where hers outlasted Trainer's copy: flagged);
- `put back`: accepted, and the controllers undo it (Trainer suspends the JobSet again from its
  TrainJob, JobSet its Jobs) before any execution printed; a pod made meanwhile (R = 0) the
  auditor may flag;
- `blocked`: accepted, and the job can no longer be opened (`dispatch-unsuspend` exits 6);
- `its opening refused RULE`: accepted, and the opening a controller then makes (Kueue's, read
  from its log) is refused with RULE: nothing runs;
- `... (v2.2.1); R up (v2.3.0: built from its copy)`: an edit of the runtime the job names. Trainer
  v2.3.0 builds the job from its copy of the runtime, taken before the edit (the runtime
  snapshot, found on the cluster), so the edit decides nothing: the job is released, R rises,
  and the audit exits 0; Trainer v2.2.1 builds from the runtime itself: the first outcome;
- `blocked (v2.3.0); R up (v2.2.1: kept by its finalizer)`: the runtime the job names deleted.
  Trainer v2.3.0 keeps no finalizer on a runtime: it is gone, and the job blocked. Trainer v2.2.1
  keeps one on a runtime its jobs use (found on the cluster: the runtime is still there, being
  deleted), and builds the job from it as start checked it: the job is released, R rises, and
  the audit exits 0;
- `RBAC`: the actor has no right to it: a 403 from RBAC, whose message names no guard rule.

Where an accepted edit matters only once something runs again, the cell's follow-up does what
would come next (the next execution, a release by `dispatch-unsuspend`, a rerun) before the
audit or the R check. Stages: `suspended` (started, never opened, JobSet has made its Jobs),
`running` (opened by `dispatch-unsuspend`, R = 1 printed and audited), `held` (then held by
`dispatch-hold` and drained), `queued` (queued through Kueue, quota reserved, the dispatch
admission check Pending).

Under `none` the auditor (one replica, gating and auditing the test's namespace only:
tests/support/replicas.py) starts before the stage is reached, but in the `queued` cell, where
it starts once the edit is made: the controller it is part of gates the namespace's Workloads,
and running, it would raise A and approve the reservation before the steps' identity could.
The `snapshot` cells edit Trainer's copy of the runtime the job is built from, the ConfigMap
`<trainjob>-runtime-snapshot` (Trainer v2.3.0); where Trainer takes none (v2.2.1, found on the
cluster) they are skipped.

trainjob create member: dry-run-output-after-delete (running)
    all, guard: refused ledger-spent; none: flagged
trainjob create member: copy-forging-admission-floor (running)
    all, guard: refused create-initial; none: flagged
trainjob create member: copy-forging-admission (running)
    all, guard: refused create-initial; none: flagged
trainjob create member: copy-forging-open-until-generation (running)
    all, guard: refused create-initial; none: flagged
trainjob create member: copy-forging-last-execution (running)
    all, guard: refused create-initial; none: flagged
trainjob create member: copy-forging-highest-restart (running)
    all, guard: refused create-initial; none: not flagged (the audit's own record)
trainjob create member: copy-forging-jobset-uid (running)
    all, guard: refused create-initial; none: flagged
trainjob create member: copy-forging-raised-for (running)
    all, guard: refused create-initial; none: flagged
trainjob patch member: release-by-hand (held)
    all: R up, last 2; guard: refused open-after-raise; none: flagged
trainjob update steps: release-by-hand (held)
    all: R up, last 2; guard: refused open-after-raise; none: flagged
trainjob ssa-force member: take-over-our-a (held)
    all, guard: refused keep-admission; none: flagged
trainjob annotate member: lower-floor (held)
    all, guard: refused keep-floor; none: flagged by the auditor
trainjob annotate member: remove-last-execution-then-rerun (running)
    all, guard: refused keep-last-execution; none: flagged
trainjob update steps: remove-highest-restart (running)
    all, guard: refused keep-highest-restart; none: flagged by the auditor
trainjob update steps: change-start-record (running)
    all, guard: refused keep-start-record; none: R up, last 2
trainjob update steps: rename-patch-job (suspended)
    all, guard: refused keep-patch-jobs; none: flagged
patch-entry patch member: sets-a (suspended)
    all, guard: refused foreign-patch-admission; none: flagged
patch-entry ssa-force member: sets-dispatch-env (suspended)
    all, guard: refused patch-dispatch-env; none: flagged
patch-entry update steps: sets-j (suspended)
    all, guard: refused patch-jobset-keys; none: flagged
runtime update member: dispatch-env (suspended)
    every install: flagged (v2.2.1); R up (v2.3.0: built from its copy)
runtime update member: backoff-limit (suspended)
    every install: flagged (v2.2.1); R up (v2.3.0: built from its copy)
runtime patch member: trainer-command (suspended)
    every install: flagged (v2.2.1); R up (v2.3.0: built from its copy)
runtime delete member: delete (suspended)
    every install: blocked (v2.3.0); R up (v2.2.1: kept by its finalizer)
snapshot patch member: backoff-limit-suspended (suspended)
    all, guard: refused snapshot-change; none: flagged
snapshot delete member: after-runtime-edit-suspended (suspended)
    all, guard: refused snapshot-delete; none: flagged
snapshot replace member: delete-and-create-suspended (suspended)
    all, guard: refused snapshot-delete; none: copied again by Trainer, not flagged (else flagged)
snapshot patch member: backoff-limit-running (running)
    all, guard: refused snapshot-change; none: flagged
snapshot delete member: after-runtime-edit-running (running)
    all, guard: refused snapshot-delete; none: flagged
snapshot replace member: delete-and-create-running (running)
    all, guard: refused snapshot-delete; none: copied again by Trainer, not flagged (else flagged)
workload-status ssa-force steps: check-ready-without-a-raise (queued)
    all: R up, last 1; guard: its opening refused open-after-raise; none: flagged
jobset patch member: open-by-hand (suspended)
    all, guard: refused jobset-suspend; none: put back
jobset ssa-force member: open-by-hand (suspended)
    all, guard: refused jobset-suspend; none: put back
jobset update member: rewrite-owner (running)
    all, guard: refused jobset-owner; none: flagged
jobset label member: label-j (suspended)
    all, guard: refused jobset-identity; none: R up, last 1
jobset delete member: delete (running)
    all, guard: refused keep-jobset; none: flagged
job patch member: template-j (suspended)
    all, guard: refused job-template-identity; none: flagged
job ssa-force member: template-j (suspended)
    all, guard: refused job-template-identity; none: flagged
job patch member: remove-owner (suspended)
    all, guard: refused job-owner; none: flagged
job suspend member: open-by-hand (suspended)
    all, guard: refused job-suspend; none: put back
job suspend member: suspend-running (running)
    all, guard: refused job-suspend; none: flagged
job delete member: delete (running)
    all, guard: refused keep-job; none: flagged
pod label member: hide-then-rerun (running)
    all, guard: refused keep-pod-identity; none: flagged
pod annotate member: change-a (running)
    all, guard: refused keep-pod-admission; none: flagged
pod ssa-force member: set-j (running)
    all, guard: refused keep-pod-identity; none: flagged
pod delete member: delete (running)
    all, guard: refused pod-delete; none: R up
job patch member: scale-down-up (running)
    all, guard: refused job-spec; none: flagged
job patch member: backoff-limit (suspended)
    all, guard: refused job-spec; none: flagged
trainjob patch steps: RBAC
trainjob delete steps: RBAC
runtime update steps: RBAC
jobset patch steps: RBAC
jobset delete steps: RBAC
job patch steps: RBAC
job delete steps: RBAC
pod patch steps: RBAC
pod delete steps: RBAC
workload update steps: RBAC
jobset-status patch member: RBAC
workload-status patch member: RBAC
cluster-runtime update member: RBAC
job scale member: RBAC
job scale steps: RBAC

The RBAC cells do not depend on the install and run once, where both policies are installed
(RBAC answers before any admission policy is asked). A TrainJob the member deletes once it ran
is refused by `start` (exit 6, its ledger) when started again, with every install (the last
test here).
"""

from __future__ import annotations

import contextlib
import copy
import json
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.rules.errors import NotOpened
from tests.cluster import kube
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.executions import (
    DEADLINE,
    NODE_RUNTIME,
    RUNS,
    TRAINER,
    node_runtime,
    printed,
    start_flags,
)
from tests.support.kueue_objects import KUEUE, KueueSetup, now
from tests.support.lifecycle import (
    JOBSET,
    Step,
    add_foreign_admission_entry,
    as_dict,
    edit_object,
    edit_trainjob,
    read_trainjob,
    run_stage,
    wait_for_drained_jobset,
)
from tests.support.policies import message
from tests.support.replicas import replicas
from tests.support.step_identity import StepIdentity
from tests.support.team import NAME as MEMBER_NAME

pytestmark = [pytest.mark.node, pytest.mark.cluster]
Install = Literal["all", "guard", "none"]
Stage = Literal["suspended", "running", "held", "queued"]
Actor = Literal["member", "steps"]
RuntimeShape = Literal["cluster", "namespaced", "two-jobs", "two-ranks"]
MERGE_PATCH: Final = "application/merge-patch+json"
ATTACKER: Final = "someone.example/tweaks"  # the field manager of the attacks' applies
LOCAL_RUNTIME: Final = "team-runtime"  # a TrainingRuntime of the test's namespace
SIDE_JOB: Final = "side"  # the second replicated job of the two-job runtime
JOB_NAME_KEY: Final = "batch.kubernetes.io/job-name"  # a pod's Job


@dataclass(frozen=True, slots=True)
class Refused:
    """The API server refuses the edit with this `dispatch-k8s guard` rule (403)."""

    rule: str


@dataclass(frozen=True, slots=True)
class Flagged:
    """Accepted; the audit then exits 7 with this fragment and flags the job foreign."""

    fragment: str


@dataclass(frozen=True, slots=True)
class RaisedR:
    """Accepted; every later execution printed an R above every earlier one's, the last `last`
    (the R the raise rule gives: a larger one would be as wrong, as a later reset would show)."""

    last: int | None = None  # None: no R is owed (nothing need run again)


@dataclass(frozen=True, slots=True)
class Blocked:
    """Accepted, and the job can no longer be opened: dispatch-unsuspend exits 6 with one of
    `fragments` (which webhook answers first varies)."""

    fragments: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FlaggedByTheAuditor:
    """Accepted; the auditor flags it with this fragment in its cause (a record erased, which it
    puts back), and `dispatch-audit`, run after, finds nothing of its own: what detection
    without the auditor does not see (docs/policies.md: The trust boundary)."""

    fragment: str


@dataclass(frozen=True, slots=True)
class PutBack:
    """Accepted; the controllers put it back (Trainer suspends the JobSet from its TrainJob,
    JobSet its Jobs) before any execution printed."""


@dataclass(frozen=True, slots=True)
class OpeningRefused:
    """Accepted; the opening a controller then makes (Kueue's) is refused with this rule, and
    nothing runs."""

    rule: str


@dataclass(frozen=True, slots=True)
class FromCopy:
    """An edit of the runtime the job names. Where the job has a runtime snapshot (Trainer
    v2.3.0, found on the cluster) it is built from that copy, taken before the edit: the edit
    decides nothing, the job is released and R rises, the audit exits 0. Where it has none
    (v2.2.1 builds from the runtime itself): `otherwise`, after the cell's follow-up."""

    otherwise: Flagged


@dataclass(frozen=True, slots=True)
class KeptInUse:
    """The runtime the job names deleted. Where Trainer keeps a finalizer on a runtime its jobs
    use (v2.2.1, found on the cluster: the runtime is still there, being deleted), the job is
    built from it as start checked it: the deletion decides nothing, the job is released and R
    rises, the audit exits 0. Where it is gone (v2.3.0 keeps no finalizer): `otherwise`, after
    the cell's follow-up."""

    otherwise: Blocked


@dataclass(frozen=True, slots=True)
class CopiedAgain:
    """Accepted, and Trainer, which watches the snapshot it owns, takes its own copy of the
    runtime again as soon as the member's delete lands, over her copy where hers came first (its
    apply forces its fields): the job is built from what start checked, and neither the audit
    nor the auditor has anything to flag. Where her copy outlasts Trainer's, it is flagged."""


@dataclass(frozen=True, slots=True)
class Unflagged:
    """Accepted, and neither the audit nor the auditor flags it: a record forged with the value
    the audit itself writes, which bounds R no lower than the earned one."""


Outcome = (
    Unflagged
    | Refused
    | Flagged
    | FlaggedByTheAuditor
    | RaisedR
    | Blocked
    | PutBack
    | OpeningRefused
    | FromCopy
    | KeptInUse
    | CopiedAgain
)


@dataclass(frozen=True, slots=True)
class Ran:
    """One execution: its pod, when the pod was made, the R its process printed, and its slot
    (Job and completion index: one pod per execution of a rank)."""

    uid: str
    created: str
    r: int
    slot: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """The job under attack, the attacker's client, and the test's own."""

    namespace: str
    name: str
    actor: client.ApiClient
    admin: client.ApiClient
    step: Step
    before: list[Ran] = field(default_factory=list)  # the executions before the attack
    refusals: list[str] = field(default_factory=list)  # what the follow-up was refused
    check: str = ""  # the dispatch AdmissionCheck of the job's ClusterQueue (stage queued)
    flags: tuple[str, ...] = ()  # the start request the job was made from
    kueue_log: Path | None = None

    @property
    def seen(self) -> set[str]:
        return {e.uid for e in self.before}

    def history(self) -> list[int]:
        """The R of every execution, before the attack (its pods may be gone) and since."""
        ran = {e.uid: e for e in [*self.before, *executions(self)]}
        return [e.r for e in sorted(ran.values(), key=lambda e: (e.created, e.uid))]

    def repeated(self) -> bool:
        """Whether an execution printed an R that an earlier one of its slot printed."""
        ran = {e.uid: e for e in [*self.before, *executions(self)]}
        printed: dict[str, list[int]] = {}
        for e in sorted(ran.values(), key=lambda e: (e.created, e.uid)):
            printed.setdefault(e.slot, []).append(e.r)
        return any(rs != sorted(set(rs)) for rs in printed.values())

    def trainer_job(self) -> dict[str, Any]:
        """The trainer child Job JobSet made (the namespace holds this one TrainJob)."""

        def made() -> dict[str, Any] | None:
            listed = as_dict(client.BatchV1Api(self.admin).list_namespaced_job(self.namespace))
            for job in listed["items"]:
                if job["metadata"]["labels"].get(wire.ANCESTOR_LABEL) == wire.ANCESTOR_TRAINER:
                    return dict(job)
            return None

        return wait_until(made, what=f"the trainer Job of {self.name}", timeout=DEADLINE)

    def trainer_pod(self) -> dict[str, Any]:
        """The live trainer pod (by its container, which no label edit changes)."""

        def running() -> dict[str, Any] | None:
            listed = as_dict(client.CoreV1Api(self.admin).list_namespaced_pod(self.namespace))
            for pod in listed["items"]:
                names = [c["name"] for c in pod["spec"]["containers"]]
                if wire.TRAINER_CONTAINER in names and not pod["metadata"].get("deletionTimestamp"):
                    return dict(pod)
            return None

        return wait_until(running, what=f"a live pod of {self.name}", timeout=DEADLINE)

    def trainjob(self) -> dict[str, Any]:
        return read_trainjob(client.CustomObjectsApi(self.admin), self.namespace, self.name)

    def stage(self, *args: str) -> int:
        """Run a step on the job as a pipeline stage does; its exit code."""
        run = run_stage(self.step, *args, "--namespace", self.namespace, "--name", self.name)
        return run.code


def executions(target: Target) -> list[Ran]:
    """Every execution in the namespace that printed, in the order their pods were made."""
    core = client.CoreV1Api(target.admin)
    ran = []
    for pod in as_dict(core.list_namespaced_pod(target.namespace))["items"]:
        meta = pod["metadata"]
        try:
            log = str(core.read_namespaced_pod_log(meta["name"], target.namespace))
        except ApiException:
            continue  # not started, or gone
        words = log.split()
        if len(words) >= 2 and words[0].isdigit():  # SHOW: "<DISPATCH_EPOCH> <DISPATCH_ATTEMPT>"
            labels = meta.get("labels") or {}
            slot = f"{labels.get(JOB_NAME_KEY)}/{labels.get(wire.COMPLETION_INDEX_KEY)}"
            r = int(words[0]) % 10**6
            ran.append(Ran(meta["uid"], meta["creationTimestamp"], r, slot))
    return sorted(ran, key=lambda e: (e.created, e.uid))


# --- the follow-ups: what comes after an accepted edit ------------------------------------


def _next_execution(target: Target) -> None:
    """Wait for an execution that began after the attack to print."""

    def began() -> bool | None:
        return any(e.uid not in target.seen for e in executions(target)) or None

    wait_until(began, what=f"a new execution of {target.name} to print", timeout=DEADLINE)


def _release(target: Target) -> None:
    """The pipeline's release of a held job: dispatch-unsuspend, then its execution."""
    assert target.stage("unsuspend") == 0
    _next_execution(target)


def _release_stops_at_the_jobset(target: Target) -> None:
    """Released, Trainer cannot carry the edited runtime into the JobSet (JobSet refuses the
    template change): the JobSet stays suspended and nothing runs, not even the first pod;
    unsuspend says so (exit 9), not taking its write for the opening."""
    core = client.CoreV1Api(target.admin)
    selector = "involvedObject.kind=TrainJob,reason=TrainJobResourcesCreationFailed"

    def failures() -> int:
        listed = core.list_namespaced_event(target.namespace, field_selector=selector)
        return sum(int(event.get("count") or 1) for event in as_dict(listed)["items"])

    before = failures()
    assert target.stage("unsuspend") == NotOpened.exit_code
    wait_until(
        lambda: failures() > before or None,
        what="Trainer to fail to write the edited runtime into the JobSet",
        timeout=DEADLINE,
    )
    jobset = as_dict(
        client.CustomObjectsApi(target.admin).get_namespaced_custom_object(
            *JOBSET, target.namespace, "jobsets", target.name
        )
    )
    assert jobset["spec"]["suspend"] is True
    assert as_dict(core.list_namespaced_pod(target.namespace))["items"] == []


def _has_snapshot(target: Target) -> bool:
    """Whether Trainer keeps a copy of the job's runtime (v2.3.0 does, v2.2.1 does not)."""
    name = f"{target.name}{wire.RUNTIME_SNAPSHOT_SUFFIX}"
    try:
        client.CoreV1Api(target.admin).read_namespaced_config_map(name, target.namespace)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def _kept_in_use(target: Target) -> bool:
    """Whether the deleted runtime is still there, being deleted: Trainer v2.2.1's finalizer
    keeps a runtime its jobs use (v2.3.0 keeps none)."""
    try:
        runtime = client.CustomObjectsApi(target.admin).get_namespaced_custom_object(
            *TRAINER, target.namespace, "trainingruntimes", LOCAL_RUNTIME
        )
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return bool(as_dict(runtime)["metadata"].get("deletionTimestamp"))


def _hold_and_release(target: Target) -> None:
    assert target.stage("hold") == 0
    wait_for_drained_jobset(target.admin, target.namespace, target.name)
    _release(target)


def _rerun_by_job_delete(target: Target) -> None:
    """The record gone, a rerun: the trainer Job deleted by hand, JobSet makes it again.

    The actor then waits until the garbage collector has removed the earlier execution's
    pods: while one is left, the audit finds two pods in one slot (a CI run saw it do so).
    """
    _delete_job(target)
    _next_execution(target)

    def earlier_gone() -> bool | None:
        listed = as_dict(client.CoreV1Api(target.admin).list_namespaced_pod(target.namespace))
        return not any(pod["metadata"]["uid"] in target.seen for pod in listed["items"]) or None

    wait_until(earlier_gone, what=f"the earlier pods of {target.name} to go", timeout=DEADLINE)


def _put_back_then_rerun(target: Target) -> None:
    """The auditor puts the erased execution record back; the rerun by a Job deleted by hand
    then repeats the R it holds."""

    def put_back() -> bool | None:
        annotations = target.trainjob()["metadata"].get("annotations") or {}
        return wire.LAST_EXECUTION_ANNOTATION in annotations or None

    wait_until(put_back, what=f"the auditor to put {target.name}'s record back", timeout=DEADLINE)
    _rerun_by_job_delete(target)


def _rerun_by_job_suspend(target: Target) -> None:
    """A rerun: the trainer Job suspended by hand, which JobSet resumes with a new pod."""
    _suspend_job(target)
    _next_execution(target)


def _opening_refused_to_kueue(target: Target) -> None:
    """Kueue admits the Workload and opens the TrainJob; the guard refuses that opening (its
    refusal is in Kueue's log) and the job stays suspended."""
    log = target.kueue_log
    assert log is not None, "Kueue's log of the local control plane"

    def refused() -> bool | None:
        return (
            any(
                target.name in line and "dispatch-k8s guard open-after-raise:" in line
                for line in log.read_text().splitlines()
            )
            or None
        )

    wait_until(refused, what=f"Kueue's opening of {target.name} to be refused", timeout=DEADLINE)
    assert target.trainjob()["spec"]["suspend"] is True


def _put_back(target: Target) -> None:
    """Trainer suspends the JobSet again from its TrainJob, JobSet its Jobs; no trainer pod
    is left running."""
    custom = client.CustomObjectsApi(target.admin)
    batch, core = client.BatchV1Api(target.admin), client.CoreV1Api(target.admin)

    def suspended() -> bool | None:
        jobset = as_dict(
            custom.get_namespaced_custom_object(*JOBSET, target.namespace, "jobsets", target.name)
        )
        jobs = as_dict(batch.list_namespaced_job(target.namespace))["items"]
        pods = as_dict(core.list_namespaced_pod(target.namespace))["items"]
        held = jobset["spec"].get("suspend") is True and all(j["spec"].get("suspend") for j in jobs)
        return (held and not pods) or None

    wait_until(suspended, what=f"{target.name}'s JobSet and Jobs suspended again", timeout=DEADLINE)


def _release_refused(target: Target) -> None:
    """What would come next: the pipeline's release, which must not open the job."""
    run = run_stage(
        target.step, "unsuspend", "--namespace", target.namespace, "--name", target.name
    )
    assert run.code == 6, run.error
    target.refusals.append(run.error)


def _release_refused_as_flagged(target: Target) -> None:
    """The auditor beside flags the job before anyone opens it (the cause is the cell's to
    judge); the pipeline's release then refuses it (dispatch-unsuspend exits 7: a person
    decides), and nothing runs."""
    _flagged_by_the_auditor(target, target.name, "")
    run = run_stage(
        target.step, "unsuspend", "--namespace", target.namespace, "--name", target.name
    )
    assert run.code == 7, run.error
    assert target.trainjob()["spec"]["suspend"] is True
    fresh = [e.r for e in executions(target) if e.uid not in target.seen]
    assert fresh == [], f"printed R {fresh} after the release was refused"


def _gone_or_rerun(target: Target) -> None:
    """The deleted pod is gone, and whatever JobSet does next has printed (or nothing runs)."""
    core = client.CoreV1Api(target.admin)

    def settled() -> bool | None:
        live = [
            p
            for p in as_dict(core.list_namespaced_pod(target.namespace))["items"]
            if p["metadata"]["uid"] in target.seen
        ]
        if live:
            return None
        fresh = [e for e in executions(target) if e.uid not in target.seen]
        pods = as_dict(core.list_namespaced_pod(target.namespace))["items"]
        return bool(fresh) or not pods or None

    wait_until(
        settled, what=f"{target.name}'s deleted pod to be replaced or gone", timeout=DEADLINE
    )


# --- edits: the TrainJob ------------------------------------------------------------------


def _dry_run_output(target: Target) -> dict[str, Any]:
    """What `dispatch-start --dry-run=client` prints for the job's request, with the runtime
    file a person would give it (the cluster's runtime, as `kubectl get -o json` shows it)."""
    runtime = client.CustomObjectsApi(target.admin).get_cluster_custom_object(
        *TRAINER, "clustertrainingruntimes", NODE_RUNTIME
    )
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "runtime.json"
        path.write_text(json.dumps(runtime))
        printed = target.step("start", "--dry-run=client", f"--runtime-file={path}", *target.flags)
    assert printed.code == 0, printed.error
    return printed.result


def _remake_from_dry_run(target: Target) -> None:
    """Deleted, then made again from start's dry-run output: `dispatch-start --dry-run=client
    <request> | kubectl create -f -`, which begins A again at 0."""
    custom = client.CustomObjectsApi(target.actor)
    custom.delete_namespaced_custom_object(*TRAINER, target.namespace, "trainjobs", target.name)

    def gone() -> bool | None:
        try:
            target.trainjob()
        except ApiException as e:
            return e.status == 404 or None
        return None

    wait_until(gone, what=f"TrainJob {target.name} to be deleted", timeout=DEADLINE)
    body = _dry_run_output(target)
    custom.create_namespaced_custom_object(*TRAINER, target.namespace, "trainjobs", body)


def _copy_forging(key: str, value: str) -> Callable[[Target], None]:
    """A copy of the live job (`kubectl get -o yaml`, its server fields taken out) under another
    name and job id, as start would make it for that job id, but for one record forged."""

    def edit(target: Target) -> None:
        body = target.trainjob()
        body.pop("status", None)
        meta = body["metadata"]
        body["metadata"] = {k: meta[k] for k in ("namespace", "labels", "annotations")}
        body["metadata"]["name"] = f"{target.name}{COPY}"
        annotations = body["metadata"]["annotations"]
        for record in COPIED_RECORDS:
            annotations.pop(record, None)
        annotations[wire.ADMISSION_FLOOR_ANNOTATION] = "0"
        annotations[wire.JOB_ID_ANNOTATION] = "copied"
        body["spec"]["suspend"] = True
        for env in body["spec"]["trainer"]["env"]:
            if env["name"] == wire.ENV_TOKEN_PREFIX:
                env["value"] = "copied." + env["value"].split(".", 1)[1]
        # Kueue's entry goes (its webhook adds it again: a second one is refused as a duplicate).
        body["spec"]["runtimePatches"] = [
            e for e in body["spec"]["runtimePatches"] if e["manager"] == wire.PATCH_MANAGER
        ]
        (ours,) = body["spec"]["runtimePatches"]
        for job in ours["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            pod_annotations = job["template"]["spec"]["template"]["metadata"]["annotations"]
            pod_annotations[wire.ADMISSION_ANNOTATION] = (
                value if key == wire.ADMISSION_ANNOTATION else "0"
            )
        if key != wire.ADMISSION_ANNOTATION:
            annotations[key] = value
        client.CustomObjectsApi(target.actor).create_namespaced_custom_object(
            *TRAINER, target.namespace, "trainjobs", body
        )

    return edit


COPY: Final = "-copy"  # the suffix of a copy's name
COPIED_RECORDS: Final = (
    wire.OPEN_UNTIL_GENERATION_ANNOTATION,
    wire.LAST_EXECUTION_ANNOTATION,
    wire.HIGHEST_RESTART_ANNOTATION,
    wire.JOBSET_UID_ANNOTATION,
    wire.RAISED_FOR_ANNOTATION,
)


def _replace_trainjob(target: Target, change: Callable[[dict[str, Any]], None]) -> None:
    edit_trainjob(client.CustomObjectsApi(target.actor), target.namespace, target.name, change)


def _patch_trainjob(target: Target, body: dict[str, Any]) -> None:
    client.CustomObjectsApi(target.actor).patch_namespaced_custom_object(
        *TRAINER, target.namespace, "trainjobs", target.name, body
    )


def _apply(target: Target, path: str, body: Mapping[str, Any]) -> None:
    """A server-side apply as ATTACKER, forced: it takes over fields another manager owns."""
    query = [("fieldManager", ATTACKER), ("force", "true")]
    kube.request(target.actor, "PATCH", path, query=query, body=body, content_type=kube.APPLY)


def _trainjob_path(target: Target) -> str:
    return (
        f"/apis/{wire.TRAINER_GROUP}/{wire.TRAINER_VERSION}/namespaces/{target.namespace}"
        f"/trainjobs/{target.name}"
    )


def _pod_template_patch(manager: str, job: str, pod_template: Mapping[str, Any]) -> dict[str, Any]:
    """A runtime-patch entry of `manager` for replicated job `job`."""
    replicated = {"name": job, "template": {"spec": {"template": pod_template}}}
    return {
        "manager": manager,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated]}}},
    }


def _open_trainjob_by_patch(target: Target) -> None:
    _patch_trainjob(target, {"spec": {"suspend": False}})


def _open_trainjob_by_update(target: Target) -> None:
    _replace_trainjob(target, lambda job: job["spec"].update(suspend=False))


def _take_over_our_a(target: Target) -> None:
    """Our entry's A applied as 0 by another manager, forced."""
    entry = _pod_template_patch(
        wire.PATCH_MANAGER,
        "node",
        {"metadata": {"annotations": {wire.ADMISSION_ANNOTATION: "0"}}},
    )
    body = {
        "apiVersion": f"{wire.TRAINER_GROUP}/{wire.TRAINER_VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": target.name},
        "spec": {"runtimePatches": [entry]},
    }
    _apply(target, _trainjob_path(target), body)


def _annotate_trainjob(**annotations: str | None) -> Callable[[Target], None]:
    def edit(target: Target) -> None:
        _patch_trainjob(target, {"metadata": {"annotations": annotations}})

    return edit


def _remove_annotation_by_update(key: str) -> Callable[[Target], None]:
    def edit(target: Target) -> None:
        _replace_trainjob(target, lambda job: job["metadata"]["annotations"].pop(key))

    return edit


def _change_start_record(target: Target) -> None:
    def change(job: dict[str, Any]) -> None:
        job["metadata"]["annotations"][wire.JOB_ID_ANNOTATION] = "another-job"

    _replace_trainjob(target, change)


def _rename_patch_job(target: Target) -> None:
    """Our entry moved from the trainer job to the other one (the shape of an MPI runtime)."""

    def change(job: dict[str, Any]) -> None:
        for entry in job["spec"]["runtimePatches"]:
            if entry["manager"] == wire.PATCH_MANAGER:
                jobs = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
                jobs[0]["name"] = SIDE_JOB

    _replace_trainjob(target, change)


# --- edits: other runtime-patch entries ---------------------------------------------------


def _second_entry_sets_a(target: Target) -> None:
    custom = client.CustomObjectsApi(target.actor)
    add_foreign_admission_entry(custom, target.namespace, target.name, admission="700")


def _entry_sets_dispatch_env(target: Target) -> None:
    """An entry whose init container carries a DISPATCH_ variable (Trainer's webhook refuses
    env on the trainer container itself in a patch)."""
    init = [{"name": "tweak", "env": [{"name": wire.ENV_ADMISSION, "value": "700"}]}]
    entry = _pod_template_patch(ATTACKER, "node", {"spec": {"initContainers": init}})
    body = {
        "apiVersion": f"{wire.TRAINER_GROUP}/{wire.TRAINER_VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": target.name},
        "spec": {"runtimePatches": [entry]},
    }
    _apply(target, _trainjob_path(target), body)


def _entry_sets_j(target: Target) -> None:
    entry = _pod_template_patch(
        ATTACKER, "node", {"metadata": {"labels": {wire.RESTART_ATTEMPT_KEY: "500"}}}
    )
    _replace_trainjob(target, lambda job: job["spec"]["runtimePatches"].append(entry))


# --- edits: the runtime -------------------------------------------------------------------


def _runtime_api(target: Target) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(target.actor)


def _runtime_env(target: Target) -> None:
    """A DISPATCH_ variable added to the trainer container of the runtime the job names."""

    def add_env(runtime: dict[str, Any]) -> None:
        container = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
            "template"
        ]["spec"]["containers"][0]
        container["env"] = [{"name": wire.ENV_RESTART, "value": "500"}]

    where = (target.namespace, "trainingruntimes", LOCAL_RUNTIME)
    edit_object(_runtime_api(target), TRAINER, where, add_env)


def _runtime_backoff(target: Target) -> None:
    """The runtime's trainer Job given pod retries: a retried pod would rerun the execution
    under the same A and J."""

    def retried(runtime: dict[str, Any]) -> None:
        trainer_job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]
        trainer_job["spec"]["backoffLimit"] = 2

    where = (target.namespace, "trainingruntimes", LOCAL_RUNTIME)
    edit_object(_runtime_api(target), TRAINER, where, retried)


def _runtime_command(target: Target) -> None:
    """A command added to the runtime's trainer container (a JSON patch)."""
    container = "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/containers/0"
    edit = [{"op": "add", "path": f"{container}/command", "value": ["/bin/sh", "-c", "echo 0 0"]}]
    path = (
        f"/apis/{wire.TRAINER_GROUP}/{wire.TRAINER_VERSION}/namespaces/{target.namespace}"
        f"/trainingruntimes/{LOCAL_RUNTIME}"
    )
    kube.request(target.actor, "PATCH", path, body=edit, content_type="application/json-patch+json")


def _delete_runtime(target: Target) -> None:
    """The runtime the job names deleted. Where Trainer takes no snapshot (v2.2.1), once its
    finalizer marks the runtime in use, as it does a second after the job is made: a runtime
    that serves jobs is deleted as one."""
    if not _has_snapshot(target):

        def in_use() -> bool | None:
            runtime = _runtime_api(target).get_namespaced_custom_object(
                *TRAINER, target.namespace, "trainingruntimes", LOCAL_RUNTIME
            )
            return bool(as_dict(runtime)["metadata"].get("finalizers")) or None

        wait_until(in_use, what=f"Trainer's finalizer on {LOCAL_RUNTIME}", timeout=DEADLINE)
    _runtime_api(target).delete_namespaced_custom_object(
        *TRAINER, target.namespace, "trainingruntimes", LOCAL_RUNTIME
    )


# --- edits: the runtime snapshot (Trainer v2.3.0) -----------------------------------------


def _snapshot_name(target: Target) -> str:
    return f"{target.name}{wire.RUNTIME_SNAPSHOT_SUFFIX}"


def _retried(target: Target) -> str:
    """The job's runtime snapshot with the trainer Job given pod retries: a failed rank would be
    made again under the same A and J."""
    taken = client.CoreV1Api(target.admin).read_namespaced_config_map(
        _snapshot_name(target), target.namespace
    )
    original = str(as_dict(taken)["data"][wire.RUNTIME_SNAPSHOT_KEY])
    retried = original.replace("backoffLimit: 0", "backoffLimit: 2")
    assert retried != original, original
    return retried


def _edit_snapshot(target: Target) -> None:
    body = {"data": {wire.RUNTIME_SNAPSHOT_KEY: _retried(target)}}
    client.CoreV1Api(target.actor).patch_namespaced_config_map(
        _snapshot_name(target), target.namespace, body
    )


def _delete_snapshot_after_runtime_edit(target: Target) -> None:
    """The team's runtime given pod retries (no policy guards it: no object tells which jobs a
    runtime serves), then the snapshot deleted, so that Trainer copies the edited runtime."""
    _runtime_backoff(target)
    client.CoreV1Api(target.actor).delete_namespaced_config_map(
        _snapshot_name(target), target.namespace
    )


def _replace_snapshot(target: Target) -> None:
    """The snapshot deleted and made again by the member: her copy, with pod retries, under its
    name and controlled by the TrainJob, as Trainer's own is. Trainer takes a new copy of its
    own at its next reconcile of the job: where it came first, she deletes that one too."""
    retried = _retried(target)
    core = client.CoreV1Api(target.actor)
    owner = client.V1OwnerReference(
        api_version=f"{wire.TRAINER_GROUP}/{wire.TRAINER_VERSION}",
        kind="TrainJob",
        name=target.name,
        uid=target.trainjob()["metadata"]["uid"],
        controller=True,
    )
    hers = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=_snapshot_name(target), owner_references=[owner]),
        data={wire.RUNTIME_SNAPSHOT_KEY: retried},
    )

    def replaced() -> bool | None:
        try:
            core.delete_namespaced_config_map(_snapshot_name(target), target.namespace)
        except ApiException as e:
            if e.status != 404:  # gone already: hers is made next
                raise
        try:
            core.create_namespaced_config_map(target.namespace, hers)
        except ApiException as e:
            if e.status == 409:  # Trainer's new copy came first
                return None
            raise
        return True

    wait_until(replaced, what=f"the member's copy of {target.name}'s runtime", timeout=DEADLINE)


# --- edits: the Workload -----------------------------------------------------------------


def _workload(target: Target) -> dict[str, Any]:
    """The job's Workload, once Kueue has reserved quota and our check waits (Pending)."""
    custom = client.CustomObjectsApi(target.admin)
    uid = target.trainjob()["metadata"]["uid"]

    def reserved() -> dict[str, Any] | None:
        listed = as_dict(
            custom.list_namespaced_custom_object(
                *KUEUE,
                target.namespace,
                "workloads",
                label_selector=f"{wire.KUEUE_JOB_UID_LABEL}={uid}",
            )
        )
        for workload in listed["items"]:
            checks = workload.get("status", {}).get("admissionChecks") or []
            if any(c["name"] == target.check and c["state"] == "Pending" for c in checks):
                return dict(workload)
        return None

    return wait_until(
        reserved, what=f"{target.name}'s Workload to wait on its check", timeout=DEADLINE
    )


def _check_ready_without_a_raise(target: Target) -> None:
    """Our admission check set Ready, as dispatch-approve does, but without admit's raise of A."""
    name = _workload(target)["metadata"]["name"]
    entry = {
        "name": target.check,
        "state": "Ready",
        "message": "by hand",
        "lastTransitionTime": now(),
    }
    body = {
        "apiVersion": f"{wire.KUEUE_GROUP}/{wire.KUEUE_VERSION}",
        "kind": "Workload",
        "metadata": {"name": name},
        "status": {"admissionChecks": [entry]},
    }
    path = (
        f"/apis/{wire.KUEUE_GROUP}/{wire.KUEUE_VERSION}/namespaces/{target.namespace}"
        f"/workloads/{name}/status"
    )
    _apply(target, path, body)


# --- edits: the JobSet --------------------------------------------------------------------


def _jobsets(target: Target) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(target.actor)


def _open_jobset_by_patch(target: Target) -> None:
    _jobsets(target).patch_namespaced_custom_object(
        *JOBSET, target.namespace, "jobsets", target.name, {"spec": {"suspend": False}}
    )


def _open_jobset_by_apply(target: Target) -> None:
    body = {
        "apiVersion": f"{wire.JOBSET_GROUP}/{wire.JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": target.name},
        "spec": {"suspend": False},
    }
    path = (
        f"/apis/{wire.JOBSET_GROUP}/{wire.JOBSET_VERSION}/namespaces/{target.namespace}"
        f"/jobsets/{target.name}"
    )
    _apply(target, path, body)


def _rewrite_jobset_owner(target: Target) -> None:
    """The JobSet's owner reference pointed elsewhere: the garbage collector would delete it
    as an orphan and Trainer build a new one whose J starts again at 0."""

    def disowned(jobset: dict[str, Any]) -> None:
        jobset["metadata"]["ownerReferences"][0]["uid"] = "00000000-0000-0000-0000-000000000000"

    where = (target.namespace, "jobsets", target.name)
    old_uid = edit_object(_jobsets(target), JOBSET, where, disowned)["metadata"]["uid"]

    def rebuilt() -> bool | None:
        try:
            now = as_dict(
                client.CustomObjectsApi(target.admin).get_namespaced_custom_object(
                    *JOBSET, target.namespace, "jobsets", target.name
                )
            )
        except ApiException:
            return None
        return now["metadata"]["uid"] != old_uid or None

    wait_until(rebuilt, what="the JobSet to be replaced", timeout=DEADLINE)


def _label_jobset_j(target: Target) -> None:
    body = {"metadata": {"labels": {wire.RESTART_ATTEMPT_KEY: "500"}}}
    _jobsets(target).patch_namespaced_custom_object(
        *JOBSET, target.namespace, "jobsets", target.name, body
    )


def _delete_jobset(target: Target) -> None:
    _jobsets(target).delete_namespaced_custom_object(
        *JOBSET, target.namespace, "jobsets", target.name
    )


# --- edits: the child Jobs ----------------------------------------------------------------


def _patch_job(target: Target, body: Any) -> None:
    job = target.trainer_job()["metadata"]["name"]
    client.BatchV1Api(target.actor).patch_namespaced_job(job, target.namespace, body)


def _job_template_j(target: Target) -> None:
    """J set on a suspended child Job's pod template: its next pods would print it."""
    _patch_job(
        target, {"spec": {"template": {"metadata": {"labels": {wire.RESTART_ATTEMPT_KEY: "500"}}}}}
    )


def _job_template_j_by_apply(target: Target) -> None:
    job = target.trainer_job()["metadata"]["name"]
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job},
        "spec": {"template": {"metadata": {"labels": {wire.RESTART_ATTEMPT_KEY: "500"}}}},
    }
    _apply(target, f"/apis/batch/v1/namespaces/{target.namespace}/jobs/{job}", body)


def _orphan_job(target: Target) -> None:
    """A child Job taken from JobSet (its owner references removed): unsuspended, it runs."""
    _patch_job(target, [{"op": "remove", "path": "/metadata/ownerReferences"}])


def _open_job(target: Target) -> None:
    _patch_job(target, {"spec": {"suspend": False}})


def _suspend_job(target: Target) -> None:
    _patch_job(target, {"spec": {"suspend": True}})


def _scale_down_and_up(target: Target) -> None:
    """Rank 1 scaled away (parallelism and completions 2 -> 1, in tandem as an Indexed Job
    requires) and back: the Job controller removes its pod without failing the Job (no JobSet
    restart, J stays), then makes it again from the same template."""
    job = target.trainer_job()["metadata"]["name"]

    def both_printed() -> list[Ran] | None:
        ran = executions(target)
        return ran if len({e.slot for e in ran}) == 2 else None

    ranks = wait_until(both_printed, what=f"both ranks of Job {job} to print", timeout=DEADLINE)
    target.before.extend(e for e in ranks if e.uid not in target.seen)  # what the rerun repeats
    _patch_job(target, {"spec": {"parallelism": 1, "completions": 1}})
    core = client.CoreV1Api(target.admin)
    selector = f"{JOB_NAME_KEY}={job},{wire.COMPLETION_INDEX_KEY}=1"

    def rank_1_gone() -> bool | None:
        listed = as_dict(core.list_namespaced_pod(target.namespace, label_selector=selector))
        return not listed["items"] or None

    wait_until(rank_1_gone, what=f"rank 1 of Job {job} to be removed", timeout=DEADLINE)
    _patch_job(target, {"spec": {"parallelism": 2, "completions": 2}})


def _retry_failed_ranks(target: Target) -> None:
    _patch_job(target, {"spec": {"backoffLimit": 2}})


def _delete_job(target: Target) -> None:
    job = target.trainer_job()["metadata"]["name"]
    client.BatchV1Api(target.actor).delete_namespaced_job(
        job,
        target.namespace,
        propagation_policy="Background",  # as kubectl deletes
    )


# --- edits: the pods ----------------------------------------------------------------------


def _patch_pod(target: Target, body: Any) -> None:
    pod = target.trainer_pod()["metadata"]["name"]
    client.CoreV1Api(target.actor).patch_namespaced_pod(pod, target.namespace, body)


def _hide_pod(target: Target) -> None:
    """The pod taken out of label selectors (keep-pod-admission matched by label once)."""
    _patch_pod(target, {"metadata": {"labels": {wire.JOBSET_NAME_KEY: None}}})


def _change_pod_a(target: Target) -> None:
    _patch_pod(target, {"metadata": {"annotations": {wire.ADMISSION_ANNOTATION: "9"}}})


def _pod_j_by_apply(target: Target) -> None:
    pod = target.trainer_pod()["metadata"]["name"]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod, "labels": {wire.RESTART_ATTEMPT_KEY: "500"}},
    }
    _apply(target, f"/api/v1/namespaces/{target.namespace}/pods/{pod}", body)


def _delete_pod(target: Target) -> None:
    pod = target.trainer_pod()["metadata"]["name"]
    client.CoreV1Api(target.actor).delete_namespaced_pod(pod, target.namespace)


# --- the matrix ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cell:
    """One attack: where (object, verb, actor), the case, its stage, the edit, and what each
    install must do; `then` is what comes after an accepted edit, before it is judged."""

    where: str  # "object verb actor"
    case: str
    stage: Stage
    edit: Callable[[Target], None]
    expect: Mapping[Install, Outcome]
    then: Callable[[Target], None] | Mapping[Install, Callable[[Target], None]] | None = None
    runtime: RuntimeShape = "cluster"
    audited: str = ""  # the suffix of the TrainJob judged: a copy's, where the edit makes one
    # `none` starts the auditor once the edit is made, not before the stage: the queued cell's
    # (the controller gates the Workload: it would raise A and approve before the attacker).
    auditor_after_edit: bool = False
    snapshot: bool = False  # edits Trainer's runtime snapshot: skipped where it takes none

    @property
    def actor(self) -> Actor:
        actor = self.where.split()[2]
        assert actor in ("member", "steps")
        return "member" if actor == "member" else "steps"

    @property
    def id(self) -> str:
        return "-".join([*self.where.split(), self.case])


def guarded(rule: str, *, none: Outcome) -> dict[Install, Outcome]:
    """Refused by `rule` wherever the guard is installed; `none` where nothing is."""
    return {"all": Refused(rule), "guard": Refused(rule), "none": none}


def everywhere(outcome: Outcome) -> dict[Install, Outcome]:
    return {"all": outcome, "guard": outcome, "none": outcome}


def raised_or(rule: str, *, none: Outcome) -> dict[Install, Outcome]:
    """An opening: raised where raise-on-open is installed, refused by the guard alone."""
    return {"all": RaisedR(last=2), "guard": Refused(rule), "none": none}


REPEATED: Final = "the job was opened again without a raise of A"
REMADE: Final = "was made again outside start"
FORGED_AT_CREATE: Final = {
    wire.ADMISSION_FLOOR_ANNOTATION: "1",
    wire.ADMISSION_ANNOTATION: "1",
    wire.OPEN_UNTIL_GENERATION_ANNOTATION: "999999",
    wire.LAST_EXECUTION_ANNOTATION: json.dumps({"pod": "forged", "r": 1, "slot": "pinned/0/0"}),
    wire.HIGHEST_RESTART_ANNOTATION: "0",
    wire.JOBSET_UID_ANNOTATION: "5f0c1a2e-0000-4000-8000-000000000009",
    wire.RAISED_FOR_ANNOTATION: "uid 2026-12-06T00:00:00Z",
}
# What detection alone (the audit, the auditor) says of each forged record: a raise's record
# on a job no raise was made on (core/rules/opening.py), else what the record contradicts.
UNEARNED: Final[Mapping[str, Outcome]] = {
    wire.ADMISSION_ANNOTATION: Flagged("holds A 1 in its runtime patch, but no"),
    wire.ADMISSION_FLOOR_ANNOTATION: Flagged(f"holds {wire.ADMISSION_FLOOR_ANNOTATION} 1, but no"),
    wire.OPEN_UNTIL_GENERATION_ANNOTATION: Flagged("999999 is past any generation a raise"),
    wire.JOBSET_UID_ANNOTATION: Flagged(
        f"is not the recorded {FORGED_AT_CREATE[wire.JOBSET_UID_ANNOTATION]}"
    ),
    # J 0 is what the audit itself records at first sight, raised or not: a forged 0 is an
    # earned one, and a higher one only raises A further.
    wire.HIGHEST_RESTART_ANNOTATION: Unflagged(),
}
RERUN: Final = "which the execution of pod UID"
ERASED_FLOOR: Final = f"{wire.ADMISSION_FLOOR_ANNOTATION} '1' was changed to '0'"
ERASED_HIGHEST_RESTART: Final = f"{wire.HIGHEST_RESTART_ANNOTATION} '0' was removed"
REPEATED_IN_SLOT: Final = "already had"  # an execution repeating the R its slot printed
RUNTIME_CHANGED: Final = f"TrainingRuntime {LOCAL_RUNTIME} changed since start checked it"
CHANGED: Final = "changed since start checked it"
SNAPSHOT_CHANGED: Final = f"Trainer builds the job from, {CHANGED}"
SNAPSHOT_STAGES: Final[tuple[Stage, ...]] = ("suspended", "running")
FOREIGN_A: Final = "(manager someone.example/tweaks) sets pod template metadata annotation"
CELLS: Final = [
    # The TrainJob made by hand: from start's dry-run output after a delete, or copied from a
    # live job with a record forged (under a new job id, so that only that record is wrong).
    Cell(
        "trainjob create member",
        "dry-run-output-after-delete",
        "running",
        _remake_from_dry_run,
        guarded("ledger-spent", none=Flagged(REMADE)),
        then=_release_refused_as_flagged,
    ),
    *(
        Cell(
            "trainjob create member",
            f"copy-forging-{key.split('/')[1]}",
            "running",
            _copy_forging(key, value),
            guarded("create-initial", none=UNEARNED.get(key, Flagged(f"holds {key}, but no"))),
            audited=COPY,
        )
        for key, value in FORGED_AT_CREATE.items()
    ),
    # The TrainJob: a release by hand, its records, our runtime patch.
    Cell(
        "trainjob patch member",
        "release-by-hand",
        "held",
        _open_trainjob_by_patch,
        raised_or("open-after-raise", none=Flagged(REPEATED)),
        then=_next_execution,
    ),
    Cell(
        "trainjob update steps",
        "release-by-hand",
        "held",
        _open_trainjob_by_update,
        raised_or("open-after-raise", none=Flagged(REPEATED)),
        then=_next_execution,
    ),
    Cell(
        "trainjob ssa-force member",
        "take-over-our-a",
        "held",
        _take_over_our_a,
        guarded("keep-admission", none=Flagged("is 0, below the admission floor 1")),
    ),
    Cell(
        "trainjob annotate member",
        "lower-floor",
        "held",
        _annotate_trainjob(**{wire.ADMISSION_FLOOR_ANNOTATION: "0"}),
        guarded("keep-floor", none=FlaggedByTheAuditor(ERASED_FLOOR)),
        then=_release_refused_as_flagged,
    ),
    Cell(
        "trainjob annotate member",
        "remove-last-execution-then-rerun",
        "running",
        _annotate_trainjob(**{wire.LAST_EXECUTION_ANNOTATION: None}),
        guarded("keep-last-execution", none=Flagged(REPEATED_IN_SLOT)),
        then=_put_back_then_rerun,
    ),
    Cell(
        "trainjob update steps",
        "remove-highest-restart",
        "running",
        _remove_annotation_by_update(wire.HIGHEST_RESTART_ANNOTATION),
        guarded("keep-highest-restart", none=FlaggedByTheAuditor(ERASED_HIGHEST_RESTART)),
    ),
    Cell(
        "trainjob update steps",
        "change-start-record",
        "running",
        _change_start_record,
        guarded("keep-start-record", none=RaisedR(last=2)),
        then=_hold_and_release,
    ),
    Cell(
        "trainjob update steps",
        "rename-patch-job",
        "suspended",
        _rename_patch_job,
        guarded("keep-patch-jobs", none=Flagged("not the trainer replicated job node")),
        runtime="two-jobs",
    ),
    # Other runtime-patch entries on the TrainJob.
    Cell(
        "patch-entry patch member",
        "sets-a",
        "suspended",
        _second_entry_sets_a,
        guarded("foreign-patch-admission", none=Flagged(FOREIGN_A)),
    ),
    Cell(
        "patch-entry ssa-force member",
        "sets-dispatch-env",
        "suspended",
        _entry_sets_dispatch_env,
        guarded("patch-dispatch-env", none=Flagged(f"env {wire.ENV_ADMISSION} of container tweak")),
    ),
    Cell(
        "patch-entry update steps",
        "sets-j",
        "suspended",
        _entry_sets_j,
        guarded("patch-jobset-keys", none=Flagged(f"metadata label {wire.RESTART_ATTEMPT_KEY}")),
    ),
    # The runtime the job names: no policy can tell which TrainJobs a runtime serves; the
    # audit compares it with the one start checked.
    Cell(
        "runtime update member",
        "dispatch-env",
        "suspended",
        _runtime_env,
        everywhere(FromCopy(Flagged(RUNTIME_CHANGED))),
        runtime="namespaced",
    ),
    Cell(
        "runtime update member",
        "backoff-limit",
        "suspended",
        _runtime_backoff,
        everywhere(FromCopy(Flagged(RUNTIME_CHANGED))),
        # Trainer v2.2.1: the auditor beside (none) flags the edit before the release.
        then={
            "all": _release_stops_at_the_jobset,
            "guard": _release_stops_at_the_jobset,
            "none": _release_refused_as_flagged,
        },
        runtime="namespaced",
    ),
    Cell(
        "runtime patch member",
        "trainer-command",
        "suspended",
        _runtime_command,
        everywhere(FromCopy(Flagged(RUNTIME_CHANGED))),
        runtime="namespaced",
    ),
    Cell(
        "runtime delete member",
        "delete",
        "suspended",
        _delete_runtime,
        everywhere(
            KeptInUse(
                Blocked(("must be created before the TrainJob", f"'{LOCAL_RUNTIME}' not found"))
            )
        ),
        then=_release_refused,
        runtime="namespaced",
    ),
    # Trainer v2.3.0's copy of the runtime, what the JobSet is built from.
    *(
        cell
        for stage in SNAPSHOT_STAGES
        for cell in (
            Cell(
                "snapshot patch member",
                f"backoff-limit-{stage}",
                stage,
                _edit_snapshot,
                guarded("snapshot-change", none=Flagged(SNAPSHOT_CHANGED)),
                snapshot=True,
            ),
            Cell(
                "snapshot delete member",
                f"after-runtime-edit-{stage}",
                stage,
                _delete_snapshot_after_runtime_edit,
                # Compared with the runtime until Trainer's new copy, then with that copy.
                guarded("snapshot-delete", none=Flagged(CHANGED)),
                runtime="namespaced",
                snapshot=True,
            ),
            Cell(
                "snapshot replace member",
                f"delete-and-create-{stage}",
                stage,
                _replace_snapshot,
                guarded("snapshot-delete", none=CopiedAgain()),
                snapshot=True,
            ),
        )
    ),
    # The Workload: the steps may write its status (dispatch-approve does).
    Cell(
        "workload-status ssa-force steps",
        "check-ready-without-a-raise",
        "queued",
        _check_ready_without_a_raise,
        {
            "all": RaisedR(last=1),
            "guard": OpeningRefused("open-after-raise"),
            "none": Flagged("R = A + J = 0 + 0 = 0"),
        },
        then={
            "all": _next_execution,
            "guard": _opening_refused_to_kueue,
            "none": _next_execution,
        },
        auditor_after_edit=True,
    ),
    # The JobSet.
    Cell(
        "jobset patch member",
        "open-by-hand",
        "suspended",
        _open_jobset_by_patch,
        guarded("jobset-suspend", none=PutBack()),
        then=_put_back,
    ),
    Cell(
        "jobset ssa-force member",
        "open-by-hand",
        "suspended",
        _open_jobset_by_apply,
        guarded("jobset-suspend", none=PutBack()),
        then=_put_back,
    ),
    Cell(
        "jobset update member",
        "rewrite-owner",
        "running",
        _rewrite_jobset_owner,
        guarded("jobset-owner", none=Flagged("is not the recorded")),
    ),
    Cell(
        "jobset label member",
        "label-j",
        "suspended",
        _label_jobset_j,
        guarded("jobset-identity", none=RaisedR(last=1)),
        then=_release,
    ),
    Cell(
        "jobset delete member",
        "delete",
        "running",
        _delete_jobset,
        guarded("keep-jobset", none=Flagged("is not the recorded")),
        then=_next_execution,
    ),
    # The child Jobs.
    Cell(
        "job patch member",
        "template-j",
        "suspended",
        _job_template_j,
        guarded("job-template-identity", none=Flagged("is 500, not the Job's own 0")),
    ),
    Cell(
        "job ssa-force member",
        "template-j",
        "suspended",
        _job_template_j_by_apply,
        guarded("job-template-identity", none=Flagged("is 500, not the Job's own 0")),
    ),
    Cell(
        "job patch member",
        "remove-owner",
        "suspended",
        _orphan_job,
        guarded("job-owner", none=Flagged("runs the trainer but no JobSet owns it")),
    ),
    Cell(
        "job suspend member",
        "open-by-hand",
        "suspended",
        _open_job,
        guarded("job-suspend", none=PutBack()),
        then=_put_back,
    ),
    Cell(
        "job suspend member",
        "suspend-running",
        "running",
        _suspend_job,
        guarded("job-suspend", none=Flagged(RERUN)),
        then=_next_execution,
    ),
    Cell(
        "job delete member",
        "delete",
        "running",
        _delete_job,
        guarded("keep-job", none=Flagged(RERUN)),
        then=_next_execution,
    ),
    # The pods.
    Cell(
        "pod label member",
        "hide-then-rerun",
        "running",
        _hide_pod,
        guarded("keep-pod-identity", none=Flagged(RERUN)),
        then=_rerun_by_job_suspend,
    ),
    Cell(
        "pod annotate member",
        "change-a",
        "running",
        _change_pod_a,
        guarded("keep-pod-admission", none=Flagged("runs with A = 9")),
    ),
    Cell(
        "pod ssa-force member",
        "set-j",
        "running",
        _pod_j_by_apply,
        guarded("keep-pod-identity", none=Flagged("runs with J = 500 but its Job")),
    ),
    Cell(
        "pod delete member",
        "delete",
        "running",
        _delete_pod,
        # Without the guard the running pod's deletion is a failure the Job counts (backoffLimit
        # 0): its Job fails, JobSet restarts it, and J rises. The guard refuses it anyway: a
        # pod deleted after it ran leaves the audit no pod to compare a rerun with (issue 44).
        guarded("pod-delete", none=RaisedR()),
        then=_gone_or_rerun,
    ),
    # The child Jobs' spec: how many ranks run, and whether a failed one is made again.
    Cell(
        "job patch member",
        "scale-down-up",
        "running",
        _scale_down_and_up,
        # The audit records the pod of every slot: rank 1 made again is found (issue 43).
        guarded("job-spec", none=Flagged("/0/1, which the execution of pod UID")),
        then=_next_execution,
        runtime="two-ranks",
    ),
    Cell(
        "job patch member",
        "backoff-limit",
        "suspended",
        _retry_failed_ranks,
        guarded("job-spec", none=Flagged("spec.backoffLimit: must be 0, not 2")),
    ),
]

# What RBAC does not allow an actor ("object verb actor"): a 403 naming no guard rule.
RBAC_CELLS: Final = [
    "trainjob patch steps",
    "trainjob delete steps",
    "runtime update steps",
    "jobset patch steps",
    "jobset delete steps",
    "job patch steps",
    "job delete steps",
    "pod patch steps",
    "pod delete steps",
    "workload update steps",
    "jobset-status patch member",
    "workload-status patch member",
    "cluster-runtime update member",
    "job scale member",
    "job scale steps",
]


def _said(outcome: Outcome) -> str:
    if isinstance(outcome, Refused):
        return f"refused {outcome.rule}"
    if isinstance(outcome, OpeningRefused):
        return f"its opening refused {outcome.rule}"
    if isinstance(outcome, RaisedR):
        return "R up" if outcome.last is None else f"R up, last {outcome.last}"
    if isinstance(outcome, FromCopy):
        return f"{_said(outcome.otherwise)} (v2.2.1); R up (v2.3.0: built from its copy)"
    if isinstance(outcome, KeptInUse):
        return f"{_said(outcome.otherwise)} (v2.3.0); R up (v2.2.1: kept by its finalizer)"
    if isinstance(outcome, Unflagged):
        return "not flagged (the audit's own record)"
    if isinstance(outcome, CopiedAgain):
        return "copied again by Trainer, not flagged (else flagged)"
    return {
        Flagged: "flagged",
        FlaggedByTheAuditor: "flagged by the auditor",
        Blocked: "blocked",
        PutBack: "put back",
    }[type(outcome)]


def matrix() -> str:
    """The matrix as the module's docstring lists it."""
    lines = []
    for cell in CELLS:
        said = {installed: _said(outcome) for installed, outcome in cell.expect.items()}
        if said["all"] == said["guard"] == said["none"]:
            verdict = f"every install: {said['all']}"
        elif said["all"] == said["guard"]:
            verdict = f"all, guard: {said['all']}; none: {said['none']}"
        else:
            verdict = "; ".join(f"{installed}: {said[installed]}" for installed in INSTALLS)
        lines.append(f"{cell.where}: {cell.case} ({cell.stage})\n    {verdict}")
    lines += [f"{where}: RBAC" for where in RBAC_CELLS]
    return "\n".join(lines)


INSTALLS: Final[tuple[Install, ...]] = ("all", "guard", "none")
MATRIX: Final = [
    pytest.param(
        cell, installed, marks=pytest.mark.policies(installed), id=f"{cell.id}-{installed}"
    )
    for cell in CELLS
    for installed in INSTALLS
    if installed in cell.expect
]


def refused(edit: Callable[[], object]) -> ApiException | None:
    """The API server's refusal of `edit`, or None when it was accepted."""
    try:
        edit()
    except ApiException as e:
        return e
    return None


def two_job_runtime(namespace: str) -> dict[str, Any]:
    """The node runtime with a second replicated job beside the trainer (as an MPI runtime's
    workers are), which does not carry the trainer label."""
    runtime = node_runtime()
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    side = copy.deepcopy(jobs[0])
    side["name"] = SIDE_JOB
    side["template"]["metadata"] = {}
    pod = side["template"]["spec"]["template"]["spec"]
    pod["containers"] = [
        {
            "name": SIDE_JOB,
            "image": pod["containers"][0]["image"],
            "command": ["/bin/sh", "-c", "sleep 3600"],
        }
    ]
    jobs.append(side)
    return {**runtime, "kind": "TrainingRuntime", "metadata": {"name": LOCAL_RUNTIME}}


def two_rank_runtime() -> dict[str, Any]:
    """The node runtime with two ranks in its trainer Job and no torch policy, whose port 29400
    is a host port under host networking: two ranks could not both run on the one node (and
    without it, Trainer takes the node count from the runtime, not from --num-nodes)."""
    runtime = {**node_runtime(), "kind": "TrainingRuntime", "metadata": {"name": LOCAL_RUNTIME}}
    runtime["spec"]["mlPolicy"] = {"numNodes": 2}
    trainer_job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    trainer_job.update(parallelism=2, completions=2)
    return runtime


def local_runtime(api: client.ApiClient, namespace: str, shape: RuntimeShape) -> None:
    """The namespace's TrainingRuntime, which the member may edit (a team's own runtime)."""
    if shape == "two-jobs":
        runtime = two_job_runtime(namespace)
    elif shape == "two-ranks":
        runtime = two_rank_runtime()
    else:
        runtime = {**node_runtime(), "kind": "TrainingRuntime", "metadata": {"name": LOCAL_RUNTIME}}
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        *TRAINER, namespace, "trainingruntimes", runtime
    )
    rbac = client.RbacAuthorizationV1Api(api)
    meta = client.V1ObjectMeta(name="team-runtimes")
    rule = client.V1PolicyRule(
        api_groups=[wire.TRAINER_GROUP],
        resources=["trainingruntimes"],
        verbs=["get", "list", "watch", "create", "update", "patch", "delete"],
    )
    rbac.create_namespaced_role(namespace, client.V1Role(metadata=meta, rules=[rule]))
    subject = client.RbacV1Subject(kind="ServiceAccount", name=MEMBER_NAME, namespace=namespace)
    role = client.V1RoleRef(
        api_group="rbac.authorization.k8s.io", kind="Role", name="team-runtimes"
    )
    rbac.create_namespaced_role_binding(
        namespace, client.V1RoleBinding(metadata=meta, role_ref=role, subjects=[subject])
    )


def prepare(target: Target, stage: Stage) -> None:
    """Bring the job to `stage`; remember the executions that ran before the attack."""
    if stage == "queued":
        _workload(target)
        return
    if stage == "suspended":
        target.trainer_job()  # JobSet has made the suspended Jobs the attacks edit
        return
    assert target.stage("unsuspend") == 0
    printed(client.CoreV1Api(target.admin), target.namespace, target.name, restart=0, admission=1)
    assert target.stage("audit") == 0, "a clean execution, recorded before the attack"
    if stage == "held":
        assert target.stage("hold") == 0
        wait_for_drained_jobset(target.admin, target.namespace, target.name)
    target.before.extend(executions(target))


@contextlib.contextmanager
def attacker(
    actor: Actor, member: client.ApiClient, request: pytest.FixtureRequest
) -> Iterator[client.ApiClient]:
    """The actor's client: the member's, or the steps' ServiceAccount's (installed on demand)."""
    if actor == "member":
        yield member
        return
    identity: StepIdentity = request.getfixturevalue("steps_identity")
    with contextlib.closing(identity.api_client()) as steps:
        yield steps


@pytest.mark.parametrize(("cell", "installed"), MATRIX)
def test_every_edit_on_the_path_is_refused_raised_or_flagged(
    cell: Cell,
    installed: Install,
    step: Step,
    namespace: str,
    real_node_runtime: str,
    api_client: client.ApiClient,
    member: client.ApiClient,
    request: pytest.FixtureRequest,
    control_plane: Cluster,
    tmp_path: Path,
) -> None:
    check = ""
    queue: list[str] = []
    if cell.stage == "queued":
        kueue: KueueSetup = request.getfixturevalue("kueue")
        kueue.install(cpu="1")
        check, queued = kueue.check, kueue.queued_request()
        queue = ["--queue", queued["queue"], "--resources-per-node", queued["resources_per_node"]]
    if cell.runtime == "cluster":
        flags = start_flags(namespace, real_node_runtime, *queue, train=RUNS, job_id=cell.case)
    else:
        local_runtime(api_client, namespace, cell.runtime)
        kind = ("--runtime-kind", "TrainingRuntime")
        flags = start_flags(namespace, LOCAL_RUNTIME, *kind, train=RUNS, job_id=cell.case)
    started = step("start", *flags)
    assert started.code == 0, started.error
    auditing = installed == "none"  # detection only: the auditor runs beside, as it ships

    def audit_beside() -> None:

        (auditor,) = beside.enter_context(
            replicas(control_plane.kubeconfig, namespace, tmp_path, "auditor")
        )
        wait_until(lambda: auditor.leading() or None, what="the auditor to lead", timeout=DEADLINE)

    with contextlib.ExitStack() as beside:
        if auditing and not cell.auditor_after_edit:
            audit_beside()
        with attacker(cell.actor, member, request) as actor:
            target = Target(
                namespace=namespace,
                name=started.result["name"],
                actor=actor,
                admin=api_client,
                step=step,
                check=check,
                flags=tuple(flags),
                kueue_log=control_plane.plane.logs["kueue"] if control_plane.plane else None,
            )
            prepare(target, cell.stage)
            if cell.snapshot and not _has_snapshot(target):
                pytest.skip("this Trainer builds from the runtime itself and takes no snapshot")
            refusal = refused(lambda: cell.edit(target))
        if auditing and cell.auditor_after_edit:
            audit_beside()
        outcome = cell.expect[installed]
        if isinstance(outcome, Refused):
            assert refusal is not None, f"{cell.id} was accepted where the guard is installed"
            assert refusal.status == 403, message(refusal)
            assert f"dispatch-k8s guard {outcome.rule}:" in message(refusal)
            return
        assert refusal is None, f"refused ({installed}): {message(refusal)}"
        custom = client.CustomObjectsApi(api_client)
        judged = f"{target.name}{cell.audited}"  # the TrainJob the audit and the auditor judge

        def not_flagged() -> None:  # by the auditor beside (none), which saw it all
            kept = read_trainjob(custom, namespace, judged)
            assert wire.FOREIGN_ANNOTATION not in kept["metadata"]["annotations"], kept

        if isinstance(outcome, FromCopy | KeptInUse):
            # The edit decides nothing where the job is still built from what start checked.
            if _has_snapshot(target) if isinstance(outcome, FromCopy) else _kept_in_use(target):
                _release(target)
                ran = target.history()
                assert ran == sorted(set(ran)), (
                    f"{cell.id} ({installed}): printed R {ran}, not rising"
                )
                audited = run_stage(step, "audit", "--namespace", namespace, "--name", target.name)
                assert audited.code == 0, audited.error
                not_flagged()
                return
            outcome = outcome.otherwise
        then = cell.then[installed] if isinstance(cell.then, Mapping) else cell.then
        if then is not None:
            then(target)
        ran = target.history()
        if isinstance(outcome, RaisedR):  # the follow-up waited for what ran next
            assert ran == sorted(set(ran)), f"{cell.id} ({installed}): printed R {ran}, not rising"
            if outcome.last is not None:
                assert ran[-1:] == [outcome.last], f"{cell.id} ({installed}): printed R {ran}"
            not_flagged()
            return
        if isinstance(outcome, PutBack | OpeningRefused):
            # Not judged by the flag: a pod made before the put-back is one the auditor flags.
            assert ran == [], f"{cell.id} ({installed}): printed R {ran}"
            return
        if isinstance(outcome, Blocked):
            assert any(f in r for f in outcome.fragments for r in target.refusals), target.refusals
            assert ran == [], f"{cell.id} ({installed}): printed R {ran}"
            not_flagged()
            return
        if isinstance(outcome, CopiedAgain):
            if _copied_again_or_flagged(target) == "flagged":
                audit = run_stage(step, "audit", "--namespace", namespace, "--name", judged)
                assert (audit.code, SNAPSHOT_CHANGED in audit.error) == (7, True), audit.error
                return
            audit = run_stage(step, "audit", "--namespace", namespace, "--name", judged)
            assert audit.code == 0, audit.error
            not_flagged()
            return
        if isinstance(outcome, Unflagged):
            audit = run_stage(step, "audit", "--namespace", namespace, "--name", judged)
            assert audit.code == 0, audit.error
            not_flagged()
            return
        if auditing:  # before dispatch-audit, which would flag it itself
            _flagged_by_the_auditor(target, judged, outcome.fragment)
        audit = run_stage(step, "audit", "--namespace", namespace, "--name", judged)
        if isinstance(outcome, FlaggedByTheAuditor):  # the record put back: nothing to find
            assert audit.code == 0, audit.error
            flag = read_trainjob(custom, namespace, judged)["metadata"]["annotations"]
            assert flag.get(wire.FOREIGN_ANNOTATION) == wire.FOREIGN, flag
            return
        assert audit.code == 7, (
            f"{cell.id} was accepted ({installed}) and not flagged: an execution could repeat R "
            f"(printed R {ran})"
        )
        assert outcome.fragment in audit.error, audit.error
        judged_job = read_trainjob(custom, namespace, judged)
        flag = judged_job["metadata"]["annotations"].get(wire.FOREIGN_ANNOTATION)
        assert flag == wire.FOREIGN


def _copied_again_or_flagged(target: Target) -> Literal["copied", "flagged"]:
    """Whether Trainer's copy of the runtime replaced the member's (her pod retries gone), or
    hers stayed and the auditor flagged the job for it."""

    def settled() -> Literal["copied", "flagged"] | None:
        taken = client.CoreV1Api(target.admin).read_namespaced_config_map(
            _snapshot_name(target), target.namespace
        )
        if "backoffLimit: 2" not in str(as_dict(taken)["data"][wire.RUNTIME_SNAPSHOT_KEY]):
            return "copied"
        annotations = target.trainjob()["metadata"].get("annotations") or {}
        cause = annotations.get(wire.FOREIGN_CAUSE_ANNOTATION, "")
        return "flagged" if SNAPSHOT_CHANGED in cause else None

    return wait_until(
        settled, what=f"Trainer to copy {target.name}'s runtime again", timeout=DEADLINE
    )


def _flagged_by_the_auditor(target: Target, name: str, fragment: str) -> None:
    """The admission controller's auditor flags TrainJob `name` with `fragment` in its cause."""

    def cause() -> str | None:
        job = read_trainjob(client.CustomObjectsApi(target.admin), target.namespace, name)
        found = (job["metadata"].get("annotations") or {}).get(wire.FOREIGN_CAUSE_ANNOTATION, "")
        return found if found and fragment in found else None

    wait_until(cause, what=f"the auditor to flag {name}: {fragment}", timeout=DEADLINE)


# --- what RBAC does not allow an actor: a 403 that names no guard rule ----------------------


def _scale_subresource(api: client.ApiClient, namespace: str, job: str) -> object:
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs/{job}/scale"
    body = {"spec": {"replicas": 1}}
    return kube.request(api, "PATCH", path, body=body, content_type=MERGE_PATCH)


def _rbac_edit(where: str, target: Target, job: str) -> Callable[[], object]:
    """The RBAC cell's edit on the started job's objects (named even where RBAC refuses first,
    so that an allowed edit would answer 200 or 404, not 403)."""
    api, namespace, name = target.actor, target.namespace, target.name
    custom, batch, core = (
        client.CustomObjectsApi(api),
        client.BatchV1Api(api),
        client.CoreV1Api(api),
    )
    opened = {"spec": {"suspend": False}}
    noted = {"metadata": {"labels": {"note": "x"}}}
    kueue = (wire.KUEUE_GROUP, wire.KUEUE_VERSION, namespace, "workloads", name)
    edits: dict[str, Callable[[], object]] = {
        "trainjob patch steps": lambda: custom.patch_namespaced_custom_object(
            *TRAINER, namespace, "trainjobs", name, opened
        ),
        "trainjob delete steps": lambda: custom.delete_namespaced_custom_object(
            *TRAINER, namespace, "trainjobs", name
        ),
        "runtime update steps": lambda: custom.patch_namespaced_custom_object(
            *TRAINER, namespace, "trainingruntimes", LOCAL_RUNTIME, noted
        ),
        "jobset patch steps": lambda: custom.patch_namespaced_custom_object(
            *JOBSET, namespace, "jobsets", name, opened
        ),
        "jobset delete steps": lambda: custom.delete_namespaced_custom_object(
            *JOBSET, namespace, "jobsets", name
        ),
        "job patch steps": lambda: batch.patch_namespaced_job(job, namespace, opened),
        "job delete steps": lambda: batch.delete_namespaced_job(job, namespace),
        "pod patch steps": lambda: core.patch_namespaced_pod(f"{job}-0", namespace, noted),
        "pod delete steps": lambda: core.delete_namespaced_pod(f"{job}-0", namespace),
        "workload update steps": lambda: custom.patch_namespaced_custom_object(*kueue, noted),
        "jobset-status patch member": lambda: custom.patch_namespaced_custom_object_status(
            *JOBSET, namespace, "jobsets", name, {"status": {"restarts": 5}}
        ),
        "workload-status patch member": lambda: custom.patch_namespaced_custom_object_status(
            *kueue, {"status": {}}
        ),
        "cluster-runtime update member": lambda: custom.patch_cluster_custom_object(
            *TRAINER, "clustertrainingruntimes", NODE_RUNTIME, noted
        ),
        # `kubectl scale job`: Kubernetes 1.36 serves no jobs/scale, and RBAC answers first.
        "job scale member": lambda: _scale_subresource(api, namespace, job),
        "job scale steps": lambda: _scale_subresource(api, namespace, job),
    }
    return edits[where]


@pytest.mark.parametrize("where", RBAC_CELLS, ids=[where.replace(" ", "-") for where in RBAC_CELLS])
def test_what_rbac_does_not_allow_is_refused_by_rbac(
    where: str,
    step: Step,
    namespace: str,
    real_node_runtime: str,
    api_client: client.ApiClient,
    member: client.ApiClient,
    request: pytest.FixtureRequest,
) -> None:
    started = step("start", *start_flags(namespace, real_node_runtime, train=RUNS, job_id="rbac"))
    assert started.code == 0, started.error
    local_runtime(api_client, namespace, "namespaced")  # the runtime "runtime update steps" edits
    actor: Actor = "steps" if where.endswith(" steps") else "member"
    with attacker(actor, member, request) as api:
        target = Target(
            namespace=namespace, name=started.result["name"], actor=api, admin=api_client, step=step
        )
        refusal = refused(_rbac_edit(where, target, target.trainer_job()["metadata"]["name"]))
    assert refusal is not None, f"{where} was allowed"
    text = message(refusal)
    assert refusal.status == 403, text
    assert "dispatch-k8s guard" not in text, text
    assert " cannot " in text, text  # RBAC's "User \"...\" cannot patch resource ..."


def test_the_docstring_lists_the_matrix() -> None:
    assert __doc__ is not None
    assert matrix() in __doc__, matrix()


@pytest.mark.parametrize(
    "installed", [pytest.param(i, marks=pytest.mark.policies(i), id=i) for i in INSTALLS]
)
def test_a_trainjob_deleted_after_it_ran_is_not_started_again_at_a_0(
    installed: Install,
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
