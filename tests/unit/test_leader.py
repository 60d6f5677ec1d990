"""The elector's fence (controller/leader.py), by a clock the test moves: a replica leads
until its renew deadline after the start of its last successful renewal, never longer, and
a gateway fenced by it sends no write after that."""

from __future__ import annotations

import copy
import threading
from typing import Any, cast

import pytest

from dispatch_k8s.controller.leader import Elector
from dispatch_k8s.controller.settings import ControllerSettings
from dispatch_k8s.core.rules.errors import Fenced, Transient
from dispatch_k8s.core.shell.gateway import Gateway
from tests.unit.factories import SERVER

LEASE_SECONDS = 15  # renew deadline 10 s, retry period 3 s


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class LeaseServer:
    """One Lease, as the API server keeps it: a PUT must carry the resourceVersion read.
    Each request takes `latency` seconds of the test's clock; `down` answers none."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.latency = 0.0
        self.down = False
        self.timeouts: list[float] = []
        self.writes = 0

    def _request(self, timeout: float) -> None:
        self.timeouts.append(timeout)
        if self.down:
            self.clock.now += timeout
            raise Transient("Lease: API server unreachable: ReadTimeoutError")
        self.clock.now += self.latency

    def read_lease(self, namespace: str, name: str, *, timeout: float) -> dict[str, Any] | None:
        self._request(timeout)
        return copy.deepcopy(self.lease)

    def write_lease(self, lease: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        self._request(timeout)
        self.version += 1
        self.writes += 1
        self.lease = copy.deepcopy(lease)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def server(clock: Clock) -> LeaseServer:
    return LeaseServer(clock)


def elector(server: LeaseServer, clock: Clock, identity: str = "a") -> Elector:
    return Elector(
        cast(Gateway, server),
        namespace="dispatch-system",
        name="dispatch-admission-controller",
        identity=identity,
        lease_seconds=LEASE_SECONDS,
        clock=clock,
    )


def test_a_replica_leads_from_its_renewal_until_the_renew_deadline_after_it_began(
    server: LeaseServer, clock: Clock
) -> None:
    candidate = elector(server, clock)
    assert not candidate.leads()
    server.latency = 1.0  # read and write: the renewal began 2 s before it returned
    assert candidate.try_once()
    assert clock.now == 102.0
    clock.now = 100.0 + candidate.renew_deadline - 0.001
    assert candidate.leads()
    clock.now = 100.0 + candidate.renew_deadline
    assert not candidate.leads()
    with pytest.raises(Fenced):
        candidate.fence()


def test_each_renewal_is_bounded_by_what_is_left_of_the_deadline(
    server: LeaseServer, clock: Clock
) -> None:
    candidate = elector(server, clock)
    assert candidate.try_once()
    assert server.timeouts == [candidate.renew_deadline] * 2
    server.timeouts.clear()
    clock.now += 4.0  # six seconds of the ten left
    server.down = True  # accepts, never answers: the read takes its whole timeout
    assert not candidate.try_once()
    assert server.timeouts == [pytest.approx(6.0)]
    assert not candidate.leads(), "the renewal ended at the deadline, not a minute later"


def test_a_lapsed_term_is_never_renewed_after_the_fact(server: LeaseServer, clock: Clock) -> None:
    """A replica paused (SIGSTOP) past its deadline finds the Lease still its own: renewing
    it would let work begun in the old term go on after a gap in which it did not lead."""
    candidate = elector(server, clock)
    assert candidate.try_once()
    writes = server.writes
    clock.now += LEASE_SECONDS + 5
    assert not candidate.try_once()
    assert server.writes == writes
    assert not candidate.leads()


def test_keep_sets_lost_once_no_renewal_succeeded_by_the_deadline(
    server: LeaseServer, clock: Clock
) -> None:
    candidate = elector(server, clock)
    assert candidate.try_once()
    server.down = True
    stop, lost = threading.Event(), threading.Event()
    renewing = threading.Thread(target=candidate.keep, args=(stop, lost))
    candidate.retry_seconds = 0.01  # the test's clock moves by the server's timeouts
    renewing.start()
    renewing.join(timeout=10)
    assert lost.is_set()
    assert not renewing.is_alive()


def test_a_second_candidate_waits_a_whole_lease_duration_from_what_it_saw(
    server: LeaseServer, clock: Clock
) -> None:
    first, second = elector(server, clock, "a"), elector(server, clock, "b")
    assert first.try_once()
    assert not second.try_once()
    clock.now += first.renew_deadline  # the first is fenced from here on
    assert not first.leads()
    assert not second.try_once(), "a lease duration has not passed since b saw the record"
    clock.now += LEASE_SECONDS
    assert second.try_once()
    assert not first.try_once()


class RecordingApi:
    """The part of the client's ApiClient the gateway sends through."""

    configuration = SERVER

    def __init__(self) -> None:
        self.sent: list[str] = []

    def param_serialize(self, *, method: str, resource_path: str, **_: Any) -> tuple[str, str]:
        return method, resource_path

    def call_api(self, method: str, path: str, **_: Any) -> Any:
        self.sent.append(method)
        raise AssertionError("the test stops at what was sent")


def test_a_fenced_gateway_sends_reads_but_no_write_once_the_fence_refuses() -> None:
    api = RecordingApi()
    refuse = threading.Event()

    def fence() -> None:
        if refuse.is_set():
            raise Fenced("not the leader")

    gateway = Gateway(cast(Any, api)).fenced(fence)
    with pytest.raises(AssertionError):
        gateway.read_trainjob("team-a", "job")
    refuse.set()
    with pytest.raises(AssertionError):
        gateway.read_trainjob("team-a", "job")
    with pytest.raises(Fenced):
        gateway.write_lease({"metadata": {"namespace": "a", "name": "b"}}, timeout=1.0)
    assert api.sent == ["GET", "GET"]


def test_the_leader_keeps_client_go_s_proportions_as_its_help_tells_them(
    server: LeaseServer, clock: Clock
) -> None:
    candidate = elector(server, clock)
    # client-go's defaults: a 2 s retry period and a 10 s renew deadline for a 15 s lease.
    assert (candidate.retry_seconds, candidate.renew_deadline) == (
        LEASE_SECONDS / 5,
        LEASE_SECONDS * 2 / 3,
    )
    told = " ".join(str(ControllerSettings.model_fields["lease_seconds"].description).split())
    assert "renew it every 1/5 of it and stops leading 2/3 of it after" in told
