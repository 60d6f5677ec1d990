"""The audit of one TrainJob: its checks and trackers, fed the TrainJob's objects as read."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from dispatch_k8s.core.rules import ownership, shapes
from dispatch_k8s.core.rules.audit.checks import (
    allowed_at_start,
    check_admission,
    check_child_job,
    check_child_job_spec,
    check_foreign_patches,
    check_jobset_spec,
    check_restarted_in_place,
    check_runtime,
    counted_restarts,
    counter_or_none,
    counts_of,
    differs,
    has_started,
    is_live,
    patched_jobs,
    read_counter,
    trainer_jobs_of,
)
from dispatch_k8s.core.rules.audit.findings import Finding, FindingKind
from dispatch_k8s.core.rules.audit.record import Execution, Observed
from dispatch_k8s.core.rules.audit.trackers import ChildJobs, Executions, Restarts, Slots
from dispatch_k8s.core.rules.snapshot import Snapshot
from dispatch_k8s.core.rules.wire import (
    ADMISSION_ANNOTATION,
    ADMISSION_FLOOR_ANNOTATION,
    HIGHEST_RESTART_ANNOTATION,
    JOBSET_UID_ANNOTATION,
    JOBSET_UID_KEY,
    LAST_EXECUTION_ANNOTATION,
    PATCH_MANAGER,
    REPLICATED_JOB_NAME_KEY,
    RESTART_ATTEMPT_KEY,
)

_POD_ADMISSION: Final = f"template.spec.template.metadata.annotations['{ADMISSION_ANNOTATION}']"


class Unread:
    """The runtime was not read for this audit: nothing to compare."""


UNREAD: Final = Unread()


class JobAudit:
    """The audit of one TrainJob, fed its pods one at a time (so many jobs share one list).

    Built from the TrainJob, its JobSet and its Jobs as read; `see` takes each of its pods,
    `result` gives the findings and what the audit's one update records.
    """

    def __init__(
        self,
        trainjob: Mapping[str, Any],
        jobset: Mapping[str, Any] | None,
        *,
        runtime_now: Mapping[str, Any] | Snapshot | Unread | None = UNREAD,
        jobs: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        self.name = shapes.word(shapes.mapping(trainjob.get("metadata")).get("name"))
        annotations = shapes.annotations_of(trainjob)
        self.findings: list[Finding] = []
        self._recorded_uid = self._read_recorded_uid(annotations.get(JOBSET_UID_ANNOTATION))
        self._seen_uids: set[str] = set()  # one finding per foreign UID, however many pods
        if not isinstance(runtime_now, Unread):
            self.findings.extend(check_runtime(trainjob, runtime_now))
        allowed = allowed_at_start(trainjob, self.name)
        if isinstance(allowed, Finding):
            self.findings.append(allowed)
            allowed = frozenset()
        self.restarts = Restarts()
        if jobset is not None:
            self._check_uid(shapes.mapping(jobset.get("metadata")).get("uid"))
            self.restarts.see(shapes.mapping(jobset.get("status")).get("restarts"))
            self.findings.extend(check_jobset_spec(jobset, allowed))
        self._jobset = jobset
        self._jobs = ChildJobs(jobset)
        for job in jobs:
            self.findings.extend(check_child_job(job, allowed))
            self.findings.extend(check_child_job_spec(job, jobset))
            self.findings.extend(self._jobs.see(job))
        self.lineage = ownership.lineage_of(trainjob, jobset).with_jobs(self._jobs.all())
        self.findings.extend(check_foreign_patches(trainjob, self.name))
        self._floor = self._read_floor(annotations.get(ADMISSION_FLOOR_ANNOTATION))
        self._highest_recorded = counter_or_none(annotations.get(HIGHEST_RESTART_ANNOTATION))
        patched_jobs, patch_values = self._check_patch(trainjob)
        built_from = runtime_now.runtime if isinstance(runtime_now, Snapshot) else runtime_now
        trainer_jobs = trainer_jobs_of(
            jobset, built_from if isinstance(built_from, Mapping) else None
        )
        if trainer_jobs and patched_jobs and patched_jobs != trainer_jobs:
            self.findings.append(
                Finding(
                    kind=FindingKind.RUNTIME_PATCH,
                    reason=(
                        f"TrainJob {self.name}'s {PATCH_MANAGER} runtime patch names "
                        f"{', '.join(sorted(patched_jobs))}, not the trainer replicated job "
                        f"{', '.join(sorted(trainer_jobs))}: A is raised on pods that do not "
                        "run the trainer"
                    ),
                )
            )
        self._trainer_jobs = patched_jobs | trainer_jobs
        self._executions = Executions(self._read_execution(annotations))
        self._running = shapes.at(trainjob, "spec").get("suspend") is not True
        # The patch A every pod of a running job carries; None when the patch is not one value.
        self._patch_admission = next(iter(patch_values)) if len(patch_values) == 1 else None
        self._slots = Slots()

    def claims(self, pod: Mapping[str, Any]) -> bool:
        """The pod is one of this TrainJob's (by label, owner, or the trainer it runs)."""
        return self.lineage.claims_pod(pod)

    def _read_recorded_uid(self, recorded: Any) -> str | None:
        if recorded is not None and not (isinstance(recorded, str) and recorded):
            # A blanked record would let a replaced JobSet be recorded as if seen first.
            reason = (
                f"TrainJob {self.name} annotation {JOBSET_UID_ANNOTATION} is {recorded!r}, "
                "not a JobSet UID: the recorded UID was removed"
            )
            self.findings.append(Finding(kind=FindingKind.JOBSET_UID, reason=reason))
            return None
        return recorded

    def _read_execution(self, annotations: Mapping[str, Any]) -> Execution | None:
        recorded = annotations.get(LAST_EXECUTION_ANNOTATION)
        execution = Execution.parse(recorded)
        if recorded is not None and execution is None:
            # Unreadable, it would compare nothing: and the next record written would begin
            # again from whatever runs now, a repeat among it unseen.
            reason = (
                f"TrainJob {self.name} annotation {LAST_EXECUTION_ANNOTATION} is "
                f"{shapes.shown(recorded)}, not a record the audit writes: the executions it "
                "recorded cannot be compared"
            )
            self.findings.append(Finding(kind=FindingKind.REPEATED_R, reason=reason))
        return execution

    def _check_uid(self, uid: Any) -> None:
        recorded = self._recorded_uid
        if recorded is None or not isinstance(uid, str) or not uid:
            return  # nothing recorded yet, or no UID to compare (JobSet before v0.11)
        if uid == recorded or uid in self._seen_uids:
            return
        self._seen_uids.add(uid)
        reason = f"JobSet UID {uid} is not the recorded {recorded}: J may have been reset"
        self.findings.append(Finding(kind=FindingKind.JOBSET_UID, reason=reason))

    def _read_floor(self, value: Any) -> int | None:
        """The floor; without one a lowered A cannot be told (a garbage A still can)."""
        floor = read_counter(
            value,
            name=f"TrainJob {self.name} annotation {ADMISSION_FLOOR_ANNOTATION}",
            kind=FindingKind.ADMISSION_FLOOR,
        )
        if isinstance(floor, Finding):
            self.findings.append(floor)
            return None
        return floor

    def _check_patch(self, trainjob: Mapping[str, Any]) -> tuple[frozenset[str], set[str]]:
        """Check A in this project's patch; return the jobs it names and the A values it holds."""
        named: set[str] = set()
        values: set[str] = set()
        for path, replicated_job in patched_jobs(trainjob, self.name, self.findings):
            named.add(shapes.word(replicated_job.get("name")))
            pod_meta = shapes.at(replicated_job, "template", "spec", "template", "metadata")
            value = shapes.mapping(pod_meta.get("annotations")).get(ADMISSION_ANNOTATION)
            values.add(value if isinstance(value, str) else repr(value))  # any shape hashes
            self.findings.extend(
                check_admission(
                    value,
                    name=f"TrainJob {self.name} {path}.{_POD_ADMISSION}",
                    floor=self._floor,
                    kind=FindingKind.RUNTIME_PATCH,
                )
            )
        return frozenset(named), values

    def see(self, pod: Mapping[str, Any]) -> None:
        """Take one of the TrainJob's pods (live or not) into the audit."""
        labels = shapes.at(pod, "metadata", "labels")
        self.restarts.see(labels.get(RESTART_ATTEMPT_KEY))  # finished pods ran executions too
        self._slots.see(pod)  # every pod: an execution rerun in the same slot may have finished
        if not self._runs_trainer(pod):
            return  # initializers and MPI workers never carry A: the trainer jobs do
        pod_name = shapes.word(shapes.mapping(pod.get("metadata")).get("name"))
        if not is_live(pod):
            if has_started(pod):
                self.findings.extend(self._check_zero_r(pod, pod_name))
            return  # terminating or finished: no execution runs with its values any more
        self._check_uid(labels.get(JOBSET_UID_KEY))
        where = f"pod {pod_name} annotation {ADMISSION_ANNOTATION}"
        value = shapes.annotations_of(pod).get(ADMISSION_ANNOTATION)
        found = list(
            check_admission(value, name=where, floor=self._floor, kind=FindingKind.POD_ADMISSION)
        )
        self.findings.extend(found)
        if not found and isinstance(value, str):  # a canonical decimal, at or above the floor
            self.findings.extend(self._executions.see(pod, admission=int(value)))
            self.findings.extend(self._check_stale(pod_name, value))
            self.findings.extend(self._check_zero_r(pod, pod_name))
            self.findings.extend(self._check_restart_below(pod, pod_name, int(value)))
        self.findings.extend(self._jobs.check_pod(pod, pod_name))
        self.findings.extend(check_restarted_in_place(pod, pod_name))
        if ownership.pod_token(pod.get("spec")) is not None and not ownership.owned_by_kind(
            pod, "Job"
        ):
            self.findings.append(
                Finding(
                    kind=FindingKind.ORPHANED,
                    reason=(
                        f"pod {pod_name} runs TrainJob {self.name}'s trainer but no Job owns "
                        "it: JobSet does not count its executions in J"
                    ),
                )
            )

    def _runs_trainer(self, pod: Mapping[str, Any]) -> bool:
        if ownership.pod_token(pod.get("spec")) is not None:
            return True  # the trainer's env, which only trainer-labelled jobs get
        replicated_job_name = shapes.labels_of(pod).get(REPLICATED_JOB_NAME_KEY)
        # A pod without the label is checked: JobSet stamps it on every pod it creates.
        return not isinstance(replicated_job_name, str) or replicated_job_name in self._trainer_jobs

    def _check_stale(self, pod_name: str, admission: str) -> Iterator[Finding]:
        if self._running and differs(admission, self._patch_admission):
            yield Finding(
                kind=FindingKind.STALE_POD,
                reason=(
                    f"pod {pod_name} runs with A = {admission} while the running job's "
                    f"runtime patch holds A = {self._patch_admission}: it was not started by "
                    "the opening that raised A"
                ),
            )

    def _check_zero_r(self, pod: Mapping[str, Any], pod_name: str) -> Iterator[Finding]:
        counts = counts_of(pod)
        if counts is not None and counts == (0, 0):
            yield Finding(
                kind=FindingKind.ZERO_R,
                reason=(
                    f"pod {pod_name} began an execution with R = A + J = 0 + 0 = 0: it ran "
                    "before any raise of A (the job or its JobSet was opened by hand)"
                ),
            )

    def _check_restart_below(
        self, pod: Mapping[str, Any], pod_name: str, admission: int
    ) -> Iterator[Finding]:
        """J below the highest recorded is sound only once a raise added the difference to A.

        A raise after a reset of J writes A = max(A, floor) + (highest - J) + 1 with A at least
        1, so such a pod's R is at least highest + 2 (docs/concepts.md: The raise rule).
        """
        highest = self._highest_recorded
        counts = counts_of(pod)
        if highest is None or counts is None:
            return
        restart = counts[1]
        if restart < highest and admission + restart <= highest + 1:
            yield Finding(
                kind=FindingKind.RESTART_BELOW,
                reason=(
                    f"pod {pod_name} runs with J = {restart}, below the highest J = {highest} "
                    f"recorded, and R = {admission + restart}: A was not raised past the "
                    "executions at that J (J was reset)"
                ),
            )

    def result(
        self, *, jobset_after: Mapping[str, Any] | None = None
    ) -> tuple[tuple[Finding, ...], Observed]:
        """The findings, and what the audit's one update records beside any flag.

        `jobset_after` is the JobSet read again after the pods were listed: a JobSet restart
        during the audit makes pods of a J the first read had not counted yet, and only a
        count read after them can tell them from a J set by hand.
        """
        counted = counted_restarts(jobset_after if jobset_after is not None else self._jobset)
        findings = [*self.findings, *self._jobs.above(counted), *self._slots.findings()]
        observed = Observed(
            highest_restart=self.restarts.highest, execution=self._executions.to_record()
        )
        return tuple(findings), observed
