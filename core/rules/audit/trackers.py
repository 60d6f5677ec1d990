"""What the audit keeps across the objects it is fed, one tracker for each thing it compares.

The pods per execution slot, the JobSet's child Jobs, the highest J seen and the executions
seen: each is fed objects one at a time, as the audit reads them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from dispatch_k8s.core.rules import ownership, shapes
from dispatch_k8s.core.rules.audit.checks import counter_or_none
from dispatch_k8s.core.rules.audit.findings import Finding, FindingKind
from dispatch_k8s.core.rules.audit.record import Execution
from dispatch_k8s.core.rules.identity import IdentityError, parse_counter
from dispatch_k8s.core.rules.wire import (
    ADMISSION_ANNOTATION,
    COMPLETION_INDEX_KEY,
    JOB_INDEX_KEY,
    JOBSET_UID_KEY,
    REPLICATED_JOB_NAME_KEY,
    RESTART_ATTEMPT_KEY,
)


class Slots:
    """Pods per (JobSet UID, slot, A, J): one execution has one pod in each slot.

    Kept for every indexed pod of a list that can be tens of thousands long, so it keeps
    little: the words every pod repeats (UID, job, A, J) once, and one name per slot until
    a second pod turns up in it.
    """

    def __init__(self) -> None:
        self.pods: dict[tuple[str, ...], str] = {}
        self.duplicates: dict[tuple[str, ...], list[str]] = {}
        self._words: dict[str, str] = {}

    def see(self, pod: Mapping[str, Any]) -> None:
        """Take one pod (live or not) into its slot."""
        labels = shapes.at(pod, "metadata", "labels")
        if labels.get(COMPLETION_INDEX_KEY) is None:
            return  # not a pod of an indexed Job: no slot to compare
        key = tuple(
            self._words.setdefault(word := shapes.word(value), word)
            for value in (
                labels.get(JOBSET_UID_KEY),
                labels.get(REPLICATED_JOB_NAME_KEY),
                labels.get(JOB_INDEX_KEY),
                labels.get(COMPLETION_INDEX_KEY),
                shapes.annotations_of(pod).get(ADMISSION_ANNOTATION),
                labels.get(RESTART_ATTEMPT_KEY),
            )
        )
        name = shapes.word(shapes.mapping(pod.get("metadata")).get("name"))
        first = self.pods.setdefault(key, name)
        if first is not name:  # a second pod in the slot: from now on every name counts
            self.duplicates.setdefault(key, [first]).append(name)

    def findings(self) -> Iterator[Finding]:
        """Each slot that two or more pods ran with the same A and J, as findings."""
        for (_, job, job_index, index, admission, restart), names in sorted(
            self.duplicates.items()
        ):
            if admission != repr(None):
                yield Finding(
                    kind=FindingKind.DUPLICATE_POD,
                    reason=(
                        f"pods {', '.join(sorted(names))} all ran {job}/{job_index}/{index} "
                        f"with A = {admission} and J = {restart} on one JobSet: the execution "
                        "ran more than once (a child Job deleted and recreated, or a pod "
                        "replaced)"
                    ),
                )


class ChildJobs:
    """The JobSet's child Jobs by UID: what each holds for the pods made from it."""

    def __init__(self, jobset: Mapping[str, Any] | None) -> None:
        self._by_uid: dict[str, Mapping[str, Any]] = {}
        self._jobset_uid = shapes.mapping((jobset or {}).get("metadata")).get("uid")
        self._labelled: list[tuple[str, int]] = []  # (what, J) to compare with JobSet's count

    def all(self) -> list[Mapping[str, Any]]:
        """Every Job seen, by UID."""
        return list(self._by_uid.values())

    def see(self, job: Mapping[str, Any]) -> Iterator[Finding]:
        """Keep one child Job; yield what its template and owners show."""
        meta = shapes.mapping(job.get("metadata"))
        uid, name = meta.get("uid"), shapes.word(meta.get("name"))
        if isinstance(uid, str) and uid:
            self._by_uid[uid] = job
        template_meta = shapes.at(job, "spec", "template", "metadata")
        restart = shapes.labels_of(job).get(RESTART_ATTEMPT_KEY)
        template_restart = shapes.mapping(template_meta.get("labels")).get(RESTART_ATTEMPT_KEY)
        if template_restart is not None and template_restart != restart:
            yield Finding(
                kind=FindingKind.JOB_IDENTITY,
                reason=(
                    f"Job {name} pod template label {RESTART_ATTEMPT_KEY} is "
                    f"{shapes.word(template_restart)}, not the Job's own "
                    f"{shapes.word(restart)}: its pods would run with a J JobSet never counted"
                ),
            )
        self._note_restart(f"Job {name} is labelled restart attempt", restart, job)
        runs_trainer = ownership.pod_token(shapes.at(job, "spec", "template", "spec")) is not None
        if runs_trainer and not ownership.owned_by_kind(job, "JobSet"):
            yield Finding(
                kind=FindingKind.ORPHANED,
                reason=(
                    f"Job {name} runs the trainer but no JobSet owns it (its owner references "
                    "were removed): JobSet does not count its executions in J"
                ),
            )

    def _note_restart(self, what: str, restart: Any, obj: Mapping[str, Any]) -> None:
        # Another JobSet's objects are the UID finding's: their J is not this JobSet's count.
        if shapes.labels_of(obj).get(JOBSET_UID_KEY) not in (None, self._jobset_uid):
            return
        value = counter_or_none(restart)
        if value is not None and value > 0:
            self._labelled.append((what, value))

    def check_pod(self, pod: Mapping[str, Any], pod_name: str) -> Iterator[Finding]:
        """A live pod's A and J against the Job it was made from."""
        restart = shapes.labels_of(pod).get(RESTART_ATTEMPT_KEY)
        self._note_restart(f"pod {pod_name} runs with J =", restart, pod)
        job = next(
            (self._by_uid[uid] for uid in ownership.owner_uids(pod) if uid in self._by_uid), None
        )
        if job is None:
            return
        job_name = shapes.word(shapes.mapping(job.get("metadata")).get("name"))
        job_restart = shapes.labels_of(job).get(RESTART_ATTEMPT_KEY)
        if job_restart is not None and restart != job_restart:
            yield Finding(
                kind=FindingKind.POD_IDENTITY,
                reason=(
                    f"pod {pod_name} runs with J = {shapes.word(restart)} but its Job {job_name} "
                    f"is restart attempt {shapes.word(job_restart)}: the pod template was edited"
                ),
            )
        template = shapes.at(job, "spec", "template", "metadata")
        job_a = shapes.mapping(template.get("annotations")).get(ADMISSION_ANNOTATION)
        pod_a = shapes.annotations_of(pod).get(ADMISSION_ANNOTATION)
        if job_a is not None and pod_a != job_a:
            yield Finding(
                kind=FindingKind.POD_IDENTITY,
                reason=(
                    f"pod {pod_name} runs with A = {shapes.word(pod_a)} but its Job {job_name} "
                    f"was made with A = {shapes.word(job_a)}: the pod was edited"
                ),
            )

    def above(self, counted: int | None) -> Iterator[Finding]:
        """Jobs and live pods labelled with a J above the JobSet's count: set by hand."""
        if counted is None:
            return
        for what, restart in self._labelled:
            if restart > counted:
                yield Finding(
                    kind=FindingKind.JOB_IDENTITY
                    if what.startswith("Job")
                    else FindingKind.POD_IDENTITY,
                    reason=(
                        f"{what} {restart}, above the JobSet's status.restarts {counted}: "
                        "J was set by hand"
                    ),
                )


class Restarts:
    """The highest J among everything seen; values that are not counts are left to the rest."""

    def __init__(self) -> None:
        self.highest: int | None = None

    def see(self, value: Any) -> None:
        """Take one J (a label or status.restarts) as read."""
        if isinstance(value, str):
            try:
                value = parse_counter(value, name="J")
            except IdentityError:
                return
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            self.highest = value if self.highest is None else max(self.highest, value)


class Executions:
    """Compares each live trainer pod with the recorded execution; picks the next record.

    Every slot is compared, not one: the record holds the pod of each slot the audit saw at
    its R, so a rank made again under the same A and J is found whichever slot it is in. A
    recorded slot no pod has (a forged record, a rank scaled away) bounds nothing: the slots
    seen are compared and added to it.
    """

    def __init__(self, recorded: Execution | None) -> None:
        self.recorded = recorded
        self._latest_r: int | None = None  # the highest R of a live pod seen
        self._latest_pods: dict[str, str] = {}  # slot -> UID of the live pods seen at it
        self.repeated = False

    def see(self, pod: Mapping[str, Any], *, admission: int) -> Iterator[Finding]:
        """Compare one live trainer pod, of canonical A `admission`, with the record."""
        labels = shapes.at(pod, "metadata", "labels")
        try:
            restart = parse_counter(labels.get(RESTART_ATTEMPT_KEY), name="J")
        except IdentityError:
            return  # the prologue refuses it (exit 125): no execution runs with it
        meta = shapes.mapping(pod.get("metadata"))
        slot = "/".join(
            shapes.word(labels.get(key))
            for key in (REPLICATED_JOB_NAME_KEY, JOB_INDEX_KEY, COMPLETION_INDEX_KEY)
        )
        r, uid, name = (
            admission + restart,
            shapes.word(meta.get("uid")),
            shapes.word(meta.get("name")),
        )
        recorded = self.recorded
        if recorded is not None and r < recorded.r:
            self.repeated = True
            yield Finding(
                kind=FindingKind.LOWER_R,
                reason=(
                    f"pod {name} runs with R = A + J = {admission} + {restart} = {r}, "
                    f"below the R = {recorded.r} an earlier execution had: A or J was reset"
                ),
            )
        elif recorded is not None and r == recorded.r and recorded.pods.get(slot, uid) != uid:
            self.repeated = True
            yield Finding(
                kind=FindingKind.REPEATED_R,
                reason=(
                    f"pod {name} began an execution with R = {r} in slot {slot}, which the "
                    f"execution of pod UID {recorded.pods[slot]} already had: the job was "
                    "opened again without a raise of A, or the rank was made again (its pod "
                    "deleted, its Job scaled down and up)"
                ),
            )
        if self._latest_r is None or r > self._latest_r:
            self._latest_r, self._latest_pods = r, {slot: uid}
        elif r == self._latest_r:
            self._latest_pods.setdefault(slot, uid)  # a second pod in it: Slots tells that

    def to_record(self) -> Execution | None:
        """A newer record; None keeps the one there (nothing newer, or a finding).

        At a higher R the slots seen begin the record; at the recorded R those not recorded
        yet are appended (the pods of one execution are not all made at once).
        """
        recorded = self.recorded
        if self.repeated or self._latest_r is None:
            return None
        latest = Execution(r=self._latest_r, pods=dict(sorted(self._latest_pods.items())))
        if recorded is None or latest.r > recorded.r:
            return latest
        merged = recorded.with_pods(latest.pods)
        return merged if latest.r == recorded.r and merged != recorded else None
