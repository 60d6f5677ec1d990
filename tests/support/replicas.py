"""`dispatch-admission-controller` replicas as processes beside the local control plane.

Each replica serves its probes and metrics on its own loopback port and writes its JSON log
lines to a file the test reads; replicas of one test share its Lease.
"""

from __future__ import annotations

import http.client
import json
import signal
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.process import free_ports
from tests.cluster.wait import wait_until
from tests.support.environment import host_env
from tests.support.kueue_objects import KUEUE, KueueSetup, condition
from tests.support.lifecycle import BIN, DEADLINE, TRAINER

READY_TIMEOUT: Final = 60.0
LEASE_SECONDS: Final = 6  # every replica's --lease-seconds
RENEW_DEADLINE: Final = timedelta(seconds=LEASE_SECONDS * 2 / 3)  # its renew deadline
WRITES: Final = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass
class Replica:
    """One running controller process."""

    identity: str
    port: int
    log: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def get(self, path: str) -> tuple[int, str]:
        """GET a path of its probe/metrics server: (status, body)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:  # not serving (yet, or any more)
            return 0, ""

    def metric(self, name: str, labels: str = "") -> float:
        """The value of one sample of its /metrics (0 when absent)."""
        return sample_of(self.get("/metrics")[1], name, labels)

    def records(self) -> list[dict[str, Any]]:
        """Its log records so far."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [json.loads(line) for line in lines if line.startswith("{")]

    def leading(self) -> bool:
        """Whether it holds the Lease, by its own gauge."""
        return self.metric("dispatch_admission_leader") == 1.0

    def kill(self) -> None:
        """SIGKILL: no release of the Lease, no pass finished."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM, as the kubelet stops a pod; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)


def sample_of(body: str, name: str, labels: str = "") -> float:
    """The value of one sample of a /metrics body (0 when absent)."""
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in body.splitlines():
        sample, _, value = line.rpartition(" ")
        if sample == wanted:
            return float(value)
    return 0.0


def launch(
    name: str, port: int, log_dir: Path, argv: Sequence[str], env: Mapping[str, str] | None = None
) -> Replica:
    """Start one `dispatch-admission-controller ARGV` (its probes on 127.0.0.1:`port`), its log
    lines to LOG_DIR/NAME.log; with `env` as its whole environment when given."""
    log = log_dir / f"{name}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(BIN / "dispatch-admission-controller"), *argv],
            stdout=subprocess.DEVNULL,
            stderr=sink,
            env=env,
        )
    return Replica(name, port, log, process)


def wait_ready(replica: Replica) -> None:
    """Wait until the replica's /readyz answers 200."""
    wait_until(
        lambda: replica.get("/readyz")[0] == 200 or None,
        what=f"controller {replica.identity} to be ready",
        timeout=READY_TIMEOUT,
    )


def end(replica: Replica) -> None:
    """SIGKILL a replica still running (a test that failed before it stopped it)."""
    if replica.process.poll() is None:
        replica.process.kill()
        replica.process.wait(timeout=30)


def replica_argv(
    kubeconfig: Path, namespace: str, name: str, port: int, extra: Sequence[str] = ()
) -> list[str]:
    """A replica's arguments: gating `namespace` only, with the Lease there, the tests' short
    Lease and resync (`extra`, after them, wins)."""
    return [
        *("--kubeconfig", str(kubeconfig)),
        *("--namespaces", namespace, "--lease-namespace", namespace),
        *("--identity", name, "--address", f"127.0.0.1:{port}"),
        *("--lease-seconds", str(LEASE_SECONDS), "--resync-seconds", "20"),
        *extra,
    ]


@contextmanager
def replicas(
    kubeconfig: Path,
    namespace: str,
    log_dir: Path,
    *names: str,
    extra: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
) -> Iterator[list[Replica]]:
    """Start one replica per name, gating `namespace` only, with the Lease there; stop all.

    Each replica's environment is the test's own without its DISPATCH_* (so it runs the code
    under test: PYTHONPATH), then `env`."""
    started: list[Replica] = []
    try:
        for name, port in zip(names, free_ports(len(names)), strict=True):
            argv = replica_argv(kubeconfig, namespace, name, port, extra)
            started.append(launch(name, port, log_dir, argv, env=host_env(env)))
        for replica in started:
            wait_ready(replica)
        yield started
    finally:
        for replica in started:
            end(replica)


def received(event: dict[str, Any]) -> datetime:
    """When the API server received an audited request."""
    return datetime.fromisoformat(event["requestReceivedTimestamp"])


def writes_after_the_deadline(events: list[dict[str, Any]]) -> tuple[datetime, list[str]]:
    """From one replica's audited requests (ControlPlane.audit_events): its deadline by the
    server's clock (its last renewal, which began earlier, plus the renew deadline: later than
    its own), and each write received after it that the server took.

    A write refused is let be: one that passed the replica's fence just before the process was
    paused leaves when it resumes, however late, as a write already on the wire would arrive.
    It carries the resourceVersion read before the pause, so once anyone else wrote the
    object it is refused (409) and changes nothing.
    """
    renewals = [
        e
        for e in events
        if e["objectRef"].get("resource") == "leases" and e["verb"] in WRITES and taken(e)
    ]
    assert renewals, "the replica never took its Lease"
    deadline = received(renewals[-1]) + RENEW_DEADLINE
    late = [
        f"{e['verb']} {e['requestURI']} at {e['requestReceivedTimestamp']}"
        for e in events
        if e["verb"] in WRITES and received(e) > deadline and taken(e)
    ]
    return deadline, late


def taken(event: dict[str, Any]) -> bool:
    """Whether the API server took an audited request (answered 2xx)."""
    return 200 <= int(event["responseStatus"]["code"]) <= 299


def other_teams_trainjob(
    custom: client.CustomObjectsApi, namespace: str, runtime: str, kueue: KueueSetup
) -> str:
    """A queued TrainJob that dispatch-start did not make (no managed-by label, no patch)."""
    body = {
        "apiVersion": "/".join(TRAINER),
        "kind": "TrainJob",
        "metadata": {"name": "other-team", "labels": {wire.QUEUE_LABEL: kueue.local_queue}},
        "spec": {
            "runtimeRef": {"name": runtime},
            "suspend": True,
            "trainer": {
                "image": "registry.invalid/other:1",
                "command": ["true"],
                "numNodes": 1,
                "resourcesPerNode": {"requests": {"cpu": "1"}},
            },
        },
    }
    custom.create_namespaced_custom_object(*TRAINER, namespace, "trainjobs", body)
    return "other-team"


def workload_of(custom: client.CustomObjectsApi, namespace: str, trainjob: str) -> dict[str, Any]:
    """The Workload a TrainJob's Kueue integration made, once there is one."""

    def found() -> dict[str, Any] | None:
        listed = custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")
        assert isinstance(listed, dict)
        for item in listed["items"]:
            owners = item["metadata"].get("ownerReferences") or []
            if any(owner["name"] == trainjob for owner in owners):
                return dict(item)
        return None

    return wait_until(found, what=f"the Workload of {trainjob}", timeout=DEADLINE)


def admitted(custom: client.CustomObjectsApi, namespace: str, trainjob: str) -> dict[str, Any]:
    """The TrainJob's Workload once Kueue has admitted it."""

    def done() -> dict[str, Any] | None:
        current = workload_of(custom, namespace, trainjob)
        return current if condition(current, "Admitted") == "True" else None

    return wait_until(done, what=f"Kueue to admit {trainjob}", timeout=DEADLINE)


def secure_get(port: int, path: str, token: str | None) -> tuple[int, bytes, bytes]:
    """GET 127.0.0.1:`port` over TLS (--metrics-address; its certificate, its own, not
    verified), with `token` as the bearer: the status, the body, the server's certificate."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        connection.request("GET", path, headers=headers)
        assert isinstance(connection.sock, ssl.SSLSocket)  # the server closes it after answering
        certificate = connection.sock.getpeercert(binary_form=True)
        answer = connection.getresponse()
        return answer.status, answer.read(), certificate or b""
    finally:
        connection.close()
