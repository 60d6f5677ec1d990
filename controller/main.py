"""`dispatch-admission-controller`: gates every Workload of this project's AdmissionChecks.

Level-triggered: each namespace's (or the cluster's) Workloads are listed, then watched,
and listed again every resync; whatever a watch said or missed, each Workload that lists
one of our checks and is not finished goes into a work queue, and a bounded pool of workers
gates each as its watch last told it (controller/reconcile.py). Only the replica that holds
the Lease lists, watches and writes; once its Lease is not renewed within the renew deadline
it sends no more writes and exits (75), and its Deployment starts it again as a standby.
With --audit (the default) the leader also runs the auditor (controller/auditor.py): every
managed TrainJob audited as it, its JobSet, Jobs or pods change. With --no-gate (policy mode:
the API server raises A in Kueue's own opening) it runs the auditor only.
"""

from __future__ import annotations

import signal
import socket
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, Final

from loguru import logger

from dispatch_k8s.controller import packing, secure_metrics, serve, streams
from dispatch_k8s.controller.auditor import Auditor
from dispatch_k8s.controller.leader import Elector
from dispatch_k8s.controller.mirror import Key, Mirror, key_of
from dispatch_k8s.controller.queue import RETRY, Again, WorkQueue
from dispatch_k8s.controller.reconcile import Gatekeeper
from dispatch_k8s.controller.settings import ControllerSettings
from dispatch_k8s.controller.threads import Supervisor
from dispatch_k8s.core.rules import gate, wire, workload
from dispatch_k8s.core.rules.errors import BadInput, DispatchError, Fenced
from dispatch_k8s.core.shell import clock, runner
from dispatch_k8s.core.shell.gateway import Gateway, kinds
from dispatch_k8s.core.shell.gateway.kinds import Kind
from dispatch_k8s.core.shell.gateway.ratelimit import TokenBucket
from dispatch_k8s.core.shell.settings import load_settings

PROG: Final = "dispatch-admission-controller"
Event = streams.Event


class Leading:
    """What the leader runs: watches feeding a work queue, and the workers draining it.

    One instance per process, for its one term: every write it sends is fenced by the Lease
    (controller/leader.py), and a lapsed Lease ends the process.
    """

    def __init__(self, gateway: Gateway, settings: ControllerSettings) -> None:
        self._gateway = gateway
        self._settings = settings
        self.ended = threading.Event()
        self.supervisor = Supervisor(self.ended)
        self.queue: WorkQueue[Key] = WorkQueue()
        self._checks: frozenset[str] = frozenset()
        self._known_checks = threading.Event()
        self._workloads: Mirror[dict[str, Any]] = Mirror(_as_told)
        # Managed TrainJobs as their watch last told them: a pass raises on one with its
        # resourceVersion as the precondition, so a stale copy is a 409, never a wrong raise.
        # Packed (controller/packing.py): a thousand TrainJobs as dicts were 50 MiB of RSS.
        self._trainjobs: Mirror[bytes] = Mirror(packing.pack)
        self.gatekeeper = Gatekeeper(
            gateway,
            checks=lambda: self._checks,
            other_workloads=settings.other_workloads,
            on_refusal=settings.on_refusal,
            backoff=gate.Backoff(
                base_seconds=settings.backoff_base_seconds,
                max_seconds=settings.backoff_max_seconds,
                limit_count=settings.backoff_limit_count,
            ),
            cached_trainjob=self._cached_trainjob,
        )
        self._threads: list[threading.Thread] = []
        self.auditor = Auditor(gateway, settings, ended=self.ended) if settings.audit else None

    def start(self) -> None:
        """Start the watches and the workers (and the auditor's)."""
        if self.auditor is not None:
            self.auditor.start()
        if not self._settings.gate:  # policy mode: no check to gate, the auditor only
            return
        self._spawn("checks", self._watch_checks)
        scopes: list[str | None] = [*self._settings.namespaces] or [None]
        for namespace in scopes:
            self._spawn(f"workloads {namespace or '*'}", self._watch_workloads, namespace)
            self._spawn(f"trainjobs {namespace or '*'}", self._watch_trainjobs, namespace)
        for index in range(self._settings.workers):
            self._spawn(f"worker {index}", self._work)

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        self._threads.append(self.supervisor.spawn(name, target, *args))

    def end(self, *, timeout: float) -> None:
        """Stop handing out work; wait for the workers' passes in flight to finish."""
        self.ended.set()
        self.queue.close()
        for thread in self._threads:
            if thread.name.startswith("worker"):
                thread.join(timeout)
        if self.auditor is not None:
            self.auditor.end(timeout=timeout)
        self.gatekeeper.close()

    # Watches

    def _list_and_watch(
        self, resource: Kind, namespace: str | None, *, label_selector: str = "", relist: bool
    ) -> Iterator[Event]:
        """The collection's stream until the term ends: with `relist`, listed every resync."""
        return streams.list_and_watch(
            self._gateway,
            resource,
            namespace,
            ended=self.ended,
            resync_seconds=self._settings.resync_seconds,
            label_selector=label_selector,
            relist=relist,
        )

    def _watch_checks(self) -> None:
        checks: dict[str, dict[str, Any]] = {}
        events = self._list_and_watch(kinds.ADMISSION_CHECK, None, relist=True)
        for kind, obj in streams.whole_lists(events):
            if kind == "LISTED":
                checks = {item["metadata"]["name"]: item for item in obj.get("items") or []}
            elif kind in ("ADDED", "MODIFIED"):
                checks[obj["metadata"]["name"]] = obj
            elif kind == "DELETED":
                checks.pop(obj["metadata"]["name"], None)
            else:
                continue
            ours = {name: check for name, check in checks.items() if gate.is_ours(check)}
            for check in ours.values():
                self._keep_active(check)
            if frozenset(ours) != self._checks:
                self._checks = frozenset(ours)
                logger.bind(checks=sorted(ours)).info("gating the Workloads of these checks")
                for item in self._workloads.values():
                    self._observe(item)
            self._known_checks.set()

    def _keep_active(self, check: dict[str, Any]) -> None:
        wanted = gate.active_status(check, now=clock.now())
        if not gate.needs_active_write(check, wanted):
            return
        try:
            self._gateway.apply_admission_check_status(wanted, manager=workload.CHECK_MANAGER)
        except DispatchError as e:
            logger.bind(check=check["metadata"]["name"], error=str(e)).warning(
                "cannot set the AdmissionCheck's Active condition"
            )

    def _watch_workloads(self, namespace: str | None) -> None:
        self._known_checks.wait()  # which Workloads are ours depends on which checks are
        # Listed again every resync: each Workload gated again, whatever a watch missed.
        events = self._list_and_watch(kinds.WORKLOAD, namespace, relist=True)
        for told in self._workloads.follow(events, namespace):
            self._observe(told)

    def _watch_trainjobs(self, namespace: str | None) -> None:
        # A cache only, as client-go's reflector keeps one: listed once, then watched on from
        # the last version told, listed again only when that is too old (410 Gone).
        selector = f"{wire.MANAGED_BY_LABEL}={wire.MANAGED_BY}"
        events = self._list_and_watch(
            kinds.TRAINJOB, namespace, label_selector=selector, relist=False
        )
        for _ in self._trainjobs.follow(events, namespace):
            pass

    def _cached_trainjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        packed = self._trainjobs.get((namespace, name))
        return None if packed is None else packing.unpack(packed)

    def _observe(self, obj: dict[str, Any]) -> None:
        if gate.our_checks(obj, self._checks) and not workload.is_finished(obj):
            self.gatekeeper.seen(obj)
            self.queue.add(key_of(obj))
            serve.QUEUE_DEPTH.set(len(self.queue))

    # Workers

    def _work(self) -> None:
        while (key := self.queue.get()) is not None:
            current = self._workloads.get(key)
            if current is None:  # deleted since it was queued
                self.queue.done(key)
                self.queue.forget(key)
                continue
            queue = workload.cluster_queue(current)
            began = time.monotonic()
            again: Again = None
            try:
                again = self.gatekeeper.gate(current)
            except Exception:  # a bug: logged with its traceback, the Workload tried later
                logger.exception(f"gating Workload {key[0]}/{key[1]} failed")
                serve.PASS_ERRORS.labels(queue, "bug").inc()
                again = RETRY
            finally:
                self.queue.done(key)
            serve.PASS_SECONDS.labels(queue).observe(time.monotonic() - began)
            serve.PASSES.labels(queue, _result(again)).inc()
            if again is RETRY:
                serve.RETRIES.labels("gate").inc()
            self.queue.settle(key, again)
            serve.QUEUE_DEPTH.set(len(self.queue))


def _result(again: Again) -> str:
    """A pass's result as controller-runtime's reconcile metric words it."""
    if again is RETRY:
        return "retry"
    return "success" if again is None else "requeue_after"


def _as_told(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


def run(settings: ControllerSettings) -> int:
    """Serve probes and metrics, campaign for the Lease, gate while leading; the exit code."""
    stop = threading.Event()

    def on_signal(signum: int, _: FrameType | None) -> None:
        logger.bind(signal=signal.Signals(signum).name).info("stopping")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    probes = serve.Probes()
    apart = bool(settings.metrics_address)
    try:
        server = serve.serve(settings.address, probes, metrics=not apart)
    except (OSError, ValueError) as e:
        raise BadInput(f"{PROG}: cannot serve on --address {settings.address}: {e}") from e
    gateway = Gateway.connect(kubeconfig=settings.kubeconfig, context=settings.context)
    servers = [server]
    if apart:
        try:
            context = secure_metrics.tls_context(settings.metrics_cert_dir)
            authorizer = secure_metrics.Authorizer(gateway)
            servers.append(
                secure_metrics.serve_metrics(settings.metrics_address, authorizer, context)
            )
        except (OSError, ValueError, ssl.SSLError) as e:
            server.shutdown()
            raise BadInput(
                f"{PROG}: cannot serve on --metrics-address {settings.metrics_address}: {e}"
            ) from e
    identity = settings.identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    elector = Elector(
        gateway,
        namespace=settings.lease_namespace,
        name=settings.lease_name,
        identity=identity,
        lease_seconds=settings.lease_seconds,
    )
    serve.LEADER.set_function(lambda: 1.0 if elector.leads() else 0.0)
    probes.healthy.set()
    probes.ready.set()  # a standby is ready too: it takes over when the leader goes
    logger.bind(identity=identity, lease=f"{settings.lease_namespace}/{settings.lease_name}").info(
        "campaigning"
    )
    code = 0
    if elector.acquire(stop):
        # One term per process: every write of the term is fenced by the Lease, and a term
        # that lapses ends the process (as controller-runtime's managers do), so nothing
        # begun while leading goes on after another replica may have taken over.
        limit = (
            TokenBucket(
                settings.kube_api_qps,
                settings.kube_api_burst,
                waited=serve.RATE_LIMITER_WAIT.observe,
            )
            if settings.kube_api_qps > 0
            else None
        )
        fenced = gateway.fenced(elector.fence, limit=limit, timed=serve.observe_request)
        term = Leading(fenced, settings)
        lost = threading.Event()
        logger.info("leading")
        term.start()
        keeper = threading.Thread(target=elector.keep, args=(stop, lost), name="lease")
        keeper.start()
        while not (stop.is_set() or lost.is_set() or term.supervisor.died.is_set()):
            stop.wait(1.0)
        if lost.is_set():
            logger.error("exiting: another replica may lead now")
            code = Fenced.exit_code
        else:
            if term.supervisor.died.is_set():
                probes.healthy.clear()
                logger.error("exiting: a thread of the term died (a bug); the Lease is released")
                code = 1
                stop.set()  # ends the renewals too
            term.end(timeout=30.0)
            keeper.join()
            elector.release()
    for running in servers:
        running.shutdown()
    logger.info("stopped")
    return code


def main() -> None:
    """The console script: settings from flags and DISPATCH_* env, exit codes as the steps'."""
    runner.guarded(PROG.removeprefix("dispatch-"), _configured_run)


def _configured_run() -> int:
    settings = load_settings(
        ControllerSettings, prog=PROG, argv=sys.argv[1:], about=ABOUT, example=EXAMPLE
    )
    runner.configure_logging(PROG.removeprefix("dispatch-"), level=settings.log_level)
    return run(settings)


ABOUT = (
    f"Kueue admission-check controller for controllerName {workload.CHECK_MANAGER}: raises A once\n"
    "per reservation, then approves it; audits every managed TrainJob (--no-gate: only audits)."
)
EXAMPLE = f"""\
{PROG} --lease-namespace dispatch-system --address 0.0.0.0:8080 --workers 8
"""
