"""What the controller shows: Prometheus metrics, /healthz and /readyz, on one address."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

PREFIX: Final = "dispatch_admission"

GATED: Final = Counter(
    f"{PREFIX}_reservations_gated",
    "Reservations found pending on one of this project's checks, each counted once.",
)
RAISES: Final = Counter(f"{PREFIX}_raises", "Raises of A, each for one reservation.")
APPROVALS: Final = Counter(
    f"{PREFIX}_approvals",
    "Checks marked Ready; kind: dispatch (after its raise) or other (nothing raised).",
    ["kind"],
)
REFUSALS: Final = Counter(f"{PREFIX}_refusals", "Reservations left Pending, by reason.", ["reason"])
RESERVED_TO_APPROVED: Final = Histogram(
    f"{PREFIX}_reserved_to_approved_seconds",
    "From when the controller first saw a reservation pending on its check to its approval.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
AUDITS: Final = Counter(
    f"{PREFIX}_audits",
    "Audit passes of a managed TrainJob, by outcome: clean (nothing written), recorded (J or "
    "an execution recorded), flagged (findings), conflict (changed meanwhile: again), gone, "
    "transient, error.",
    ["outcome"],
)
FINDINGS: Final = Counter(
    f"{PREFIX}_findings",
    "Audit findings, by kind and the TrainJob's namespace, each counted when a pass first sees "
    "the TrainJob's findings so.",
    ["kind", "namespace"],
)
UNOPENED: Final = Gauge(
    f"{PREFIX}_unopened_trainjobs",
    "Managed TrainJobs open whose JobSet Trainer could not open (core/rules/carried.py): "
    "nothing runs; each told once in a Warning Event NotOpened with Trainer's reason.",
)
UNHELD: Final = Gauge(
    f"{PREFIX}_unheld_trainjobs",
    "Managed TrainJobs held whose JobSet Trainer could not suspend (core/rules/carried.py): "
    "what it runs goes on; each told once in a Warning Event NotHeld with Trainer's reason.",
)
WATCHED: Final = Gauge(
    f"{PREFIX}_watched_objects",
    "Objects the auditor keeps of what it lists and watches, by kind (trainjobs, jobsets, jobs, "
    "pods, snapshots, records).",
    ["kind"],
)
DETECTION: Final = Histogram(
    f"{PREFIX}_detection_latency_seconds",
    "From the arrival of the first watch event (or list) that showed a change to a TrainJob, "
    "its JobSet, a Job or a pod, to the audit's update that flagged the TrainJob foreign.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
)
PASSES: Final = Counter(
    f"{PREFIX}_reconcile",
    "Gate passes over a Workload, by the ClusterQueue that reserved it and result: success "
    "(nothing more to do until it changes), requeue_after (a wait it sees through, such as a "
    "drain), retry (a failure: again after the Workload's backoff).",
    ["cluster_queue", "result"],
)
PASS_ERRORS: Final = Counter(
    f"{PREFIX}_reconcile_errors",
    "Gate passes that failed, by the ClusterQueue and error: conflict (409: changed since "
    "its watch told it), gone (404), transient (an API server that could not serve), refused "
    "(RBAC, a webhook or a policy), bug (an unexpected exception, logged with its traceback).",
    ["cluster_queue", "error"],
)
PASS_SECONDS: Final = Histogram(
    f"{PREFIX}_reconcile_seconds",
    "How long one gate pass took, its requests included, by the ClusterQueue.",
    ["cluster_queue"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RETRIES: Final = Counter(
    f"{PREFIX}_workqueue_retries",
    "Keys put back after a failed pass, each after its own backoff, by queue (gate, audit).",
    ["queue"],
)
RATE_LIMITER_WAIT: Final = Histogram(
    f"{PREFIX}_rate_limiter_wait_seconds",
    "How long each request of the leader's work waited for --kube-api-qps (client-go's "
    "rest_client_rate_limiter_duration_seconds).",
    buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
REQUEST_SECONDS: Final = Histogram(
    f"{PREFIX}_request_duration_seconds",
    "How long each request of the leader's work took, from sending it to its answer, by verb "
    "and resource (client-go's rest_client_request_duration_seconds, by resource not host).",
    ["verb", "resource"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
AUDIT_QUEUE_DEPTH: Final = Gauge(f"{PREFIX}_audit_queue_depth", "TrainJobs waiting for an audit.")
LEADER: Final = Gauge(f"{PREFIX}_leader", "1 while this replica holds the leader Lease.")
QUEUE_DEPTH: Final = Gauge(f"{PREFIX}_queue_depth", "Workloads waiting for a worker.")


def observe_request(verb: str, resource: str, seconds: float) -> None:
    """One request of the leader's work, answered (or failed) after `seconds`."""
    REQUEST_SECONDS.labels(verb, resource).observe(seconds)


class Probes:
    """What /healthz and /readyz answer: set by the controller as it starts and runs."""

    def __init__(self) -> None:
        self.healthy = threading.Event()
        self.ready = threading.Event()


Route = Callable[[], tuple[int, str, bytes]]  # status, content type, body
Authorize = Callable[[str | None], int]  # the Authorization header -> 200, 401 or 403
_REFUSED: Final = {401: b"Unauthorized\n", 403: b"Forbidden\n"}
CONNECTION_TIMEOUT: Final = 10.0  # seconds a connection may take to ask: none holds a thread


def metrics_body() -> tuple[int, str, bytes]:
    """/metrics: every series of this process, in Prometheus' text format."""
    return 200, CONTENT_TYPE_LATEST, generate_latest()


def _handler(routes: dict[str, Route], authorize: Authorize | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = CONNECTION_TIMEOUT

        def setup(self) -> None:
            super().setup()
            if isinstance(self.request, ssl.SSLSocket):  # in this connection's own thread
                self.request.do_handshake()

        def do_GET(self) -> None:
            route = routes.get(self.path.partition("?")[0])
            allowed = (
                200
                if authorize is None or route is None
                else authorize(self.headers.get("Authorization"))
            )
            if route is None:
                status, content_type, body = 404, "text/plain", b"no\n"
            elif allowed != 200:
                status, content_type, body = allowed, "text/plain", _REFUSED[allowed]
            else:
                status, content_type, body = route()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass  # a probe every few seconds is not worth a log line

    return Handler


def _probe(flag: threading.Event) -> tuple[int, str, bytes]:
    return (200, "text/plain", b"ok\n") if flag.is_set() else (503, "text/plain", b"not yet\n")


def server_at(
    address: str, routes: dict[str, Route], *, authorize: Authorize | None = None
) -> ThreadingHTTPServer:
    """A server bound to HOST:PORT for `routes`, not yet serving."""
    host, _, port = address.rpartition(":")
    server = ThreadingHTTPServer((host.strip("[]"), int(port)), _handler(routes, authorize))
    server.daemon_threads = True
    return server


def start(server: ThreadingHTTPServer) -> None:
    """Serve in a daemon thread."""
    threading.Thread(target=server.serve_forever, name="serve", daemon=True).start()


def serve(address: str, probes: Probes, *, metrics: bool = True) -> ThreadingHTTPServer:
    """Serve the probes (and /metrics, unless served apart) at HOST:PORT; the server."""
    routes: dict[str, Route] = {
        "/healthz": lambda: _probe(probes.healthy),
        "/readyz": lambda: _probe(probes.ready),
    }
    if metrics:
        routes["/metrics"] = metrics_body
    server = server_at(address, routes)
    start(server)
    return server
