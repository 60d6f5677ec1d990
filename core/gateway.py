"""The one module that talks to Kubernetes: explicit calls, results as dicts, errors mapped.

Every write is preconditioned on the resourceVersion that was read (a stale read is a 409
and writes nothing). A 409 is never retried: the read is stale, the step fails with exit 3
and its stage is run again from the read. Reads are retried on 429/5xx/connection errors;
writes only where the server surely did not apply them (429, connection refused).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeVar

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from loguru import logger

from core import events, wire
from core.errors import (
    BadInput,
    DispatchError,
    Forbidden,
    NotFound,
    PreconditionFailed,
    Refused,
    Transient,
)

T = TypeVar("T")
ATTEMPTS: Final = 4
FIRST_BACKOFF: Final = 0.5  # seconds; doubled after each failed attempt
REQUEST_TIMEOUT: Final = 15  # seconds per request: with ATTEMPTS, a dead server costs ~1 min
# urllib3's own default retries would resend a PUT whose answer was lost (it counts PUT as
# idempotent) and multiply every timeout by four: _call is the only retry layer.
NO_RETRIES: Final = urllib3.util.Retry(total=0, connect=0, read=0, redirect=0, status=0)
WATCH_GRACE: Final = 15  # seconds past a watch's own timeout before its connection is given up
POLL_INTERVAL: Final = 1.0  # seconds between reads while a step waits out a passing state
EVENT_TIMEOUT: Final = 5  # seconds: an Event is best effort and must not hold a step up
PAGE_SIZE: Final = 200
TRAINJOBS: Final = "trainjobs"
JOBSETS: Final = "jobsets"
WORKLOADS: Final = "workloads"
RUNTIME_PLURALS: Final = {
    "ClusterTrainingRuntime": "clustertrainingruntimes",
    "TrainingRuntime": "trainingruntimes",
}


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
    if isinstance(error, ApiException):
        status = error.status or 0
        return status == 429 or (not write and status >= 500)
    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        error = error.reason  # what urllib3's own retries ended on
    if isinstance(error, urllib3.exceptions.ConnectTimeoutError):
        return True  # no connection (refused, or it timed out): nothing was sent
    return not write and isinstance(error, urllib3.exceptions.HTTPError)


def _call(request: Callable[[], T], *, what: str, write: bool = False) -> T:
    backoff = FIRST_BACKOFF
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return request()
        except (ApiException, urllib3.exceptions.HTTPError) as e:
            if attempt < ATTEMPTS and _retryable(e, write=write):
                time.sleep(backoff)
                backoff *= 2
                continue
            if isinstance(e, ApiException) and e.status:
                raise error_for(e, what) from e
            raise Transient(f"{what}: API server unreachable: {type(e).__name__}") from e
    raise AssertionError("unreachable")  # the loop returns or raises


def as_object(value: Any) -> dict[str, Any]:
    """Narrow what the client returns to the plain JSON dict every caller works with."""
    if hasattr(value, "to_dict"):
        value = client.ApiClient().sanitize_for_serialization(value)  # type: ignore[no-untyped-call]
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


class Gateway:
    """A connection to one cluster; each method is one API request."""

    def __init__(self, api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)

    @classmethod
    def connect(cls, *, kubeconfig: Path | None, context: str | None) -> Gateway:
        """In-cluster config inside a pod, else the kubeconfig (DESIGN §3)."""
        configuration = client.Configuration()
        try:
            if os.environ.get("KUBERNETES_SERVICE_HOST") and kubeconfig is None:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            else:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=str(kubeconfig) if kubeconfig else None,
                    context=context,
                    client_configuration=configuration,
                )
        except (ConfigException, OSError) as e:
            raise BadInput(f"cannot load cluster credentials: {e}".replace("\n", " ")) from e
        configuration.retries = NO_RETRIES
        return cls(client.ApiClient(configuration))

    # TrainJobs

    def read_trainjob(self, namespace: str, name: str) -> dict[str, Any]:
        """GET one TrainJob."""
        return as_object(
            _call(
                lambda: self._custom.get_namespaced_custom_object(
                    wire.TRAINER_GROUP,
                    wire.TRAINER_VERSION,
                    namespace,
                    TRAINJOBS,
                    name,
                    _request_timeout=REQUEST_TIMEOUT,
                ),
                what=f"TrainJob {namespace}/{name}",
            )
        )

    def create_trainjob(self, trainjob: Mapping[str, Any]) -> dict[str, Any] | None:
        """POST a TrainJob; None when one of that name already exists."""
        meta = trainjob["metadata"]
        what = f"TrainJob {meta['namespace']}/{meta['name']}"
        try:
            created = _call(
                lambda: self._custom.create_namespaced_custom_object(
                    wire.TRAINER_GROUP,
                    wire.TRAINER_VERSION,
                    meta["namespace"],
                    TRAINJOBS,
                    dict(trainjob),
                    _request_timeout=REQUEST_TIMEOUT,
                ),
                what=what,
                write=True,
            )
        except PreconditionFailed as e:
            cause = e.__cause__
            if (
                isinstance(cause, ApiException)
                and cause.reason == "Conflict"
                and ("already exists" in _status_message(cause))
            ):
                return None
            raise
        return as_object(created)

    def update_trainjob(self, trainjob: Mapping[str, Any], resource_version: str) -> dict[str, Any]:
        """PUT the TrainJob only if the server still holds `resource_version` (else 409)."""
        meta = trainjob["metadata"]
        body = {**trainjob, "metadata": {**meta, "resourceVersion": resource_version}}
        return as_object(
            _call(
                lambda: self._custom.replace_namespaced_custom_object(
                    wire.TRAINER_GROUP,
                    wire.TRAINER_VERSION,
                    meta["namespace"],
                    TRAINJOBS,
                    meta["name"],
                    body,
                    _request_timeout=REQUEST_TIMEOUT,
                ),
                what=f"TrainJob {meta['namespace']}/{meta['name']}",
                write=True,
            )
        )

    # Runtimes and JobSets

    def read_runtime(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        """GET the (Cluster)TrainingRuntime a TrainJob names."""
        plural = RUNTIME_PLURALS[kind]
        if kind == "ClusterTrainingRuntime":
            request: Callable[[], Any] = lambda: self._custom.get_cluster_custom_object(  # noqa: E731
                wire.TRAINER_GROUP,
                wire.TRAINER_VERSION,
                plural,
                name,
                _request_timeout=REQUEST_TIMEOUT,
            )
        else:
            request = lambda: self._custom.get_namespaced_custom_object(  # noqa: E731
                wire.TRAINER_GROUP,
                wire.TRAINER_VERSION,
                namespace,
                plural,
                name,
                _request_timeout=REQUEST_TIMEOUT,
            )
        return as_object(_call(request, what=f"{kind} {name}"))

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
        try:
            return as_object(
                _call(
                    lambda: self._custom.get_namespaced_custom_object(
                        wire.JOBSET_GROUP,
                        wire.JOBSET_VERSION,
                        namespace,
                        JOBSETS,
                        name,
                        _request_timeout=REQUEST_TIMEOUT,
                    ),
                    what=f"JobSet {namespace}/{name}",
                )
            )
        except NotFound:
            return None

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
        return as_object(
            _call(
                lambda: self._custom.get_namespaced_custom_object(
                    wire.KUEUE_GROUP,
                    wire.KUEUE_VERSION,
                    namespace,
                    WORKLOADS,
                    name,
                    _request_timeout=REQUEST_TIMEOUT,
                ),
                what=f"Workload {namespace}/{name}",
            )
        )

    def _list_workloads(self, namespace: str, label_selector: str) -> dict[str, Any]:
        return as_object(
            _call(
                lambda: self._custom.list_namespaced_custom_object(
                    wire.KUEUE_GROUP,
                    wire.KUEUE_VERSION,
                    namespace,
                    WORKLOADS,
                    label_selector=label_selector,
                    _request_timeout=REQUEST_TIMEOUT,
                ),
                what=f"Workloads {namespace} ({label_selector})",
            )
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
        while (left := deadline - time.monotonic()) > 0:
            stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                self._custom.list_namespaced_custom_object,
                wire.KUEUE_GROUP,
                wire.KUEUE_VERSION,
                namespace,
                WORKLOADS,
                label_selector=label_selector,
                resource_version=version,
                timeout_seconds=max(1, int(left)),
                allow_watch_bookmarks=True,
                # The server ends the watch at timeout_seconds; a connection that stops
                # answering without closing (no FIN) must end too, not hang the step.
                _request_timeout=(REQUEST_TIMEOUT, left + WATCH_GRACE),
            )
            what = f"watch Workloads {namespace}"
            try:
                for event in stream:
                    obj = as_object(event["object"])
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        yield obj
            except ApiException as e:
                if e.status == 410:  # the watch window expired: list again from now
                    yield from self.watch_workloads(
                        namespace, label_selector, timeout=deadline - time.monotonic()
                    )
                    return
                raise error_for(e, what) from e
            except urllib3.exceptions.HTTPError as e:  # cut, reset or stalled: run it again
                raise Transient(f"{what}: connection lost: {type(e).__name__}") from e

    def apply_workload_status(self, workload: Mapping[str, Any], *, manager: str) -> dict[str, Any]:
        """Server-side apply to workloads/status; the body's resourceVersion is the precondition."""
        meta = workload["metadata"]
        return as_object(
            _call(
                lambda: self._custom.patch_namespaced_custom_object_status(
                    wire.KUEUE_GROUP,
                    wire.KUEUE_VERSION,
                    meta["namespace"],
                    WORKLOADS,
                    meta["name"],
                    dict(workload),
                    field_manager=manager,
                    force=True,
                    _content_type="application/apply-patch+yaml",
                    _request_timeout=REQUEST_TIMEOUT,
                ),
                what=f"Workload {meta['namespace']}/{meta['name']} status",
                write=True,
            )
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
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = events.build_event(
            trainjob, event_type=event_type, reason=reason, message=message, step=step, now=now
        )
        try:
            self._core.create_namespaced_event(
                event["metadata"]["namespace"],
                event,  # type: ignore[arg-type]  # the client sends a dict body as it is
                _request_timeout=EVENT_TIMEOUT,
            )
        except ApiException as e:
            logger.bind(status=e.status).warning(
                f"cannot record Event {event['reason']}: {e.status} {_status_message(e)}"
            )
            return False
        except urllib3.exceptions.HTTPError as e:
            logger.warning(f"cannot record Event {event['reason']}: {type(e).__name__}")
            return False
        return True

    # Jobs

    def list_jobs(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """LIST batch/v1 Jobs (a JobSet's child Jobs are few: one request)."""
        listed = _call(
            lambda: self._custom.list_namespaced_custom_object(
                "batch",
                "v1",
                namespace,
                "jobs",
                label_selector=label_selector,
                _request_timeout=REQUEST_TIMEOUT,
            ),
            what=f"Jobs {namespace} ({label_selector})",
        )
        return list(as_object(listed).get("items") or [])

    # Pods

    def list_pods(self, namespace: str, label_selector: str) -> Iterator[dict[str, Any]]:
        """LIST pods page by page, so a large JobSet never loads at once."""
        token: str | None = None
        while True:
            page = _call(
                functools.partial(
                    self._core.list_namespaced_pod,
                    namespace,
                    label_selector=label_selector,
                    limit=PAGE_SIZE,
                    _continue=token,
                    _request_timeout=REQUEST_TIMEOUT,
                ),
                what=f"pods {namespace} ({label_selector})",
            )
            listed = as_object(page)
            yield from listed.get("items") or []
            token = (listed.get("metadata") or {}).get("continue")
            if not token:
                return
