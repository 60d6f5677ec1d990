"""What the auditor's streams told: every TrainJob, JobSet, Job, pod, snapshot and ledger record.

As client-go's informers keep a cache, so an audit pass reads memory, not the API server: a
change to one pod costs the audit of its TrainJob, whatever the namespace holds. Jobs and pods
are indexed by each mark core.rules.ownership claims them by (the JobSet's label, an owner's
UID, the trainer's token), so a TrainJob's are found in a few lookups and a removed label hides
none.
Objects are kept trimmed to what the audit reads (core.rules.audit.job_as_audited,
pod_as_audited, snapshot_as_audited) and packed (controller/packing.py); their names, by which
thousands of pods are indexed, are shared.
"""

from __future__ import annotations

import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from dispatch_k8s.controller import packing
from dispatch_k8s.core.rules import audit, ownership, shapes, snapshot, wire

Key = tuple[str, str]  # an object's namespace and name: a TrainJob's is its JobSet's
Mark = tuple[str, str, str]  # (namespace, which mark, its value)
TRAINJOBS: Final = "trainjobs"
JOBSETS: Final = "jobsets"
JOBS: Final = "jobs"
PODS: Final = "pods"
SNAPSHOTS: Final = "snapshots"  # Trainer's runtime snapshot ConfigMaps (core.rules.snapshot)
RECORDS: Final = "records"  # the start ledger's ConfigMaps (core.rules.ledger)
_TRIM: Final[dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]]] = {
    TRAINJOBS: audit.job_as_audited,
    JOBSETS: audit.job_as_audited,
    JOBS: audit.job_as_audited,
    PODS: audit.pod_as_audited,
    SNAPSHOTS: audit.snapshot_as_audited,
    RECORDS: audit.job_as_audited,
}


def own_key(obj: Mapping[str, Any]) -> Key | None:
    """An object's key; a TrainJob's is its JobSet's: Trainer gives the JobSet its name."""
    meta = shapes.mapping(obj.get("metadata"))
    namespace, name = meta.get("namespace"), meta.get("name")
    if isinstance(namespace, str) and isinstance(name, str) and namespace and name:
        return sys.intern(namespace), name
    return None


def _marks(kind: str, namespace: str, obj: Mapping[str, Any]) -> set[Mark]:
    """The marks a Job or pod can be claimed by (core.rules.ownership.Claims reads the same)."""
    labels = shapes.labels_of(obj)
    found = {(namespace, "uid", uid) for uid in ownership.owner_uids(obj)}
    name = labels.get(wire.JOBSET_NAME_KEY)
    if isinstance(name, str):
        found.add((namespace, "name", name))
    if kind == PODS:
        controller = labels.get(ownership.BATCH_CONTROLLER_UID_KEY)
        if isinstance(controller, str):
            found.add((namespace, "uid", controller))
        token = ownership.pod_token(obj.get("spec"))
    else:
        token = ownership.pod_token(shapes.at(obj, "spec", "template", "spec"))
    if token is not None:
        found.add((namespace, "token", token))
    return found


def _token_mark(namespace: str, trainjob: Mapping[str, Any]) -> Mark | None:
    """The token mark of the pods a TrainJob's trainer runs, if it gives them one."""
    token = ownership.lineage_of(trainjob, None).token
    return None if token is None else (namespace, "token", token)


@dataclass(frozen=True, slots=True)
class View:
    """One TrainJob as the store holds it: what may be its own, and its runtime snapshot."""

    trainjob: dict[str, Any] | None
    jobset: dict[str, Any] | None
    jobs: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    snapshot: dict[str, Any] | None = None

    def unlabelled(self, name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Its Jobs and pods that do not carry the JobSet's label for `name`."""

        def without(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [o for o in objects if shapes.labels_of(o).get(wire.JOBSET_NAME_KEY) != name]

        return without(self.jobs), without(self.pods)


class Store:
    """The objects of each kind by key, Jobs and pods also by mark; safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, dict[Key, bytes]] = defaultdict(dict)
        self._by_mark: dict[str, dict[Mark, set[Key]]] = defaultdict(lambda: defaultdict(set))
        # TrainJobs by the trainer token they give their pods: a copy under another name gives
        # the same, and a change of its pods is the original's to audit too.
        self._by_token: dict[Mark, set[Key]] = defaultdict(set)

    def put(self, kind: str, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """Keep the object as told now; what was kept under its key before, if anything."""
        key = own_key(obj)
        if key is None:
            return None
        kept = _TRIM[kind](obj)
        packed = packing.pack(kept)
        marks = _marks(kind, key[0], kept) if kind in (JOBS, PODS) else set()
        token = _token_mark(key[0], kept) if kind == TRAINJOBS else None
        with self._lock:
            before = self._forget(kind, key)
            self._objects[kind][key] = packed
            for mark in marks:
                self._by_mark[kind][mark].add(key)
            if token is not None:
                self._by_token[token].add(key)
        return before

    def sharing_token(self, kind: str, obj: Mapping[str, Any]) -> set[Key]:
        """The TrainJobs whose trainer token a Job or pod runs, whatever its labels say."""
        namespace = shapes.mapping(obj.get("metadata")).get("namespace")
        if not isinstance(namespace, str):
            return set()
        marks = [m for m in _marks(kind, namespace, obj) if m[1] == "token"]
        with self._lock:
            return set().union(*(self._by_token.get(mark, ()) for mark in marks))

    def remove(self, kind: str, key: Key) -> None:
        """Forget the object of `key`."""
        with self._lock:
            self._forget(kind, key)

    def _forget(self, kind: str, key: Key) -> dict[str, Any] | None:
        packed = self._objects[kind].pop(key, None)
        if packed is None:
            return None
        old = packing.unpack(packed)
        token = _token_mark(key[0], old) if kind == TRAINJOBS else None
        if token is not None and token in self._by_token:
            self._by_token[token].discard(key)
            if not self._by_token[token]:
                del self._by_token[token]
        if kind not in (JOBS, PODS):
            return old
        index = self._by_mark[kind]
        for mark in _marks(kind, key[0], old):
            keys = index.get(mark)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[mark]
        return old

    def view(self, key: Key) -> View:
        """The TrainJob of `key`, its JobSet, the Jobs and pods any mark names, its snapshot."""
        namespace, name = key
        with self._lock:
            trainjob = self._get(TRAINJOBS, key)
            jobset = self._get(JOBSETS, key)
            if trainjob is None:
                return View(None, jobset, [], [])
            taken = self._get(SNAPSHOTS, (namespace, snapshot.snapshot_name(name)))
            lineage = ownership.lineage_of(trainjob, jobset)
            marks = {(namespace, "name", name)}
            if lineage.token is not None:
                marks.add((namespace, "token", lineage.token))
            job_marks = marks | (
                {(namespace, "uid", lineage.jobset_uid)} if lineage.jobset_uid else set()
            )
            jobs = self._find(JOBS, job_marks)
            owned = lineage.with_jobs(job for job in jobs if lineage.claims_job(job))
            pods = self._find(PODS, marks | {(namespace, "uid", uid) for uid in owned.job_uids})
        return View(trainjob, jobset, jobs, pods, taken)

    def kept(self, kind: str, key: Key) -> dict[str, Any] | None:
        """The object of `kind` kept under `key`, if there is one."""
        with self._lock:
            return self._get(kind, key)

    def _get(self, kind: str, key: Key) -> dict[str, Any] | None:
        packed = self._objects[kind].get(key)
        return None if packed is None else packing.unpack(packed)

    def _find(self, kind: str, marks: Iterable[Mark]) -> list[dict[str, Any]]:
        index, objects = self._by_mark[kind], self._objects[kind]
        keys = set().union(*(index.get(mark, ()) for mark in marks))
        # In name order, as the API server lists them: the same objects give the same cause.
        return [packing.unpack(objects[key]) for key in sorted(keys)]
