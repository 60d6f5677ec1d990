"""A leader whose Lease lapsed writes nothing more: paused (SIGSTOP) past its renew deadline,
or behind a connection that stopped carrying packets, no request it sends once the deadline is
past changes anything, and it exits (75) for its Deployment to start it again. (A write that
passed its fence just before the pause leaves on resuming, refused by its precondition.)

Who sent what, and when, is read from the API server's audit log (tests/cluster/harness.py:
the replica acts as an audited user), not from the replica's own word.
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.shell import clock
from tests.cluster.harness import ControlPlane
from tests.cluster.wait import wait_until
from tests.support.lifecycle import TRAINER, Step, read_trainjob, run_stage, start_args
from tests.support.proxy import proxied
from tests.support.replicas import (
    LEASE_SECONDS,
    RENEW_DEADLINE,
    replicas,
    writes_after_the_deadline,
)

pytestmark = [pytest.mark.integration, pytest.mark.policies("none")]
RETRY_SECONDS: Final = LEASE_SECONDS / 5
LEASE_NAME: Final = "dispatch-admission-controller"  # its --lease-name default
EXITED: Final = 75  # transient: its Deployment starts it again, as a standby


def lapsed(coordination: client.CoordinationV1Api, namespace: str) -> str:
    """Until the Lease has gone unrenewed for more than a lease duration: free for anyone. The
    resourceVersion it was last read at."""

    def free() -> str | None:
        lease = coordination.read_namespaced_lease(LEASE_NAME, namespace)
        assert lease.metadata is not None
        assert lease.spec is not None
        assert lease.spec.renew_time is not None
        unrenewed = datetime.now(UTC) - lease.spec.renew_time
        if unrenewed <= timedelta(seconds=LEASE_SECONDS + 1):
            return None
        return str(lease.metadata.resource_version)

    return wait_until(free, what="the paused leader's Lease to lapse", timeout=4 * LEASE_SECONDS)


def taken_over(coordination: client.CoordinationV1Api, namespace: str, version: str) -> None:
    """A standby takes the lapsed Lease as read at `version` (its precondition), as a replica
    would."""
    now = clock.micro_now()
    body = {
        "metadata": {"resourceVersion": version},
        "spec": {"holderIdentity": "standby", "acquireTime": now, "renewTime": now},
    }
    coordination.patch_namespaced_lease(LEASE_NAME, namespace, body)


def test_a_leader_paused_past_its_deadline_sends_no_write_when_it_resumes_and_exits(
    plane: ControlPlane,
    step: Step,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
    tmp_path: Path,
) -> None:
    user = f"{namespace}-paused"
    kubeconfig = plane.audited_kubeconfig(user, tmp_path / f"{user}.kubeconfig")
    custom = client.CustomObjectsApi(api_client)
    with replicas(kubeconfig, namespace, tmp_path, "paused") as (leader,):
        wait_until(lambda: leader.leading() or None, what="the replica to lead", timeout=30)
        started = step("start", *start_args(namespace, torch_runtime, "paused"))
        assert started.code == 0, started.error
        name = started.result["name"]
        assert run_stage(step, "unsuspend", "--namespace", namespace, "--name", name).code == 0
        leader.process.send_signal(signal.SIGSTOP)
        paused = datetime.now().astimezone()
        try:
            # Work for it, while it cannot look: an opening no raise covers, which its
            # auditor flags (a write) as soon as it sees it.
            assert run_stage(step, "hold", "--namespace", namespace, "--name", name).code == 0
            custom.patch_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", name, {"spec": {"suspend": False}}
            )
            # A standby takes it over, so a renewal caught between the fence and the send
            # is refused too.
            coordination = client.CoordinationV1Api(api_client)
            taken_over(coordination, namespace, lapsed(coordination, namespace))
        finally:
            leader.process.send_signal(signal.SIGCONT)
        assert leader.process.wait(timeout=30) == EXITED
    deadline, late = writes_after_the_deadline(plane.audit_events(user))
    assert deadline < paused + RENEW_DEADLINE + timedelta(seconds=1)
    assert late == [], "written after the replica's renew deadline had passed"
    annotations = read_trainjob(custom, namespace, name)["metadata"].get("annotations") or {}
    assert wire.FOREIGN_ANNOTATION not in annotations, "the fenced replica flagged nothing"


def test_a_leader_behind_a_dead_link_stops_at_its_deadline_and_exits(
    plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    user = f"{namespace}-partitioned"
    kubeconfig = plane.audited_kubeconfig(user, tmp_path / f"{user}.kubeconfig")
    with (
        proxied(kubeconfig, tmp_path) as (proxy, through_proxy),
        replicas(through_proxy, namespace, tmp_path, "partitioned") as (leader,),
    ):
        wait_until(lambda: leader.leading() or None, what="the replica to lead", timeout=30)
        proxy.partition()
        cut_off = time.monotonic()
        assert leader.process.wait(timeout=60) == EXITED
        took = time.monotonic() - cut_off
    # By the deadline its renewal gives up (one attempt, bounded by what is left), within a
    # retry period it notices, within a second it exits: not the minute four 15 s attempts
    # of an unbounded read would take.
    assert took < RENEW_DEADLINE.total_seconds() + RETRY_SECONDS + 3, took
    records = leader.records()
    assert any(r.get("message") == "lost the leader Lease" for r in records)
    _, late = writes_after_the_deadline(plane.audit_events(user))
    assert late == []
