"""The continuous auditor: every managed TrainJob audited as it, or anything it owns, changes.

Where the admission policies are not installed, detection is the only defence, and an audit
that runs now and then cannot compare what it never saw (docs/operations.md: The audit). So
the leader lists and watches the managed TrainJobs, the JobSets, the Jobs, the pods, Trainer's
runtime snapshots and the start ledger's records (ConfigMaps) of its namespaces into a store
(controller/store.py, as client-go's informers keep a cache); every change is mapped to its
TrainJob and queued, and workers decide from the store with the pure functions
`dispatch-audit` decides with (`core.shell.auditing.audit_of`, `decide`). A pass that would
write (J risen, an execution begun, a finding not yet flagged) is decided again from fresh
reads of that TrainJob alone (`core.shell.auditing.audit_read`), and its one update is
preconditioned on the TrainJob as read there: a watch that lags another can delay a finding,
never make one. It never stops a job. Beyond what `dispatch-audit` finds, it compares each
version of a TrainJob with the one it kept: a record that bounds R moved back is flagged and
put back (core.rules.erasure).

Level-triggered like the gate: every resync queues every managed TrainJob again, and each
list (at start, and after a watch that cannot go on) whatever changed or went since the last.

In policy mode (--no-gate) no controller makes the raises (the API server does, as Kueue opens
the job), so the auditor tells each raise its watch sees, and at its first list the last
raise of every job, on the TrainJob and its Workload (AdmissionRaised, once each), and
deactivates the Workload of a suspended TrainJob flagged foreign, whose every opening the
guard refuses (open-while-foreign): Kueue would otherwise reserve quota for it again and again.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from loguru import logger

from dispatch_k8s.controller import serve, store, streams
from dispatch_k8s.controller.queue import RETRY, Again, WorkQueue
from dispatch_k8s.controller.settings import ControllerSettings
from dispatch_k8s.controller.store import Key, own_key
from dispatch_k8s.core.rules import (
    carried,
    erasure,
    events,
    ledger,
    shapes,
    trainjob,
    wire,
    workload,
)
from dispatch_k8s.core.rules.carried import Uncarried
from dispatch_k8s.core.rules.erasure import Erasure
from dispatch_k8s.core.rules.errors import DispatchError, NotFound, PreconditionFailed, Transient
from dispatch_k8s.core.rules.snapshot import Snapshot
from dispatch_k8s.core.shell import auditing, carrying
from dispatch_k8s.core.shell.auditing import AuditOutcome, Erasures
from dispatch_k8s.core.shell.gateway import Gateway, kinds
from dispatch_k8s.core.shell.gateway.kinds import Kind

COMPONENT: Final = "admission-controller"  # the Events' source, as the gate's
FIRST_BACKOFF: Final = 0.5  # seconds before a TrainJob the API server could not serve is tried
MAX_BACKOFF: Final = 30.0  # again, doubled each time up to this
WRITE_TRIES: Final = 4  # fresh reads and one PUT each, in one pass, before it goes back in line


def snapshot_key(obj: Mapping[str, Any]) -> Key | None:
    """A runtime snapshot's TrainJob: Trainer names the ConfigMap for it; None for any other."""
    key = own_key(obj)
    if key is None or not key[1].endswith(wire.RUNTIME_SNAPSHOT_SUFFIX):
        return None
    name = key[1].removesuffix(wire.RUNTIME_SNAPSHOT_SUFFIX)
    return (key[0], name) if name else None


def jobset_key(obj: Mapping[str, Any]) -> Key | None:
    """A child Job's or a pod's TrainJob: JobSet labels both with its name, the TrainJob's."""
    meta = shapes.mapping(obj.get("metadata"))
    namespace, name = meta.get("namespace"), shapes.labels_of(obj).get(wire.JOBSET_NAME_KEY)
    if isinstance(namespace, str) and isinstance(name, str) and namespace and name:
        return sys.intern(namespace), sys.intern(name)  # one string for the job's every pod
    return None


@dataclass(frozen=True, slots=True)
class Stream:
    """One collection the auditor follows, and how its objects map to their TrainJob."""

    kind: str  # the metrics label
    resource: Kind
    label_selector: str
    key: Callable[[Mapping[str, Any]], Key | None]
    keeps_unkeyed: bool = True  # whether an object that maps to no TrainJob is kept too


TRAINJOBS: Final = Stream(
    "trainjobs", kinds.TRAINJOB, f"{wire.MANAGED_BY_LABEL}={wire.MANAGED_BY}", own_key
)
# JobSets carry no label of the TrainJob's (Trainer does not pass labels on from v2.2): all
# are watched, and only those named for a managed TrainJob queue it.
JOBSETS: Final = Stream("jobsets", kinds.JOBSET, "", own_key)
# Every Job and pod of the namespaces, not only those labelled: core.rules.ownership claims one
# whose label was removed by its owner or the trainer it runs.
JOBS: Final = Stream("jobs", kinds.JOB, "", jobset_key)
PODS: Final = Stream("pods", kinds.POD, "", jobset_key)
# Trainer labels no snapshot (v2.3.0): every ConfigMap is told, and only those named for a
# TrainJob are kept. A snapshot edited then queues its job at once, where a snapshot read at each
# pass was read some 30 times in a job's admission (docs/development.md) and an edit of a
# suspended job's was found only at the next resync.
SNAPSHOTS: Final = Stream("snapshots", kinds.CONFIG_MAP, "", snapshot_key, keeps_unkeyed=False)
# The start ledger's records (core.rules.ledger), labelled: each pass compares its TrainJob's UID
# with the "created" one. Immutable; no change of one queues a TrainJob (the resync compares).
RECORDS: Final = Stream("records", kinds.CONFIG_MAP, wire.LEDGER_LABEL, lambda _: None)
STREAMS: Final = (TRAINJOBS, JOBSETS, JOBS, PODS, SNAPSHOTS, RECORDS)


class Auditor:
    """The leader's auditor for one term: watches feeding a queue, workers draining it."""

    def __init__(
        self, gateway: Gateway, settings: ControllerSettings, *, ended: threading.Event
    ) -> None:
        self._gateway = gateway
        self._settings = settings
        self._ended = ended
        self.queue: WorkQueue[Key] = WorkQueue(first_backoff=FIRST_BACKOFF, max_backoff=MAX_BACKOFF)
        self._lock = threading.Lock()
        self._managed: set[Key] = set()
        self._changed_at: dict[Key, float] = {}  # the first change not yet audited
        self._causes: dict[Key, str] = {}  # the findings last seen, so each is counted once
        # Open with their JobSet not (False), or held with it running (True): core.rules.carried.
        self._uncarried: dict[Key, bool] = {}
        # Records seen moved back (core.rules.erasure), by annotation, until a pass wrote them.
        self._erased: dict[Key, dict[str, Erasure]] = {}
        self._watched: dict[tuple[str, str | None], int] = {}
        self.store = store.Store()
        # The runtimes the passes compared, read again at each resync.
        self._runtimes: dict[tuple[str, str, str], dict[str, Any] | None] = {}
        self._workers: list[threading.Thread] = []
        self._policy_mode = not settings.gate
        # The raises' Events, posted off the watch thread (best effort, as every Event).
        self._events = ThreadPoolExecutor(max_workers=1, thread_name_prefix="audit events")

    def start(self) -> None:
        """Start a watch per collection and namespace, and the workers."""
        scopes: list[str | None] = [*self._settings.namespaces] or [None]
        for stream in STREAMS:
            for namespace in scopes:
                name = f"audit {stream.kind} {namespace or '*'}"
                self._spawn(name, self._follow, stream, namespace)
        for index in range(self._settings.audit_workers):
            self._workers.append(self._spawn(f"auditor {index}", self._work))
        self._spawn("audit resync", self._resync)

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        return thread

    def end(self, *, timeout: float) -> None:
        """Hand out no more TrainJobs; wait for the audits in flight to finish."""
        self.queue.close()
        for thread in self._workers:
            thread.join(timeout)
        self._events.shutdown(wait=True)

    # Watches

    def _follow(self, stream: Stream, namespace: str | None) -> None:
        """Keep the store as the collection is, and queue the TrainJob of what changed.

        That is of every object that changed, appeared or went, and the TrainJob an object
        was labelled for before a change of its label.
        """
        known: dict[Key, tuple[str, Key | None]] = {}  # object -> (resourceVersion, TrainJob)
        listing: dict[Key, tuple[str, Key | None]] = {}
        events = streams.list_and_watch(
            self._gateway,
            stream.resource,
            namespace,
            ended=self._ended,
            resync_seconds=self._settings.resync_seconds,
            label_selector=stream.label_selector,
            relist=False,  # the store holds what was told; the resync audits from it
        )
        for event, obj in events:
            if event == streams.LISTING:
                listing = {}
                continue
            if event == streams.SYNCED:
                gone = [(went, key) for went, (_, key) in known.items() if went not in listing]
                known = listing
                for went, _ in gone:
                    self.store.remove(stream.kind, went)
                if stream is TRAINJOBS:
                    self._manage_only(namespace, {key for _, key in known.values() if key})
                for _, key in gone:
                    self._changed(key)
                self._count(stream, namespace, len(known))
                continue
            ident = own_key(obj)
            if ident is None or event not in (streams.LISTED, "ADDED", "MODIFIED", "DELETED"):
                continue  # a BOOKMARK, or an object without a name
            key = stream.key(obj)
            if key is None and not stream.keeps_unkeyed:
                continue  # a ConfigMap that is no snapshot
            version = str(shapes.mapping(obj.get("metadata")).get("resourceVersion"))
            seen: tuple[str, Key | None] | None = known.get(ident)
            if event == streams.LISTED:
                listing[ident] = (version, key)
                if seen is not None and seen[0] == version:
                    if stream is TRAINJOBS:
                        self._changed(key)  # every managed TrainJob is audited at every resync
                    continue  # unchanged since the watch told it
                self._keep(stream, obj, key, listed=True)
                if stream is TRAINJOBS:
                    self._manage(key)
            elif event == "DELETED":
                known.pop(ident, None)
                self.store.remove(stream.kind, ident)
                self._count(stream, namespace, len(known))
                if stream is TRAINJOBS:
                    self._unmanage(key)
                    continue
            else:
                known[ident] = (version, key)
                self._keep(stream, obj, key)
                self._count(stream, namespace, len(known))
                if stream is TRAINJOBS:
                    self._manage(key)
            self._changed(key)
            if stream in (JOBS, PODS):
                # A copy of a TrainJob under another name runs the original's token: its pods
                # are the original's to compare as well (core.rules.ownership.Claims).
                for other in self.store.sharing_token(stream.kind, obj) - {key}:
                    self._changed(other)
            if seen is not None and seen[1] != key:
                self._changed(seen[1])

    def _keep(
        self, stream: Stream, obj: Mapping[str, Any], key: Key | None, *, listed: bool = False
    ) -> None:
        """Keep the object; of a TrainJob, note each record the change moved back.

        Two versions tell what neither does alone: the one kept and the one told now (after a
        watch that could not go on, the one listed), so an erasure and the rerun it hides are
        found even when both happen between two passes.
        """
        before = self.store.put(stream.kind, obj)
        if stream is not TRAINJOBS or key is None:
            return
        if before is None:
            if listed and self._policy_mode:
                self._tell_raise(key, obj, trainjob.admission_floor(obj))
            return
        self._note(key, erasure.decide_erasures(before, obj), earlier=False)
        if self._policy_mode:
            self._tell_raise(key, obj, trainjob.raise_seen(before, obj))

    def _tell_raise(self, key: Key, job: Mapping[str, Any], admission: object) -> None:
        """Policy mode: tell the raise to `admission` on the TrainJob and its Workload.

        A raise a watch saw made, or the last one a list finds (the floor), which may have been
        made before this term began (before the first list, or under another leader), told or
        not by another replica.

        Each Event is named for its object's UID and the new A, so a raise is told once on each
        whichever replica, watch or list tells it: a name already posted is not posted again
        (409). The Events present are the record, for as long as the API server keeps them
        (its --event-ttl, 1 h by default). J is the JobSet's as the store holds it.
        """
        if not isinstance(admission, int) or admission < 1:
            return
        restart = trainjob.restart_count(self.store.view(key).jobset)
        j = restart if isinstance(restart, int) else 0
        serve.RAISES.inc()
        self._events.submit(self._post_raise, job, admission, j)

    def _post_raise(self, job: Mapping[str, Any], admission: int, restart: int) -> None:
        """Post a raise's Events (the events thread): the TrainJob's, then its Workload's."""
        meta = job["metadata"]
        self._gateway.emit_event(
            job,
            event_type="Normal",
            reason=events.RAISED,
            message=events.raise_message(admission=admission, restart=restart),
            step=COMPONENT,
            name=events.raise_event_name(meta["name"], f"{meta.get('uid')} A={admission}"),
        )
        selector = f"{wire.KUEUE_JOB_UID_LABEL}={meta.get('uid')}"
        for found in self._gateway.list_workloads(meta["namespace"], selector):
            name, uid = found["metadata"]["name"], found["metadata"].get("uid")
            self._gateway.emit_event(
                found,
                event_type="Normal",
                reason=events.RAISED,
                message=events.raise_message(admission=admission, restart=restart, workload=name),
                step=COMPONENT,
                name=events.raise_event_name(name, f"{uid} A={admission}"),
                involved=events.WORKLOAD,
            )

    def _note(self, key: Key, erasures: Erasures, *, earlier: bool) -> None:
        """Note erasures of the TrainJob, made after (or, `earlier`, before) those noted."""
        if not erasures:
            return
        with self._lock:
            noted = self._erased.setdefault(key, {})
            for one in erasures:
                other = noted.get(one.annotation)
                if other is not None:
                    one = one.then(other) if earlier else other.then(one)
                noted[one.annotation] = one

    def _resync(self) -> None:
        """Every resync, audit each managed TrainJob again from the store.

        Its runtime is read again, so what no event of its own tells (a runtime edited) is
        found within a resync. The passes are spread over the resync, not queued at once: a
        thousand at once would hold up, by seconds, the audit of a change made meanwhile.
        """
        period = self._settings.resync_seconds
        while not self._ended.wait(period):
            with self._lock:
                self._runtimes.clear()
                keys = list(self._managed)
            for index, key in enumerate(keys):
                self.queue.add_after(key, index * period / len(keys))

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
            self._erased.pop(key, None)
            self._uncarried.pop(key, None)
            self._count_uncarried()

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
            again: Again = None
            try:
                again = self._audit(key)
            except Exception:  # a bug: logged with its traceback, the TrainJob tried later
                logger.exception(f"auditing TrainJob {key[0]}/{key[1]} failed")
                serve.AUDITS.labels("error").inc()
                again = MAX_BACKOFF
            finally:
                self.queue.done(key)
            if again is RETRY:
                serve.RETRIES.labels("audit").inc()
            self.queue.settle(key, again)
            serve.AUDIT_QUEUE_DEPTH.set(len(self.queue))

    def _audit(self, key: Key) -> Again:
        """One audit pass; seconds until the TrainJob is audited again, None on its next change."""
        namespace, name = key
        with self._lock:
            if key not in self._managed:
                return None  # deleted, or no longer labelled, since it was queued
            since = self._changed_at.pop(key, None)
        log = logger.bind(trainjob=name, namespace=namespace)
        try:
            outcome = self._pass(key)
            if self._policy_mode:
                self._deactivate_if_foreign(key, log)
            self._carried(key, log)
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
            log.bind(error=str(e)).warning("API server unavailable: audit again")
            self._keep_since(key, since)
            return RETRY
        except DispatchError as e:  # forbidden, refused by a webhook: the next change or resync
            serve.AUDITS.labels("error").inc()
            log.bind(error=str(e), exit_code=e.exit_code).error("cannot audit the TrainJob")
            return None
        self._tell(key, outcome, since, log)
        return None

    def _deactivate_if_foreign(self, key: Key, log: Any) -> None:
        """Policy mode: deactivate the Workload of a suspended TrainJob flagged foreign.

        As Kueue deactivates one whose check the gate set Rejected: quota released, none
        reserved again until a person clears the flag and sets spec.active true. The flag is
        read afresh (a person may have cleared it since the watch told), and the write is
        preconditioned on the Workload as listed.
        """
        namespace, name = key
        cached = self.store.view(key).trainjob
        if cached is None or trainjob.foreign_and_suspended(cached) is None:
            return
        job = self._gateway.read_trainjob(namespace, name)
        flag = trainjob.foreign_and_suspended(job)
        if flag is None:
            return
        selector = f"{wire.KUEUE_JOB_UID_LABEL}={job['metadata']['uid']}"
        for found in self._gateway.list_workloads(namespace, selector):
            body = workload.build_deactivation(found, reason=flag.reason)
            if body is None:
                continue
            self._gateway.update_workload(body, found["metadata"]["resourceVersion"])
            serve.REFUSALS.labels("foreign").inc()
            log.bind(workload=found["metadata"]["name"]).warning(
                "deactivated the Workload of a TrainJob flagged foreign"
            )
            for subject, involved in ((found, events.WORKLOAD), (job, events.TRAINJOB)):
                self._gateway.emit_event(
                    subject,
                    event_type="Warning",
                    reason=events.REFUSED,
                    message=f"Workload {found['metadata']['name']} deactivated: {flag.reason}",
                    step=COMPONENT,
                    involved=involved,
                )

    def _pass(self, key: Key) -> AuditOutcome:
        """One pass with the erasures noted so far; those it did not write are noted again."""
        with self._lock:
            erased = tuple(self._erased.pop(key, {}).values())
        try:
            return self._decide(key, erased)
        except BaseException:
            self._note(key, erased, earlier=True)
            raise

    def _decide(self, key: Key, erased: Erasures) -> AuditOutcome:
        """Decide from the store; only a pass that would write reads (and writes) afresh."""
        namespace, name = key
        view = self.store.view(key)
        if view.trainjob is None:
            raise NotFound(f"TrainJob {namespace}/{name} is not in the store")
        trainjob = erasure.restored(view.trainjob, erased)
        job_audit = auditing.audit_of(
            trainjob,
            view.jobset,
            runtime_now=self._runtime(namespace, trainjob, view.snapshot),
            jobs=view.jobs,
            pods=view.pods,
        )
        decision = auditing.decide(
            trainjob,
            view.jobset,
            job_audit,
            jobset_after=view.jobset,
            created=self._created(namespace, trainjob),
            erased=erased,
        )
        if decision.changes is None:  # nothing to record, no finding not already flagged
            version = str(trainjob["metadata"].get("resourceVersion"))
            return AuditOutcome(
                name=name, findings=decision.findings, recorded=False, resource_version=version
            )
        unlabelled = view.unlabelled(name)
        tries = 1
        while True:
            try:
                return auditing.audit_read(
                    self._gateway, namespace, name, also=unlabelled, erased=erased, step=COMPONENT
                )
            except PreconditionFailed:
                # Trainer writes the TrainJob's status as its JobSet moves, and each status
                # write fails a PUT read before it. Read and decide again now, as client-go's
                # RetryOnConflict does, rather than behind every key queued meanwhile.
                if tries == WRITE_TRIES:
                    raise
                tries += 1
                serve.AUDITS.labels("conflict").inc()

    def _carried(self, key: Key, log: Any) -> None:
        """Tell, once, an opening or hold Trainer could not carry into the JobSet; count them.

        Not a finding: nothing was reset, and the job is not flagged foreign; it is stuck, or
        goes on running held, and a person decides (docs/operations.md). The store's JobSet
        may lag its TrainJob, so what the store shows uncarried is decided again from fresh
        reads, TrainJob first.
        """
        namespace, name = key
        view = self.store.view(key)
        job: Mapping[str, Any] | None = view.trainjob
        uncarried: Uncarried | None = None
        if job is not None and isinstance(carried.decide_carried(job, view.jobset), Uncarried):
            job = self._gateway.read_trainjob(namespace, name)
            found = carrying.read_carried(
                self._gateway, job, self._gateway.read_jobset(namespace, name)
            )
            uncarried = found if isinstance(found, Uncarried) else None
        with self._lock:
            new = uncarried is not None and self._uncarried.get(key) is not uncarried.held
            if uncarried is None:
                self._uncarried.pop(key, None)
            else:
                self._uncarried[key] = uncarried.held
            self._count_uncarried()
        if job is None or uncarried is None or not new:
            return
        log.bind(reason=uncarried.reason).warning("not held" if uncarried.held else "not opened")
        self._gateway.emit_event(
            job,
            event_type="Warning",
            reason=events.NOT_HELD if uncarried.held else events.NOT_OPENED,
            message=uncarried.reason,
            step=COMPONENT,
            name=events.uncarried_event_name(job),
        )

    def _count_uncarried(self) -> None:
        """The gauges of the jobs not opened and not held; called holding the lock."""
        held = sum(self._uncarried.values())
        serve.UNOPENED.set(len(self._uncarried) - held)
        serve.UNHELD.set(held)

    def _runtime(
        self, namespace: str, trainjob: Mapping[str, Any], taken: Mapping[str, Any] | None
    ) -> dict[str, Any] | Snapshot | None:
        """What the TrainJob is built from: its runtime snapshot, else the runtime it names.

        The snapshot (Trainer v2.3.0 and later take one) as the store holds it, the runtime as
        read since the last resync.
        """
        if taken is not None:
            return auditing.snapshot_of(taken)
        kind, name = auditing.runtime_ref(trainjob)
        memo = (namespace, kind, name)
        with self._lock:
            if memo in self._runtimes:
                return self._runtimes[memo]
        found = self._gateway.find_runtime(kind, name, namespace)
        with self._lock:
            self._runtimes[memo] = found
        return found

    def _created(self, namespace: str, trainjob: Mapping[str, Any]) -> dict[str, Any] | None:
        """The ledger's record that start created the TrainJob's identity, as the store holds it.

        One not listed yet is a finding missed by this pass, never one made: the pass that
        writes reads it afresh (auditing.audit_read), and the next compares again.
        """
        name = ledger.recorded_name(trainjob)
        return None if name is None else self.store.kept(store.RECORDS, (namespace, name))

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
