"""Which Jobs and pods belong to a TrainJob, told by what an edit of their labels cannot change.

Labels are mutable: a pod whose `jobset.sigs.k8s.io/jobset-name` label was removed must stay
in the audit's sight (issue 23). Ownership is read three ways, any one enough: the JobSet's
labels, the owner references the controllers set, and the trainer container's
`DISPATCH_K8S_TOKEN_PREFIX`, which `start` put in `spec.trainer.env` and which no one can
change in a Job's or pod's spec once they exist (pod and Job templates' env are immutable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dispatch_k8s.core.rules import shapes, wire

BATCH_CONTROLLER_UID_KEY = "batch.kubernetes.io/controller-uid"  # the Job controller's pod label
T = TypeVar("T")


def token_prefix_in(env: Any) -> str | None:
    """The value of DISPATCH_K8S_TOKEN_PREFIX in a container's env list, if set literally."""
    for entry in shapes.mappings(env):
        if entry.get("name") == wire.ENV_TOKEN_PREFIX and isinstance(entry.get("value"), str):
            return str(entry["value"])
    return None


def pod_token(pod_spec: Any) -> str | None:
    """The token prefix the trainer container of a pod spec runs with; None if it runs none."""
    for container in shapes.mappings(shapes.mapping(pod_spec).get("containers")):
        if container.get("name") == wire.TRAINER_CONTAINER:
            return token_prefix_in(container.get("env"))
    return None


def owner_uids(obj: Mapping[str, Any]) -> frozenset[str]:
    """The UIDs of an object's owner references."""
    references = shapes.mappings(shapes.mapping(obj.get("metadata")).get("ownerReferences"))
    return frozenset(str(ref["uid"]) for ref in references if isinstance(ref.get("uid"), str))


def owned_by_kind(obj: Mapping[str, Any], kind: str) -> bool:
    """The object has an owner reference to some object of `kind`."""
    references = shapes.mappings(shapes.mapping(obj.get("metadata")).get("ownerReferences"))
    return any(ref.get("kind") == kind for ref in references)


@dataclass(frozen=True, slots=True, kw_only=True)
class Lineage:
    """What ties Jobs and pods to one TrainJob: its name, its JobSet, its Jobs, its token."""

    name: str
    jobset_uid: str | None
    token: str | None  # DISPATCH_K8S_TOKEN_PREFIX of spec.trainer.env
    job_uids: frozenset[str] = frozenset()

    def claims_job(self, job: Mapping[str, Any]) -> bool:
        """The Job is one of the TrainJob's: by label, by owner, or by what it runs."""
        if shapes.labels_of(job).get(wire.JOBSET_NAME_KEY) == self.name:
            return True
        if self.jobset_uid is not None and self.jobset_uid in owner_uids(job):
            return True
        template = shapes.at(job, "spec", "template", "spec")
        return self.token is not None and pod_token(template) == self.token

    def claims_pod(self, pod: Mapping[str, Any]) -> bool:
        """The pod is one of the TrainJob's: by label, by owner, or by what it runs."""
        labels = shapes.labels_of(pod)
        if labels.get(wire.JOBSET_NAME_KEY) == self.name:
            return True
        if labels.get(BATCH_CONTROLLER_UID_KEY) in self.job_uids:
            return True
        if not self.job_uids.isdisjoint(owner_uids(pod)):
            return True
        return self.token is not None and pod_token(pod.get("spec")) == self.token

    def with_jobs(self, jobs: Iterable[Mapping[str, Any]]) -> Lineage:
        """The lineage once the TrainJob's Jobs are known: their pods are claimed by owner."""
        uids = {shapes.mapping(job.get("metadata")).get("uid") for job in jobs}
        known = frozenset(uid for uid in uids if isinstance(uid, str) and uid)
        return Lineage(name=self.name, jobset_uid=self.jobset_uid, token=self.token, job_uids=known)


def lineage_of(trainjob: Mapping[str, Any], jobset: Mapping[str, Any] | None) -> Lineage:
    """The lineage of a TrainJob and its JobSet (None if absent), before its Jobs are known."""
    uid = shapes.mapping(jobset.get("metadata")).get("uid") if jobset is not None else None
    return Lineage(
        name=str(shapes.mapping(trainjob.get("metadata")).get("name")),
        jobset_uid=uid if isinstance(uid, str) and uid else None,
        token=token_prefix_in(shapes.at(trainjob, "spec", "trainer").get("env")),
    )


class Claims(Generic[T]):
    """Which of a namespace's TrainJobs own each Job and pod, by the same marks as `Lineage`.

    One lookup per mark instead of asking every TrainJob about every object: a namespace of a
    thousand jobs is audited in one pass over its pods. A mark may have several owners: a copy
    of a TrainJob under another name runs the same trainer token, and each audit that claims
    its pods must see them (as `Lineage.claims_pod` of each would), not the last one listed.
    """

    def __init__(self) -> None:
        self._by_name: dict[str, list[T]] = {}
        self._by_uid: dict[str, list[T]] = {}  # JobSet UIDs for Jobs, Job UIDs for pods
        self._by_token: dict[str, list[T]] = {}

    def add(self, lineage: Lineage, owner: T, *, uids: Iterable[str]) -> None:
        """`owner` claims what `lineage` names, and the objects owned by any of `uids`."""
        self._by_name.setdefault(lineage.name, []).append(owner)
        for uid in uids:
            self._by_uid.setdefault(uid, []).append(owner)
        if lineage.token is not None:
            self._by_token.setdefault(lineage.token, []).append(owner)

    def owners_of_job(self, job: Mapping[str, Any]) -> list[T]:
        """The owners that claim a Job."""
        template = shapes.at(job, "spec", "template", "spec")
        return self._owners(job, owner_uids(job), pod_token(template))

    def owners_of_pod(self, pod: Mapping[str, Any]) -> list[T]:
        """The owners that claim a pod."""
        uids = owner_uids(pod) | {shapes.labels_of(pod).get(BATCH_CONTROLLER_UID_KEY)} - {None}
        return self._owners(pod, frozenset(str(uid) for uid in uids), pod_token(pod.get("spec")))

    def _owners(self, obj: Mapping[str, Any], uids: frozenset[str], token: str | None) -> list[T]:
        found = [*self._by_name.get(str(shapes.labels_of(obj).get(wire.JOBSET_NAME_KEY)), ())]
        for uid in uids:
            found += self._by_uid.get(uid, ())
        if token is not None:
            found += self._by_token.get(token, ())
        unique: dict[int, T] = {id(owner): owner for owner in found}
        return list(unique.values())
