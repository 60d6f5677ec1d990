"""One request to the API server, as every verb of the gateway sends it.

Before a request: the rate limit, then the fence (writes only), then the dry run (a write
sent with dryRun=All, or kept back); on its way: the step's deadline; once answered or
failed: its timing. The verbs (client.py) build paths and bodies and decide on retries; they
never see these.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypedDict

from dispatch_k8s.core.rules.errors import OutOfTime
from dispatch_k8s.core.shell.gateway import kinds
from dispatch_k8s.core.shell.gateway.api_errors import ApiError, unreadable
from dispatch_k8s.core.shell.gateway.bodies import as_object
from dispatch_k8s.core.shell.gateway.kubeconfig import load as load_configuration
from dispatch_k8s.core.shell.gateway.ratelimit import TokenBucket
from dispatch_k8s.core.shell.literals import DryRun

if TYPE_CHECKING:  # imported where first used: a step that never connects never pays for them
    from kubernetes.client import ApiClient
    from kubernetes.client.rest import RESTResponse

REQUEST_TIMEOUT: Final = 15  # seconds per request: with ATTEMPTS, a dead server costs ~1 min
JSON: Final = "application/json"
Query = Iterable[tuple[str, str | int | bool]]
Timeout = float | tuple[float, float]
# Told of each request once answered (or failed): its verb, resource and seconds.
Timed = Callable[[str, str, float], None]


@dataclass(frozen=True, slots=True)
class Deadline:
    """A step's overall deadline, `--request-timeout` (`seconds`) counted from `start`."""

    seconds: float
    start: float = field(default_factory=time.monotonic)

    def left(self, waiting: str) -> float:
        """The seconds left; OutOfTime, telling what was `waiting`, once there are none."""
        left = self.start + self.seconds - time.monotonic()
        if left <= 0:
            raise OutOfTime(
                f"--request-timeout {self.seconds:g}s (env DISPATCH_REQUEST_TIMEOUT) passed "
                f"{waiting}: run the step again"
            )
        return left


class Sending(TypedDict, total=False):
    """How a Transport sends, each as its parameter of the same name says."""

    fence: Callable[[], None] | None
    limit: TokenBucket | None
    timed: Timed | None
    deadline: Deadline | None
    dry_run: DryRun


def api_client(*, kubeconfig: Path | None, context: str | None) -> ApiClient:
    """In-cluster config inside a pod, else the kubeconfig (docs/design.md §3)."""
    import urllib3
    from kubernetes.client import ApiClient

    configuration = load_configuration(kubeconfig=kubeconfig, context=context)
    # urllib3's own default retries would resend a PUT whose answer was lost (it counts PUT
    # as idempotent) and multiply every timeout by four: with_retries is the only retry layer.
    configuration.retries = urllib3.util.Retry(total=0, connect=0, read=0, redirect=0, status=0)
    return ApiClient(configuration)


class Transport:
    """Requests over the client's `ApiClient` (its configuration, auth, TLS and timeouts).

    Not its generated API classes: those cost ~0.5 s to build (CoreV1Api's module alone is
    63k lines), and their models are a round trip the steps do not need. Bodies are read as
    plain JSON. Under a `dry_run` every write (not a read) is as `DryRun` says.
    """

    def __init__(
        self,
        api: ApiClient,
        *,
        fence: Callable[[], None] | None = None,
        limit: TokenBucket | None = None,
        timed: Timed | None = None,
        deadline: Deadline | None = None,
        dry_run: DryRun = "none",
    ) -> None:
        self.api = api
        self.deadline = deadline
        self.dry_run = dry_run
        self._fence = fence
        self._limit = limit
        self._timed = timed
        self._unsent: list[dict[str, Any]] = []

    @property
    def server(self) -> str:
        """The API server's URL, as the kubeconfig or the in-cluster config names it."""
        return str(self.api.configuration.host)

    def send(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Any = None,
        content_type: str = JSON,
        timeout: Timeout = REQUEST_TIMEOUT,
    ) -> RESTResponse:
        """Send one request, its body unread; a status outside 2xx is an ApiError.

        Under a Deadline, a request is sent only while time is left, and waits for its answer
        no longer than that: the step stops between requests, never between a write and
        its answer being awaited, so a write is sent whole or not at all.
        """
        import urllib3

        if self._limit is not None:
            self._limit.take()
        if self._fence is not None and method != "GET":
            self._fence()  # as late as can be, after any wait: nothing is sent once it refuses
        if self.dry_run == "server" and method != "GET":
            query = [*query, ("dryRun", "All")]
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        if self.deadline is not None:
            left = self.deadline.left(f"before {method} {path} was sent")
            timeout = (
                (min(timeout[0], left), min(timeout[1], left))
                if isinstance(timeout, tuple)
                else min(timeout, left)
            )
        sent = time.monotonic()
        try:
            response = self.api.call_api(*request, _request_timeout=timeout)
        except urllib3.exceptions.HTTPError:
            self.out_of_time(f"waiting for the answer to {method} {path}")
            raise
        finally:
            if self._timed is not None:
                self._timed(method, kinds.resource_of(path), time.monotonic() - sent)
        if not 200 <= response.status <= 299:
            data: bytes = response.read()  # type: ignore[no-untyped-call]
            raise ApiError.from_body(response.status, str(response.reason or ""), data)
        return response

    def out_of_time(self, waiting: str) -> None:
        """OutOfTime if the deadline passed: what failed failed for want of time."""
        if self.deadline is not None:
            self.deadline.left(waiting)

    def json(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        """One request whose answer is a JSON object; --dry-run=client keeps a write back."""
        if self.dry_run == "client" and method != "GET":
            return self._keep_back(method, path, options.get("body"))
        text = self.text(method, path, **options)
        try:
            return as_object(json.loads(text))
        except (ValueError, TypeError) as e:
            raise unreadable(e) from e

    def _keep_back(self, method: str, path: str, body: Any) -> dict[str, Any]:
        """--dry-run=client: the write is kept, not sent; it answers with its own body.

        As the server would answer an update with nothing else changed: the step carries on
        and reports the resourceVersion it read, the precondition the write would be sent on.
        """
        self._unsent.append({"method": method, "path": path, "body": body})
        return as_object(copy.deepcopy(body))

    def take_unsent(self) -> list[dict[str, Any]]:
        """The writes --dry-run=client kept back since it was last asked, in order."""
        taken, self._unsent = self._unsent, []
        return taken

    def text(self, method: str, path: str, **options: Any) -> str:
        """One request whose answer is read whole, as UTF-8 text."""
        response = self.send(method, path, **options)
        data: bytes = response.read()  # type: ignore[no-untyped-call]
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise unreadable(e) from e
