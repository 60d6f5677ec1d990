"""The continuous auditor: every managed TrainJob audited as it, or anything it owns, changes.

Where the admission policies are not installed, detection is the only defence, and an audit
that runs now and then cannot compare what it never saw (README: The audit). So the leader
lists and watches the managed TrainJobs, the JobSets, their child Jobs and their pods; every
change is mapped to its TrainJob and queued, and workers run the one audit pass
`dispatch-audit` runs (`core.auditing.audit_trainjob`): J is recorded as soon as it rises,
each execution as it begins, and findings flag the TrainJob foreign. It never stops a job.

Level-triggered like the gate: each list (at start and every resync) queues every managed
TrainJob again, and whatever JobSet, Job or pod changed or went since the last list.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from loguru import logger

from dispatch_k8s.controller import serve, streams
from dispatch_k8s.controller.queue import WorkQueue
from dispatch_k8s.core import auditing, shapes, wire
from dispatch_k8s.core.auditing import AuditOutcome
from dispatch_k8s.core.errors import DispatchError, NotFound, PreconditionFailed, Transient
from dispatch_k8s.core.gateway import (
    JOB_RESOURCE,
    JOBSET_RESOURCE,
    POD_RESOURCE,
    TRAINJOB_RESOURCE,
    Gateway,
    Resource,
)
from dispatch_k8s.core.settings import ControllerSettings

COMPONENT: Final = "admission-controller"  # the Events' source, as the gate's
FIRST_BACKOFF: Final = 0.5  # seconds before a TrainJob the API server could not serve is tried
MAX_BACKOFF: Final = 30.0  # again, doubled each time up to this
Key = tuple[str, str]  # the TrainJob's namespace and name


def own_key(obj: Mapping[str, Any]) -> Key | None:
    """A TrainJob's key, or a JobSet's: Trainer gives the JobSet its TrainJob's name."""
    meta = shapes.mapping(obj.get("metadata"))
    namespace, name = meta.get("namespace"), meta.get("name")
    if isinstance(namespace, str) and isinstance(name, str) and namespace and name:
        return namespace, name
    return None


def jobset_key(obj: Mapping[str, Any]) -> Key | None:
    """A child Job's or a pod's TrainJob: JobSet labels both with its name, the TrainJob's."""
    meta = shapes.mapping(obj.get("metadata"))
    namespace, name = meta.get("namespace"), shapes.labels_of(obj).get(wire.JOBSET_NAME_KEY)
    if isinstance(namespace, str) and isinstance(name, str) and namespace and name:
        return namespace, name
    return None


@dataclass(frozen=True, slots=True)
class Stream:
    """One collection the auditor follows, and how its objects map to their TrainJob."""

    kind: str  # the metrics label
    resource: Resource
    label_selector: str
    key: Callable[[Mapping[str, Any]], Key | None]


TRAINJOBS: Final = Stream(
    "trainjobs", TRAINJOB_RESOURCE, f"{wire.MANAGED_BY_LABEL}={wire.MANAGED_BY}", own_key
)
# JobSets carry no label of the TrainJob's (Trainer does not pass labels on from v2.2): all
# are watched, and only those named for a managed TrainJob queue it.
JOBSETS: Final = Stream("jobsets", JOBSET_RESOURCE, "", own_key)
JOBS: Final = Stream("jobs", JOB_RESOURCE, wire.JOBSET_NAME_KEY, jobset_key)
PODS: Final = Stream("pods", POD_RESOURCE, wire.JOBSET_NAME_KEY, jobset_key)
STREAMS: Final = (TRAINJOBS, JOBSETS, JOBS, PODS)


def backoff(failures: int) -> float:
    """Seconds before the next try after `failures` transient failures in a row."""
    return float(min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** max(0, failures - 1)))


class Auditor:
    """The leader's auditor for one term: watches feeding a queue, workers draining it."""

    def __init__(
        self, gateway: Gateway, settings: ControllerSettings, *, ended: threading.Event
    ) -> None:
        self._gateway = gateway
        self._settings = settings
        self._ended = ended
        self.queue: WorkQueue[Key] = WorkQueue()
        self._lock = threading.Lock()
        self._managed: set[Key] = set()
        self._changed_at: dict[Key, float] = {}  # the first change not yet audited
        self._causes: dict[Key, str] = {}  # the findings last seen, so each is counted once
        self._failures: dict[Key, int] = {}
        self._watched: dict[tuple[str, str | None], int] = {}
        self._workers: list[threading.Thread] = []

    def start(self) -> None:
        """Start a watch per collection and namespace, and the workers."""
        scopes: list[str | None] = [*self._settings.namespaces] or [None]
        for stream in STREAMS:
            for namespace in scopes:
                name = f"audit {stream.kind} {namespace or '*'}"
                self._spawn(name, self._follow, stream, namespace)
        for index in range(self._settings.audit_workers):
            self._workers.append(self._spawn(f"auditor {index}", self._work))

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        return thread

    def end(self, *, timeout: float) -> None:
        """Hand out no more TrainJobs; wait for the audits in flight to finish."""
        self.queue.close()
        for thread in self._workers:
            thread.join(timeout)

    # Watches

    def _follow(self, stream: Stream, namespace: str | None) -> None:
        """Queue the TrainJob of every object that changed, appeared or went."""
        known: dict[Key, tuple[str, Key | None]] = {}  # object -> (resourceVersion, TrainJob)
        listing: dict[Key, tuple[str, Key | None]] = {}
        events = streams.list_and_watch(
            self._gateway,
            stream.resource,
            namespace,
            ended=self._ended,
            resync_seconds=self._settings.resync_seconds,
            label_selector=stream.label_selector,
        )
        for event, obj in events:
            if event == streams.LISTING:
                listing = {}
                continue
            if event == streams.SYNCED:
                gone = [key for ident, (_, key) in known.items() if ident not in listing]
                known = listing
                if stream is TRAINJOBS:
                    self._manage_only(namespace, {key for _, key in known.values() if key})
                for key in gone:
                    self._changed(key)
                self._count(stream, namespace, len(known))
                continue
            ident = own_key(obj)
            if ident is None or event not in (streams.LISTED, "ADDED", "MODIFIED", "DELETED"):
                continue  # a BOOKMARK, or an object without a name
            version = str(shapes.mapping(obj.get("metadata")).get("resourceVersion"))
            key = stream.key(obj)
            if event == streams.LISTED:
                listing[ident] = (version, key)
                seen = known.get(ident)
                if stream is TRAINJOBS:
                    self._manage(key)  # every managed TrainJob is audited at every resync
                elif seen is not None and seen[0] == version:
                    continue  # unchanged since the watch told it
            elif event == "DELETED":
                known.pop(ident, None)
                self._count(stream, namespace, len(known))
                if stream is TRAINJOBS:
                    self._unmanage(key)
                    continue
            else:
                known[ident] = (version, key)
                self._count(stream, namespace, len(known))
                if stream is TRAINJOBS:
                    self._manage(key)
            self._changed(key)

    def _manage(self, key: Key | None) -> None:
        if key is not None:
            with self._lock:
                self._managed.add(key)

    def _unmanage(self, key: Key | None) -> None:
        if key is None:
            return
        with self._lock:
            self._managed.discard(key)
            self._changed_at.pop(key, None)
            self._causes.pop(key, None)
            self._failures.pop(key, None)

    def _manage_only(self, namespace: str | None, keys: set[Key]) -> None:
        """After a list of TrainJobs: those of the scope are exactly the listed ones."""
        with self._lock:
            gone = {key for key in self._managed if namespace in (None, key[0])} - keys
        for key in gone:
            self._unmanage(key)

    def _count(self, stream: Stream, namespace: str | None, count: int) -> None:
        with self._lock:
            self._watched[stream.kind, namespace] = count
            total = sum(n for (kind, _), n in self._watched.items() if kind == stream.kind)
        serve.WATCHED.labels(stream.kind).set(total)

    def _changed(self, key: Key | None) -> None:
        """Queue the audit of a managed TrainJob; objects of any other are left alone."""
        if key is None:
            return
        with self._lock:
            if key not in self._managed:
                return
            self._changed_at.setdefault(key, time.monotonic())
        self.queue.add(key)
        serve.AUDIT_QUEUE_DEPTH.set(len(self.queue))

    # Workers

    def _work(self) -> None:
        while (key := self.queue.get()) is not None:
            again: float | None = None
            try:
                again = self._audit(key)
            except Exception:  # a bug: logged with its traceback, the TrainJob tried later
                logger.exception(f"auditing TrainJob {key[0]}/{key[1]} failed")
                serve.AUDITS.labels("error").inc()
                again = MAX_BACKOFF
            finally:
                self.queue.done(key)
            if again is not None:
                self.queue.add_after(key, again)
            serve.AUDIT_QUEUE_DEPTH.set(len(self.queue))

    def _audit(self, key: Key) -> float | None:
        """One audit pass; seconds until the TrainJob is audited again, None on its next change."""
        namespace, name = key
        with self._lock:
            if key not in self._managed:
                return None  # deleted, or no longer labelled, since it was queued
            since = self._changed_at.pop(key, None)
        log = logger.bind(trainjob=name, namespace=namespace)
        try:
            outcome = auditing.audit_trainjob(self._gateway, namespace, name, step=COMPONENT)
        except PreconditionFailed as e:  # changed since it was read: the next pass reads afresh
            serve.AUDITS.labels("conflict").inc()
            log.bind(reason=str(e)).info("changed meanwhile: audit again")
            self._keep_since(key, since)
            return 0.0
        except NotFound:
            serve.AUDITS.labels("gone").inc()
            return None
        except Transient as e:
            serve.AUDITS.labels("transient").inc()
            with self._lock:
                failures = self._failures[key] = self._failures.get(key, 0) + 1
            log.bind(error=str(e)).warning("API server unavailable: audit again")
            self._keep_since(key, since)
            return backoff(failures)
        except DispatchError as e:  # forbidden, refused by a webhook: the next change or resync
            serve.AUDITS.labels("error").inc()
            log.bind(error=str(e), exit_code=e.exit_code).error("cannot audit the TrainJob")
            return None
        with self._lock:
            self._failures.pop(key, None)
        self._tell(key, outcome, since, log)
        return None

    def _keep_since(self, key: Key, since: float | None) -> None:
        """The change a failed pass was for is still to be detected: keep when it was seen."""
        if since is not None:
            with self._lock:
                self._changed_at[key] = min(since, self._changed_at.get(key, since))

    def _tell(self, key: Key, outcome: AuditOutcome, since: float | None, log: Any) -> None:
        """Metrics and a log line for one pass."""
        if not outcome.findings:
            serve.AUDITS.labels("recorded" if outcome.recorded else "clean").inc()
            with self._lock:
                self._causes.pop(key, None)
            if outcome.recorded:
                log.info("recorded what the audit saw")
            return
        serve.AUDITS.labels("flagged").inc()
        cause = outcome.cause
        with self._lock:
            new = self._causes.get(key) != cause
            self._causes[key] = cause
        if not new:
            return  # the same findings as the last pass: counted and told then
        for finding in outcome.findings:
            serve.FINDINGS.labels(str(finding.kind), key[0]).inc()
        if outcome.recorded and since is not None:
            serve.DETECTION.observe(time.monotonic() - since)
        log.bind(kinds=sorted({str(f.kind) for f in outcome.findings})).warning("flagged foreign")
