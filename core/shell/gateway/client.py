"""A connection to one cluster: generic verbs over the kinds table, and the project's requests.

Every write is preconditioned on the resourceVersion that was read (a stale read is a 409
and writes nothing). A 409 is never retried: the read is stale, the step fails with exit 3
and its stage is run again from the read. Reads are retried on 429/5xx/connection errors;
writes only where the server surely did not apply them (429, connection refused). Each
request goes through the transport (transport.py: rate limit, fence, dry run, deadline,
timing); an Event through the recorder (recorder.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Unpack

from dispatch_k8s.core.rules import events, shapes, wire
from dispatch_k8s.core.rules.errors import (
    Expired,
    Forbidden,
    NotFound,
    PreconditionFailed,
    Transient,
)
from dispatch_k8s.core.shell.gateway import kinds, recorder
from dispatch_k8s.core.shell.gateway.api_errors import (
    ATTEMPTS,
    ApiError,
    error_for,
    unreadable,
    why_unreachable,
    with_retries,
)
from dispatch_k8s.core.shell.gateway.bodies import as_object, iter_list_items, watch_events
from dispatch_k8s.core.shell.gateway.kinds import Kind
from dispatch_k8s.core.shell.gateway.ratelimit import TokenBucket
from dispatch_k8s.core.shell.gateway.transport import (
    REQUEST_TIMEOUT,
    Deadline,
    Sending,
    Timed,
    Timeout,
    Transport,
    api_client,
)
from dispatch_k8s.core.shell.literals import DryRun

if TYPE_CHECKING:  # imported where first used: a step that never connects never pays for them
    from kubernetes.client import ApiClient

WATCH_GRACE: Final = 15  # seconds past a watch's own timeout before its connection is given up
PAGE_SIZE: Final = 500  # kubectl's --chunk-size: one page of a large pod list at a time
APPLY_PATCH: Final = "application/apply-patch+yaml"


class Gateway:
    """A connection to one cluster; each method is one API request, sent by its Transport.

    Under a `dry_run` every write (not a read) is as `DryRun` says, and no Event is posted.
    """

    def __init__(self, api: ApiClient, **sending: Unpack[Sending]) -> None:
        self._api = api
        self._transport = Transport(api, **sending)

    def fenced(
        self,
        fence: Callable[[], None],
        *,
        limit: TokenBucket | None = None,
        timed: Timed | None = None,
    ) -> Gateway:
        """The same connection, with a fence, a rate limit and a timer for the leader's work.

        `fence` is called before each write, `limit` taken before each request, and `timed`
        told how long each took (its verb, resource and seconds). `fence` raises (Fenced)
        once this process may no longer write: a leader whose Lease lapsed. The Lease's own
        requests go through a connection without these: no burst of work may delay a
        renewal.
        """
        return type(self)(
            self._api,
            fence=fence,
            limit=limit,
            timed=timed,
            deadline=self._transport.deadline,
            dry_run=self._transport.dry_run,
        )

    @classmethod
    def connect(
        cls,
        *,
        kubeconfig: Path | None,
        context: str | None,
        request_timeout: float = 0,
        dry_run: DryRun = "none",
    ) -> Gateway:
        """In-cluster config inside a pod, else the kubeconfig (docs/design.md §3).

        A `request_timeout` above 0 is a deadline for every request from now on (Deadline).
        """
        api = api_client(kubeconfig=kubeconfig, context=context)
        deadline = Deadline(request_timeout) if request_timeout > 0 else None
        return cls(api, deadline=deadline, dry_run=dry_run)

    def take_unsent(self) -> list[dict[str, Any]]:
        """The writes --dry-run=client kept back since it was last asked, in order."""
        return self._transport.take_unsent()

    # Generic verbs: every path is built from the kinds table

    def get(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        timeout: Timeout = REQUEST_TIMEOUT,
        attempts: int = ATTEMPTS,
    ) -> dict[str, Any]:
        """GET one object."""
        path = kind.path(namespace, name)
        return with_retries(
            lambda: self._transport.json("GET", path, timeout=timeout),
            what=kind.describe(namespace, name),
            server=self._transport.server,
            attempts=attempts,
        )

    def find(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        timeout: Timeout = REQUEST_TIMEOUT,
        attempts: int = ATTEMPTS,
    ) -> dict[str, Any] | None:
        """GET one object; None when there is none."""
        try:
            return self.get(kind, namespace, name, timeout=timeout, attempts=attempts)
        except NotFound:
            return None

    def list_items(
        self,
        kind: Kind,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        rest: dict[str, Any] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """LIST page by page (kubectl's page size), each item decoded and passed on alone.

        Memory stays one page of text and one object whatever the collection's size. Once
        the iteration ends, `rest` holds the last page's other members: its
        `metadata.resourceVersion` is the list's, to watch from. A page whose continue token
        expired (410) is Transient: list again from the start.
        """
        rest = {} if rest is None else rest
        path = kind.path(namespace)
        what = f"{kind.plural} in {namespace or 'all namespaces'}"
        if label_selector:
            what = f"{what} ({label_selector})"
        token: str | None = None
        while True:
            query: list[tuple[str, str | int | bool]] = [("limit", PAGE_SIZE)]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if token:
                query.append(("continue", token))
            text = with_retries(
                functools.partial(self._transport.text, "GET", path, query=query),
                what=what,
                server=self._transport.server,
            )
            rest.clear()
            try:
                yield from (as_object(item) for item in iter_list_items(text, rest))
            except (ValueError, TypeError) as e:  # read as it is passed on: too late to retry
                raise Transient(f"{what}: {unreadable(e)}") from e
            del text
            token = shapes.mapping(rest.get("metadata")).get("continue")
            if not token:
                return

    def create(
        self,
        kind: Kind,
        body: Mapping[str, Any],
        *,
        timeout: Timeout = REQUEST_TIMEOUT,
        attempts: int = ATTEMPTS,
    ) -> dict[str, Any] | None:
        """POST `body`; None when an object of its name already exists."""
        meta = body["metadata"]
        path = kind.path(meta.get("namespace"))

        def post() -> dict[str, Any] | None:
            try:
                return self._transport.json("POST", path, body=dict(body), timeout=timeout)
            except ApiError as e:
                if e.status == 409 and e.reason == "AlreadyExists":
                    return None
                raise

        what = kind.describe(meta.get("namespace"), meta["name"])
        return with_retries(
            post, what=what, server=self._transport.server, write=True, attempts=attempts
        )

    def served_resources(self, group: str, version: str) -> set[str]:
        """The resources the API server serves in one group version (discovery).

        None when it does not serve the group version at all.
        """
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            found = with_retries(
                lambda: self._transport.json("GET", path),
                what=f"{group}/{version}",
                server=self._transport.server,
            )
        except NotFound:
            return set()
        return {str(r.get("name")) for r in shapes.mappings(found.get("resources"))}

    def review(self, kind: Kind, spec: Mapping[str, Any]) -> dict[str, Any]:
        """POST a review (TokenReview, SubjectAccessReview); the answer is in its status.

        The API server keeps nothing of it, so it is sent again as a read is.
        """
        body = {"apiVersion": f"{kind.group}/{kind.version}", "kind": kind.name, "spec": spec}
        path = kind.path()
        return with_retries(
            lambda: self._transport.json("POST", path, body=body),
            what=kind.name,
            server=self._transport.server,
        )

    def update(
        self,
        kind: Kind,
        body: Mapping[str, Any],
        resource_version: str,
        *,
        timeout: Timeout = REQUEST_TIMEOUT,
        attempts: int = ATTEMPTS,
    ) -> dict[str, Any]:
        """PUT `body` only if the server still holds `resource_version` (else 409)."""
        meta = body["metadata"]
        sent = {**body, "metadata": {**meta, "resourceVersion": resource_version}}
        path = kind.path(meta.get("namespace"), meta["name"])
        return with_retries(
            lambda: self._transport.json("PUT", path, body=sent, timeout=timeout),
            what=kind.describe(meta.get("namespace"), meta["name"]),
            server=self._transport.server,
            write=True,
            attempts=attempts,
        )

    def apply_status(self, kind: Kind, body: Mapping[str, Any], *, manager: str) -> dict[str, Any]:
        """Server-side apply to the status subresource; a resourceVersion in `body` is checked."""
        meta = body["metadata"]
        path = kind.path(meta.get("namespace"), meta["name"], subresource="status")
        query: list[tuple[str, str | int | bool]] = [("fieldManager", manager), ("force", True)]
        return with_retries(
            # JSON is YAML: the client sends the dict as JSON
            lambda: self._transport.json(
                "PATCH", path, body=dict(body), query=query, content_type=APPLY_PATCH
            ),
            what=f"{kind.describe(meta.get('namespace'), meta['name'])} status",
            server=self._transport.server,
            write=True,
        )

    def watch(
        self,
        kind: Kind,
        namespace: str | None,
        *,
        version: str,
        timeout: float,
        label_selector: str = "",
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """The collection's changes after `version`, as (type, object), BOOKMARKs included.

        Ends when the server ends the watch (about `timeout`); Expired when `version` is too
        old to watch from (list again), Transient when the connection is lost.
        """
        import urllib3

        path = kind.path(namespace)
        what = f"watch {path}"
        query: list[tuple[str, str | int | bool]] = [
            ("resourceVersion", version),
            ("timeoutSeconds", max(1, int(timeout))),
            ("allowWatchBookmarks", True),
            ("watch", True),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        try:
            response = self._transport.send(
                "GET",
                path,
                query=query,
                # The server ends the watch at timeoutSeconds; a connection that stops
                # answering without closing (no FIN) must end too, not hang the caller.
                timeout=(REQUEST_TIMEOUT, timeout + WATCH_GRACE),
            )
            try:
                for event in watch_events(response):
                    yield str(event["type"]), as_object(event["object"])
            finally:  # also when the caller stops early: the connection is not reused
                response.response.close()
                response.response.release_conn()
        except ApiError as e:
            if e.status == 410:
                raise Expired(f"{what}: resourceVersion {version} is too old") from e
            raise error_for(e, what) from e
        except urllib3.exceptions.HTTPError as e:  # cut, reset or stalled: run it again
            self._transport.out_of_time(f"during {what}")
            server = self._transport.server
            raise Transient(f"{what}: connection lost with {server}: {why_unreachable(e)}") from e

    # The project's requests, in its own words

    def read_trainjob(self, namespace: str, name: str) -> dict[str, Any]:
        """GET one TrainJob."""
        return self.get(kinds.TRAINJOB, namespace, name)

    def find_trainjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET one TrainJob; None when there is none."""
        return self.find(kinds.TRAINJOB, namespace, name)

    def create_trainjob(self, trainjob: Mapping[str, Any]) -> dict[str, Any] | None:
        """POST a TrainJob; None when one of that name already exists."""
        return self.create(kinds.TRAINJOB, trainjob)

    def update_trainjob(self, trainjob: Mapping[str, Any], resource_version: str) -> dict[str, Any]:
        """PUT the TrainJob only if the server still holds `resource_version` (else 409)."""
        return self.update(kinds.TRAINJOB, trainjob, resource_version)

    def list_trainjobs(
        self, namespace: str, label_selector: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """LIST the namespace's TrainJobs page by page."""
        return self.list_items(kinds.TRAINJOB, namespace, label_selector=label_selector or "")

    def find_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET one ConfigMap (the ledger, core/rules/ledger.py); None when there is none."""
        return self.find(kinds.CONFIG_MAP, namespace, name)

    def create_config_map(self, config_map: Mapping[str, Any]) -> dict[str, Any] | None:
        """POST a ConfigMap; None when one of that name already exists."""
        return self.create(kinds.CONFIG_MAP, config_map)

    def read_runtime(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        """GET the (Cluster)TrainingRuntime a TrainJob names."""
        return self.get(kinds.RUNTIMES[kind], namespace, name)

    def find_runtime(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """GET a (Cluster)TrainingRuntime; None when it is gone."""
        if kind not in kinds.RUNTIMES:
            return None  # not a kind Trainer serves: as good as gone
        return self.find(kinds.RUNTIMES[kind], namespace, name)

    def read_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET the JobSet Trainer made for a TrainJob; None before it exists."""
        return self.find(kinds.JOBSET, namespace, name)

    def list_jobsets(self, namespace: str) -> Iterator[dict[str, Any]]:
        """LIST the namespace's JobSets page by page."""
        return self.list_items(kinds.JOBSET, namespace)

    def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """LIST batch/v1 Jobs, all of the namespace without a selector."""
        return [*self.list_items(kinds.JOB, namespace, label_selector=label_selector or "")]

    def list_pods(
        self, namespace: str, label_selector: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """LIST pods page by page, so a large JobSet never loads at once.

        Each pod is dropped once it is passed on, so what the audit keeps per pod is not
        scattered among a whole page's freed objects. No field selector narrows the list: the
        audit reads finished pods too (their J, their slot), so none would be exact.
        """
        return self.list_items(kinds.POD, namespace, label_selector=label_selector or "")

    def list_trainer_failures(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        """LIST Trainer's Events that it could not write a TrainJob's JobSet, by the job's UID.

        Read for their message alone (core/rules/carried.py), best effort: where these
        credentials may not list Events, none (the reason then says it was not readable).
        """
        selector = f"involvedObject.uid={uid},reason={wire.TRAINER_FAILED_REASON}"
        try:
            return [*self.list_items(kinds.EVENT, namespace, field_selector=selector)]
        except Forbidden:
            return []

    def read_workload(self, namespace: str, name: str) -> dict[str, Any]:
        """GET one Workload."""
        return self.get(kinds.WORKLOAD, namespace, name)

    def list_workloads(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """LIST the Workloads that match a label selector."""
        return [*self.list_items(kinds.WORKLOAD, namespace, label_selector=label_selector)]

    def update_workload(self, workload: Mapping[str, Any], resource_version: str) -> dict[str, Any]:
        """PUT a Workload (its spec.active), preconditioned on `resource_version`."""
        return self.update(kinds.WORKLOAD, workload, resource_version)

    def apply_workload_status(self, workload: Mapping[str, Any], *, manager: str) -> dict[str, Any]:
        """Server-side apply to workloads/status; the body's resourceVersion is the precondition."""
        return self.apply_status(kinds.WORKLOAD, workload, manager=manager)

    def apply_admission_check_status(
        self, check: Mapping[str, Any], *, manager: str
    ) -> dict[str, Any]:
        """Server-side apply to admissionchecks/status (its conditions are a map list)."""
        return self.apply_status(kinds.ADMISSION_CHECK, check, manager=manager)

    # A Lease request is tried once, within `timeout`: the elector retries on its own period
    # and must know by its renew deadline whether it still leads, not a minute later.

    def read_lease(self, namespace: str, name: str, *, timeout: float) -> dict[str, Any] | None:
        """GET a Lease; None when there is none."""
        return self.find(kinds.LEASE, namespace, name, timeout=timeout, attempts=1)

    def write_lease(self, lease: Mapping[str, Any], *, timeout: float) -> dict[str, Any]:
        """Create the Lease, or PUT it preconditioned on the resourceVersion it carries."""
        meta = lease["metadata"]
        version = meta.get("resourceVersion")
        if version:
            return self.update(kinds.LEASE, lease, version, timeout=timeout, attempts=1)
        created = self.create(kinds.LEASE, lease, timeout=timeout, attempts=1)
        if created is None:
            what = kinds.LEASE.describe(meta["namespace"], meta["name"])
            raise PreconditionFailed(f"{what}: created by another replica first")
        return created

    def emit_event(
        self,
        subject: Mapping[str, Any],
        *,
        event_type: events.EventType,
        reason: str,
        message: str,
        step: str,
        name: str | None = None,
        involved: events.Involved = events.TRAINJOB,
    ) -> bool:
        """POST one Event, best effort (recorder.py): a failure is logged, never raised.

        About a TrainJob, or the kind `involved` names. An Event given a `name` that exists
        already was posted before: told, so True.
        """
        return recorder.post_event(
            self._transport,
            subject,
            event_type=event_type,
            reason=reason,
            message=message,
            step=step,
            name=name,
            involved=involved,
        )
