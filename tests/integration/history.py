"""What happened in a namespace, as watches saw it: every pod made, every TrainJob version,
every Workload version, in order; for judging a burst after the fact."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, watch

from dispatch_k8s.core.rules import wire
from tests.support.kueue_objects import KUEUE
from tests.support.lifecycle import TRAINER, as_dict


@dataclass(frozen=True, slots=True)
class Execution:
    """One execution of a TrainJob: its pods carry A and J."""

    trainjob: str
    admission: int
    restart: int

    @property
    def r(self) -> int:
        """R = A + J."""
        return self.admission + self.restart


@dataclass
class History:
    """Watches pods, TrainJobs and Workloads of one namespace until `stop`."""

    api: client.ApiClient
    namespace: str
    executions: list[Execution] = field(default_factory=list)
    # TrainJob -> every (raised-for, floor) its versions carried, in order.
    raises: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))
    # Workload UID -> every (QuotaReserved time, our check's state) its versions carried.
    checks: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))
    # Workload UID -> every distinct (our check's entry, requeueState.requeueAt, QuotaReserved
    # time) its versions carried, in order.
    entries: dict[str, list[tuple[dict[str, Any], str | None, str | None]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # TrainJob -> whether its Workload, as last seen, is admitted.
    admitted: dict[str, bool] = field(default_factory=dict)
    check: str = ""
    _stopped: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> History:
        core, custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)
        sources: list[tuple[Callable[..., Any], tuple[Any, ...], Callable[[dict[str, Any]], None]]]
        sources = [
            (core.list_namespaced_pod, (self.namespace,), self._pod),
            (
                custom.list_namespaced_custom_object,
                (*TRAINER, self.namespace, "trainjobs"),
                self._trainjob,
            ),
            (
                custom.list_namespaced_custom_object,
                (*KUEUE, self.namespace, "workloads"),
                self._workload,
            ),
        ]
        for lister, args, record in sources:
            thread = threading.Thread(target=self._follow, args=(lister, args, record), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *_: object) -> None:
        self._stopped.set()
        for thread in self._threads:
            thread.join(timeout=15)

    def _follow(
        self,
        lister: Callable[..., Any],
        args: tuple[Any, ...],
        record: Callable[[dict[str, Any]], None],
    ) -> None:
        version = ""
        while not self._stopped.is_set():
            stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                lister, *args, resource_version=version, timeout_seconds=5
            )
            for event in stream:
                obj = as_dict(event["object"])
                version = obj["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    with self._lock:
                        record(obj)

    def _pod(self, pod: dict[str, Any]) -> None:
        labels = pod["metadata"].get("labels") or {}
        annotations = pod["metadata"].get("annotations") or {}
        if wire.JOBSET_NAME_KEY not in labels or wire.ADMISSION_ANNOTATION not in annotations:
            return
        execution = Execution(
            labels[wire.JOBSET_NAME_KEY],
            int(annotations[wire.ADMISSION_ANNOTATION]),
            int(labels[wire.RESTART_ATTEMPT_KEY]),
        )
        if execution not in self.executions:
            self.executions.append(execution)

    def _trainjob(self, job: dict[str, Any]) -> None:
        annotations = job["metadata"].get("annotations") or {}
        raised_for = annotations.get(wire.RAISED_FOR_ANNOTATION)
        if raised_for:
            seen = (raised_for, annotations[wire.ADMISSION_FLOOR_ANNOTATION])
            versions = self.raises[job["metadata"]["name"]]
            if not versions or versions[-1] != seen:
                versions.append(seen)

    def _workload(self, workload: dict[str, Any]) -> None:
        status = workload.get("status") or {}
        for owner in workload["metadata"].get("ownerReferences") or []:
            if owner.get("kind") == "TrainJob":
                admitted = any(
                    c["type"] == "Admitted" and c["status"] == "True"
                    for c in status.get("conditions") or []
                )
                self.admitted[owner["name"]] = admitted
        reserved = next(
            (
                c.get("lastTransitionTime")
                for c in status.get("conditions") or []
                if c["type"] == "QuotaReserved" and c["status"] == "True"
            ),
            None,
        )
        state = next(
            (s["state"] for s in status.get("admissionChecks") or [] if s["name"] == self.check),
            None,
        )
        entry = next(
            (s for s in status.get("admissionChecks") or [] if s["name"] == self.check), None
        )
        if entry is not None:
            told = (dict(entry), (status.get("requeueState") or {}).get("requeueAt"), reserved)
            entries = self.entries[workload["metadata"]["uid"]]
            if not entries or entries[-1] != told:
                entries.append(told)
        if reserved and state:
            seen = (str(reserved), str(state))
            versions = self.checks[workload["metadata"]["uid"]]
            if not versions or versions[-1] != seen:
                versions.append(seen)

    def ran_as_admitted(self, trainjob: str) -> bool:
        """Whether the TrainJob is admitted and has run under its latest raise: not waiting to
        be admitted again (preempted) or to run again (admitted again)."""
        with self._lock:
            floors = self.raises.get(trainjob) or []
            return (
                self.admitted.get(trainjob, False)
                and bool(floors)
                and any(
                    e.trainjob == trainjob and str(e.admission) == floors[-1][1]
                    for e in self.executions
                )
            )

    def of(self, trainjob: str) -> list[Execution]:
        """The executions of one TrainJob, in the order their first pods appeared."""
        with self._lock:
            return [e for e in self.executions if e.trainjob == trainjob]
