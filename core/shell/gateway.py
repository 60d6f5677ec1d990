"""The one module that talks to Kubernetes: explicit calls, results as dicts, errors mapped.

Every write is preconditioned on the resourceVersion that was read (a stale read is a 409
and writes nothing). A 409 is never retried: the read is stale, the step fails with exit 3
and its stage is run again from the read. Reads are retried on 429/5xx/connection errors;
writes only where the server surely did not apply them (429, connection refused).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import quote

from dispatch_k8s.core.rules import events, shapes, wire
from dispatch_k8s.core.rules.errors import (
    BadInput,
    DispatchError,
    Expired,
    Fenced,
    Forbidden,
    NotFound,
    PreconditionFailed,
    Refused,
    Transient,
)
from dispatch_k8s.core.shell import clock

if TYPE_CHECKING:  # imported where first used: a step that never connects never pays for them
    from kubernetes.client import ApiClient
    from kubernetes.client.exceptions import ApiException
    from kubernetes.client.rest import RESTResponse

T = TypeVar("T")
ATTEMPTS: Final = 4
FIRST_BACKOFF: Final = 0.5  # seconds; doubled after each failed attempt
REQUEST_TIMEOUT: Final = 15  # seconds per request: with ATTEMPTS, a dead server costs ~1 min
WATCH_GRACE: Final = 15  # seconds past a watch's own timeout before its connection is given up
POLL_INTERVAL: Final = 1.0  # seconds between reads while a step waits out a passing state
EVENT_TIMEOUT: Final = 5  # seconds: an Event is best effort and must not hold a step up
PAGE_SIZE: Final = 500  # kubectl's --chunk-size: one page of a large pod list at a time
TRAINJOBS: Final = "trainjobs"
JOBSETS: Final = "jobsets"
WORKLOADS: Final = "workloads"
ADMISSION_CHECKS: Final = "admissionchecks"
RUNTIME_PLURALS: Final = {
    "ClusterTrainingRuntime": "clustertrainingruntimes",
    "TrainingRuntime": "trainingruntimes",
}
JSON: Final = "application/json"
APPLY_PATCH: Final = "application/apply-patch+yaml"
Query = Iterable[tuple[str, str | int | bool]]


def _custom_path(
    group: str, version: str, namespace: str | None, plural: str, name: str | None = None
) -> str:
    """The REST path of a collection, or of the object `name` in it.

    Namespace and name are quoted as the generated client quotes path parameters (nothing
    kept), so a name holding `/` or `?` names no other object: it is not found.
    """
    prefix = "/api/v1" if not group else f"/apis/{group}/{version}"
    path = f"{prefix}/namespaces/{quote(namespace, safe='')}" if namespace else prefix
    path = f"{path}/{plural}"
    return f"{path}/{quote(name, safe='')}" if name is not None else path


def _lease_path(namespace: str, name: str | None = None) -> str:
    return _custom_path("coordination.k8s.io", "v1", namespace, "leases", name)


@dataclasses.dataclass(frozen=True, slots=True)
class Resource:
    """A collection the API serves: what LIST and WATCH paths are made of."""

    group: str
    version: str
    plural: str


WORKLOAD_RESOURCE: Final = Resource(wire.KUEUE_GROUP, wire.KUEUE_VERSION, WORKLOADS)
ADMISSION_CHECK_RESOURCE: Final = Resource(wire.KUEUE_GROUP, wire.KUEUE_VERSION, ADMISSION_CHECKS)
TRAINJOB_RESOURCE: Final = Resource(wire.TRAINER_GROUP, wire.TRAINER_VERSION, TRAINJOBS)
JOBSET_RESOURCE: Final = Resource(wire.JOBSET_GROUP, wire.JOBSET_VERSION, JOBSETS)
JOB_RESOURCE: Final = Resource("batch", "v1", "jobs")
POD_RESOURCE: Final = Resource("", "v1", "pods")


def _status_message(error: ApiException) -> str:
    try:
        body = json.loads(error.body or "{}")
    except ValueError:
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or error.reason or "no message").replace("\n", " ")


def _is_admission_denial(message: str) -> bool:
    return "admission webhook" in message or "ValidatingAdmissionPolicy" in message


def error_for(error: ApiException, what: str) -> DispatchError:
    """Map an API error to the step's outcome (STYLE §2, DESIGN §3 exit codes)."""
    status = error.status or 0
    message = _status_message(error)
    text = f"{what}: {status} {error.reason}: {message}"
    if _is_admission_denial(message):
        return Refused(text)
    if status in (401, 403):
        return Forbidden(text)
    if status == 404:
        return NotFound(text)
    if status == 409:
        return PreconditionFailed(text)
    if status == 410:  # a list's continue token expired: listing again from the start helps
        return Transient(text)
    if status == 422 and "test operation" in message:
        return PreconditionFailed(text)
    if status == 429 or status >= 500:
        return Transient(text)
    return Refused(text)


def _retryable(error: Exception, *, write: bool) -> bool:
    import urllib3
    from kubernetes.client.exceptions import ApiException

    if isinstance(error, ApiException):
        status = error.status or 0
        return status == 429 or (not write and status >= 500)
    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        error = error.reason  # what urllib3's own retries ended on
    if isinstance(error, urllib3.exceptions.ConnectTimeoutError):
        return True  # no connection (refused, or it timed out): nothing was sent
    return not write and isinstance(error, urllib3.exceptions.HTTPError)


def _call(
    request: Callable[[], T], *, what: str, write: bool = False, attempts: int = ATTEMPTS
) -> T:
    import urllib3
    from kubernetes.client.exceptions import ApiException

    backoff = FIRST_BACKOFF
    for attempt in range(1, attempts + 1):
        try:
            return request()
        except (ApiException, urllib3.exceptions.HTTPError) as e:
            if attempt < attempts and _retryable(e, write=write):
                time.sleep(backoff)
                backoff *= 2
                continue
            if isinstance(e, ApiException) and e.status:
                raise error_for(e, what) from e
            raise Transient(f"{what}: API server unreachable: {type(e).__name__}") from e
    raise AssertionError("unreachable")  # the loop returns or raises


def as_object(value: Any) -> dict[str, Any]:
    """Narrow a decoded JSON body to the plain dict every caller works with."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


def kubeconfig_files(kubeconfig: Path | None) -> list[Path]:
    """The kubeconfig files the client reads: the one given, else $KUBECONFIG's, else ~/.kube."""
    if kubeconfig is not None:
        return [kubeconfig]
    listed = os.environ.get("KUBECONFIG") or "~/.kube/config"  # the client's own default
    return [Path(word).expanduser() for word in listed.split(os.pathsep) if word]


def _check_context(kubeconfig: Path | None, context: str, *, where: str) -> None:
    """Raise BadInput naming a `context` the kubeconfig does not have."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        contexts, _ = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None
        )
    except (ConfigException, OSError, TypeError, AttributeError):
        return  # not even the contexts can be read: the load's own error says why
    names = sorted(str(entry.get("name")) for entry in contexts or [] if isinstance(entry, dict))
    if context not in names:
        raise BadInput(
            f"context {context} is not in kubeconfig {where} (its contexts: "
            f"{', '.join(names) or 'none'})"
        )


class Gateway:
    """A connection to one cluster; each method is one API request.

    Requests go through the client's `ApiClient` (its configuration, auth, TLS and timeouts)
    but not its generated API classes: those cost ~0.5 s to build (CoreV1Api's module alone
    is 63k lines), and their models are a round trip the steps do not need. Bodies are read
    as plain JSON.
    """

    def __init__(self, api: ApiClient, *, fence: Callable[[], None] | None = None) -> None:
        self._api = api
        self._fence = fence

    def fenced(self, fence: Callable[[], None]) -> Gateway:
        """The same connection, with `fence` called before every write is sent.

        `fence` raises (Fenced) once this process may no longer write: a leader whose Lease
        lapsed.
        """
        return type(self)(self._api, fence=fence)

    @classmethod
    def connect(cls, *, kubeconfig: Path | None, context: str | None) -> Gateway:
        """In-cluster config inside a pod, else the kubeconfig (DESIGN §3)."""
        import urllib3
        from kubernetes import config
        from kubernetes.client import ApiClient, Configuration
        from kubernetes.config.config_exception import ConfigException

        configuration = Configuration()
        in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and kubeconfig is None
        files = [] if in_cluster else kubeconfig_files(kubeconfig)
        if files and not any(path.exists() for path in files):
            where = os.pathsep.join(map(str, files))
            missing = (
                f"kubeconfig {where} does not exist"
                if len(files) == 1
                else (f"none of the kubeconfig files {where} exists")
            )
            raise BadInput(missing)
        try:
            if in_cluster:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            else:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=str(kubeconfig) if kubeconfig else None,
                    context=context,
                    client_configuration=configuration,
                )
        except (ConfigException, OSError, TypeError, AttributeError) as e:
            # TypeError, AttributeError: the client reads a file whose YAML is no mapping
            # (a list, a string) as if it were one.
            where = os.pathsep.join(map(str, files))
            if files and context is not None:
                _check_context(kubeconfig, context, where=where)
            if isinstance(e, TypeError | AttributeError):
                raise BadInput(f"kubeconfig {where} is not a kubeconfig (no mapping)") from e
            raise BadInput(f"cannot load cluster credentials: {e}".replace("\n", " ")) from e
        # urllib3's own default retries would resend a PUT whose answer was lost (it counts PUT
        # as idempotent) and multiply every timeout by four: _call is the only retry layer.
        configuration.retries = urllib3.util.Retry(total=0, connect=0, read=0, redirect=0, status=0)
        return cls(ApiClient(configuration))

    # Requests

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Any = None,
        content_type: str = JSON,
        timeout: float | tuple[float, float] = REQUEST_TIMEOUT,
    ) -> RESTResponse:
        """Send one request, its body unread; a status outside 2xx is an ApiException."""
        from kubernetes.client.exceptions import ApiException

        if self._fence is not None and method != "GET":
            self._fence()  # as late as can be: nothing is sent once it refuses
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self._api.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            data: bytes = response.read()  # type: ignore[no-untyped-call]
            text = data.decode("utf-8", errors="replace") if data else None
            raise ApiException.from_response(http_resp=response, body=text, data=None)
        return response

    def _json(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        response = self._send(method, path, **options)
        data: bytes = response.read()  # type: ignore[no-untyped-call]
        return as_object(json.loads(data))

    def _text(self, method: str, path: str, **options: Any) -> str:
        response = self._send(method, path, **options)
        data: bytes = response.read()  # type: ignore[no-untyped-call]
        return data.decode("utf-8")

    def _get(self, path: str, *, what: str, query: Query = ()) -> dict[str, Any]:
        return _call(lambda: self._json("GET", path, query=query), what=what)

    def _write(
        self, method: str, path: str, body: Any, *, what: str, **options: Any
    ) -> dict[str, Any]:
        return _call(lambda: self._json(method, path, body=body, **options), what=what, write=True)

    # TrainJobs

    def read_trainjob(self, namespace: str, name: str) -> dict[str, Any]:
        """GET one TrainJob."""
        path = _custom_path(wire.TRAINER_GROUP, wire.TRAINER_VERSION, namespace, TRAINJOBS, name)
        return self._get(path, what=f"TrainJob {namespace}/{name}")

    def find_trainjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET one TrainJob; None when there is none."""
        try:
            return self.read_trainjob(namespace, name)
        except NotFound:
            return None

    def _create(self, path: str, body: Mapping[str, Any], *, what: str) -> dict[str, Any] | None:
        """POST `body`; None when an object of that name already exists."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self._write("POST", path, dict(body), what=what)
        except PreconditionFailed as e:
            cause = e.__cause__
            if (
                isinstance(cause, ApiException)
                and cause.reason == "Conflict"
                and ("already exists" in _status_message(cause))
            ):
                return None
            raise

    def create_trainjob(self, trainjob: Mapping[str, Any]) -> dict[str, Any] | None:
        """POST a TrainJob; None when one of that name already exists."""
        meta = trainjob["metadata"]
        what = f"TrainJob {meta['namespace']}/{meta['name']}"
        path = _custom_path(wire.TRAINER_GROUP, wire.TRAINER_VERSION, meta["namespace"], TRAINJOBS)
        return self._create(path, trainjob, what=what)

    # ConfigMaps (the ledger, core/rules/ledger.py)

    def find_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET one ConfigMap; None when there is none."""
        path = _custom_path("", "v1", namespace, "configmaps", name)
        try:
            return self._get(path, what=f"ConfigMap {namespace}/{name}")
        except NotFound:
            return None

    def create_config_map(self, config_map: Mapping[str, Any]) -> dict[str, Any] | None:
        """POST a ConfigMap; None when one of that name already exists."""
        meta = config_map["metadata"]
        path = _custom_path("", "v1", meta["namespace"], "configmaps")
        return self._create(path, config_map, what=f"ConfigMap {meta['namespace']}/{meta['name']}")

    def update_trainjob(self, trainjob: Mapping[str, Any], resource_version: str) -> dict[str, Any]:
        """PUT the TrainJob only if the server still holds `resource_version` (else 409)."""
        meta = trainjob["metadata"]
        body = {**trainjob, "metadata": {**meta, "resourceVersion": resource_version}}
        path = _custom_path(
            wire.TRAINER_GROUP, wire.TRAINER_VERSION, meta["namespace"], TRAINJOBS, meta["name"]
        )
        what = f"TrainJob {meta['namespace']}/{meta['name']}"
        return self._write("PUT", path, body, what=what)

    # Runtimes and JobSets

    def read_runtime(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        """GET the (Cluster)TrainingRuntime a TrainJob names."""
        scope = None if kind == "ClusterTrainingRuntime" else namespace
        plural = RUNTIME_PLURALS[kind]
        path = _custom_path(wire.TRAINER_GROUP, wire.TRAINER_VERSION, scope, plural, name)
        return self._get(path, what=f"{kind} {name}")

    def find_runtime(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """GET a (Cluster)TrainingRuntime; None when it is gone."""
        if kind not in RUNTIME_PLURALS:
            return None  # not a kind Trainer serves: as good as gone
        try:
            return self.read_runtime(kind, name, namespace)
        except NotFound:
            return None

    def read_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET the JobSet Trainer made for a TrainJob; None before it exists."""
        path = _custom_path(wire.JOBSET_GROUP, wire.JOBSET_VERSION, namespace, JOBSETS, name)
        try:
            return self._get(path, what=f"JobSet {namespace}/{name}")
        except NotFound:
            return None

    def list_jobsets(self, namespace: str) -> Iterator[dict[str, Any]]:
        """LIST the namespace's JobSets page by page."""
        return self.list_items(JOBSET_RESOURCE, namespace, rest={})

    def poll(
        self, read: Callable[[], T], done: Callable[[T], bool], *, timeout: float, what: str
    ) -> T:
        """Read until `done` holds, every POLL_INTERVAL; Transient once `timeout` has passed."""
        deadline = time.monotonic() + timeout
        while not done(value := read()):
            if time.monotonic() + POLL_INTERVAL > deadline:
                raise Transient(f"still waiting for {what} after {timeout:g}s")
            time.sleep(POLL_INTERVAL)
        return value

    # Kueue Workloads

    def read_workload(self, namespace: str, name: str) -> dict[str, Any]:
        """GET one Workload."""
        path = _custom_path(wire.KUEUE_GROUP, wire.KUEUE_VERSION, namespace, WORKLOADS, name)
        return self._get(path, what=f"Workload {namespace}/{name}")

    def _list_workloads(self, namespace: str, label_selector: str) -> dict[str, Any]:
        path = _custom_path(wire.KUEUE_GROUP, wire.KUEUE_VERSION, namespace, WORKLOADS)
        return self._get(
            path,
            query=[("labelSelector", label_selector)],
            what=f"Workloads {namespace} ({label_selector})",
        )

    def list_workloads(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """LIST the Workloads that match a label selector (one request)."""
        return list(self._list_workloads(namespace, label_selector).get("items") or [])

    def watch_workloads(
        self, namespace: str, label_selector: str, *, timeout: float
    ) -> Iterator[dict[str, Any]]:
        """Every version of the matching Workloads: the current ones, then changes."""
        deadline = time.monotonic() + timeout
        listed = self._list_workloads(namespace, label_selector)
        yield from listed.get("items") or []
        version = listed["metadata"]["resourceVersion"]
        path = _custom_path(wire.KUEUE_GROUP, wire.KUEUE_VERSION, namespace, WORKLOADS)
        while (left := deadline - time.monotonic()) > 0:
            try:
                for kind, obj in self._watch(
                    path, version=version, timeout=left, label_selector=label_selector
                ):
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if kind in ("ADDED", "MODIFIED"):
                        yield obj
            except Expired:  # the watch window expired: list again from now
                yield from self.watch_workloads(
                    namespace, label_selector, timeout=deadline - time.monotonic()
                )
                return

    def list_items(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str = "",
        rest: dict[str, Any],
    ) -> Iterator[dict[str, Any]]:
        """LIST page by page (kubectl's page size), each item decoded and passed on alone.

        Memory stays one page of text and one object whatever the collection's size. Once
        the iteration ends, `rest` holds the last page's other members: its
        `metadata.resourceVersion` is the list's, to watch from. A page whose continue token
        expired (410) is Transient: list again from the start.
        """
        path = _custom_path(resource.group, resource.version, namespace, resource.plural)
        what = f"{resource.plural} in {namespace or 'all namespaces'}"
        if label_selector:
            what = f"{what} ({label_selector})"
        token: str | None = None
        while True:
            query: list[tuple[str, str | int | bool]] = [("limit", PAGE_SIZE)]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if token:
                query.append(("continue", token))
            text = _call(functools.partial(self._text, "GET", path, query=query), what=what)
            rest.clear()
            yield from (as_object(item) for item in iter_list_items(text, rest))
            del text
            token = shapes.mapping(rest.get("metadata")).get("continue")
            if not token:
                return

    def watch_all(
        self,
        resource: Resource,
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
        path = _custom_path(resource.group, resource.version, namespace, resource.plural)
        return self._watch(path, version=version, timeout=timeout, label_selector=label_selector)

    def _watch(
        self, path: str, *, version: str, timeout: float, label_selector: str = ""
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        import urllib3
        from kubernetes.client.exceptions import ApiException

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
            response = self._send(
                "GET",
                path,
                query=query,
                # The server ends the watch at timeoutSeconds; a connection that stops
                # answering without closing (no FIN) must end too, not hang the caller.
                timeout=(REQUEST_TIMEOUT, timeout + WATCH_GRACE),
            )
            try:
                for event in _watch_events(response):
                    yield str(event["type"]), as_object(event["object"])
            finally:  # also when the caller stops early: the connection is not reused
                response.response.close()
                response.response.release_conn()
        except ApiException as e:
            if e.status == 410:
                raise Expired(f"{what}: resourceVersion {version} is too old") from e
            raise error_for(e, what) from e
        except urllib3.exceptions.HTTPError as e:  # cut, reset or stalled: run it again
            raise Transient(f"{what}: connection lost: {type(e).__name__}") from e

    def apply_workload_status(self, workload: Mapping[str, Any], *, manager: str) -> dict[str, Any]:
        """Server-side apply to workloads/status; the body's resourceVersion is the precondition."""
        meta = workload["metadata"]
        path = _custom_path(
            wire.KUEUE_GROUP, wire.KUEUE_VERSION, meta["namespace"], WORKLOADS, meta["name"]
        )
        return self._write(
            "PATCH",
            f"{path}/status",
            dict(workload),
            query=[("fieldManager", manager), ("force", True)],
            content_type=APPLY_PATCH,  # JSON is YAML: the client sends the dict as JSON
            what=f"Workload {meta['namespace']}/{meta['name']} status",
        )

    # Kueue AdmissionChecks

    def apply_admission_check_status(
        self, check: Mapping[str, Any], *, manager: str
    ) -> dict[str, Any]:
        """Server-side apply to admissionchecks/status (its conditions are a map list)."""
        name = check["metadata"]["name"]
        path = _custom_path(wire.KUEUE_GROUP, wire.KUEUE_VERSION, None, ADMISSION_CHECKS, name)
        return self._write(
            "PATCH",
            f"{path}/status",
            dict(check),
            query=[("fieldManager", manager), ("force", True)],
            content_type=APPLY_PATCH,
            what=f"AdmissionCheck {name} status",
        )

    # Leases

    # A Lease request is tried once, within `timeout`: the elector retries on its own period
    # and must know by its renew deadline whether it still leads, not a minute later.

    def read_lease(self, namespace: str, name: str, *, timeout: float) -> dict[str, Any] | None:
        """GET a Lease; None when there is none."""
        path, what = _lease_path(namespace, name), f"Lease {namespace}/{name}"
        try:
            return _call(lambda: self._json("GET", path, timeout=timeout), what=what, attempts=1)
        except NotFound:
            return None

    def write_lease(self, lease: Mapping[str, Any], *, timeout: float) -> dict[str, Any]:
        """Create the Lease, or PUT it preconditioned on the resourceVersion it carries."""
        meta = lease["metadata"]
        what = f"Lease {meta['namespace']}/{meta['name']}"
        method, path = (
            ("PUT", _lease_path(meta["namespace"], meta["name"]))
            if meta.get("resourceVersion")
            else ("POST", _lease_path(meta["namespace"]))
        )
        return _call(
            lambda: self._json(method, path, body=dict(lease), timeout=timeout),
            what=what,
            write=True,
            attempts=1,
        )

    # Events

    def emit_event(
        self,
        trainjob: Mapping[str, Any],
        *,
        event_type: events.EventType,
        reason: str,
        message: str,
        step: str,
    ) -> bool:
        """POST one Event about a TrainJob, best effort: a failure is logged, never raised."""
        import urllib3
        from kubernetes.client.exceptions import ApiException
        from loguru import logger

        now = clock.now()
        event = events.build_event(
            trainjob, event_type=event_type, reason=reason, message=message, step=step, now=now
        )
        path = _custom_path("", "v1", event["metadata"]["namespace"], "events")
        try:
            self._json("POST", path, body=event, timeout=EVENT_TIMEOUT)
        except ApiException as e:
            logger.bind(status=e.status).warning(
                f"cannot record Event {event['reason']}: {e.status} {_status_message(e)}"
            )
            return False
        except urllib3.exceptions.HTTPError as e:
            logger.warning(f"cannot record Event {event['reason']}: {type(e).__name__}")
            return False
        except Fenced:
            return False  # this replica no longer leads: the next leader records it
        return True

    # Jobs

    def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """LIST batch/v1 Jobs, all of the namespace without a selector (one request)."""
        listed = self._get(
            _custom_path("batch", "v1", namespace, "jobs"),
            query=[("labelSelector", label_selector)] if label_selector else [],
            what=f"Jobs {namespace} ({label_selector or 'all'})",
        )
        return list(listed.get("items") or [])

    # Pods

    def list_pods(
        self, namespace: str, label_selector: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """LIST pods page by page (`list_items`), so a large JobSet never loads at once.

        Each pod is dropped once it is passed on, so what the audit keeps per pod is not
        scattered among a whole page's freed objects. No field selector narrows the list: the
        audit reads finished pods too (their J, their slot), so none would be exact.
        """
        return self.list_items(
            POD_RESOURCE, namespace, label_selector=label_selector or "", rest={}
        )

    def list_trainjobs(
        self, namespace: str, label_selector: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """LIST the namespace's TrainJobs page by page."""
        return self.list_items(
            TRAINJOB_RESOURCE, namespace, label_selector=label_selector or "", rest={}
        )


_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")
_DECODER: Final = json.JSONDecoder()


def iter_list_items(text: str, rest: dict[str, Any], *, key: str = "items") -> Iterator[Any]:
    """Yield the elements of the array `key` of the JSON object `text`, one decoded at a time.

    The object's other members are put into `rest` as they are read (all of them once the
    iteration ends). Anything that is not such an object raises ValueError.
    """

    def skip(at: int) -> int:
        match = _WHITESPACE.match(text, at)
        return match.end() if match else at

    def expect(at: int, char: str) -> int:
        at = skip(at)
        if text[at : at + 1] != char:
            raise ValueError(f"expected {char!r} at {at} of a list body")
        return at + 1

    at = expect(0, "{")
    if text[skip(at) : skip(at) + 1] == "}":
        return
    while True:
        name, at = _DECODER.raw_decode(text, skip(at))
        if not isinstance(name, str):
            raise ValueError(f"an object key at {at} of a list body is not a string")
        at = skip(expect(at, ":"))
        if name == key and text[at : at + 1] == "[":
            at = skip(at + 1)
            if text[at : at + 1] == "]":
                at += 1
            else:
                while True:
                    item, at = _DECODER.raw_decode(text, at)
                    yield item
                    del item
                    at = skip(at)
                    if text[at : at + 1] == "]":
                        at += 1
                        break
                    at = skip(expect(at, ","))
        else:
            rest[name], at = _DECODER.raw_decode(text, at)
        at = skip(at)
        if text[at : at + 1] == "}":
            return
        at = expect(at, ",")


def _watch_events(response: RESTResponse) -> Iterator[dict[str, Any]]:
    """The events of a watch response, one JSON object a line; an ERROR event is raised."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.watch.watch import iter_resp_lines

    for line in iter_resp_lines(response.response):  # type: ignore[no-untyped-call]
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue  # as the client's own Watch: a line that is not JSON is skipped
        if event.get("type") == "ERROR":
            status = shapes.mapping(event.get("object"))
            reason = f"{status.get('reason')}: {status.get('message')}"
            raise ApiException(status=status.get("code"), reason=reason)
        yield event
