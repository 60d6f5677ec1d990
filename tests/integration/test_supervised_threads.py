"""A thread of the leader's term that dies of an unexpected exception ends the term: /healthz
fails, the Lease is freed and the process exits 1, so that a standby takes over at once and
the Deployment starts the replica again, instead of a leader that holds the Lease and does
nothing with /healthz at 200.

The bug is played (tests/integration/played_bug/): the replica runs the real controller against
the real API server, with its Workloads watch made to raise once the test says so.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Final

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.kueue_objects import KueueSetup
from tests.support.lifecycle import Step, read_trainjob, start_queued
from tests.support.proxy import proxied
from tests.support.replicas import Replica, admitted, replicas

pytestmark = pytest.mark.integration
PLAYED_BUG: Final = Path(__file__).parent / "played_bug"
LEASE_NAME: Final = "dispatch-admission-controller"  # its --lease-name default
# Added to each chunk between the doomed replica and the API server once the bug is armed:
# freeing the Lease then takes 0.3 s or more, while /healthz must already say 503 (and its
# renewals still fit well within their deadline).
LATENCY: Final = 0.15
POLL: Final = 0.02  # seconds between two /healthz requests
NO_AUDIT: Final = ("--no-audit",)


def healthz_until_gone(replica: Replica, answers: list[int]) -> None:
    """Note every /healthz status (0: no answer) until the replica's process has ended."""
    pause = threading.Event()  # never set: waiting on it is a plain delay
    while replica.process.poll() is None:
        answers.append(replica.get("/healthz")[0])
        pause.wait(POLL)


def test_a_watch_thread_that_dies_fails_healthz_frees_the_lease_and_ends_the_process(
    control_plane: Cluster,
    api_client: client.ApiClient,
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """The doomed replica leads and gates a job; its Workloads watch then dies on the next
    Workload it is told. /healthz answers 503 from then on until the process is gone (never
    200 again), the process exits 1 with the thread's death logged, the Lease is free (not
    left to lapse) the moment it has exited, and the standby gates the job that killed it."""
    kueue.install(cpu="2")
    poison = tmp_path / "poison"
    played = {
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(PLAYED_BUG), os.environ.get("PYTHONPATH")])
        ),
        "DISPATCH_TEST_POISON": str(poison),
    }
    coordination = client.CoordinationV1Api(api_client)
    answers: list[int] = []
    with (
        proxied(control_plane.kubeconfig, tmp_path) as (proxy, through_proxy),
        replicas(through_proxy, namespace, tmp_path, "doomed", extra=NO_AUDIT, env=played) as (
            doomed,
        ),
    ):
        wait_until(lambda: doomed.leading() or None, what="the doomed replica to lead", timeout=30)
        with replicas(control_plane.kubeconfig, namespace, tmp_path, "standby", extra=NO_AUDIT) as (
            standby,
        ):
            before = start_queued(step, namespace, torch_runtime, kueue, "before").result["name"]
            admitted(custom, namespace, before)
            assert doomed.get("/healthz") == (200, "ok\n")
            proxy.latency = LATENCY
            poison.touch()
            poller = threading.Thread(target=healthz_until_gone, args=(doomed, answers))
            poller.start()
            after = start_queued(step, namespace, torch_runtime, kueue, "after").result["name"]
            assert doomed.process.wait(timeout=60) == 1
            lease = coordination.read_namespaced_lease(LEASE_NAME, namespace).spec
            assert lease is not None
            assert lease.holder_identity != "doomed", "the Lease was left to lapse"
            poller.join(timeout=30)
            wait_until(lambda: standby.leading() or None, what="the standby to lead", timeout=30)
            admitted(custom, namespace, after)
    messages = [str(record.get("message")) for record in doomed.records()]
    assert f"thread workloads {namespace} died" in messages, messages
    assert "released the leader Lease" in messages, messages
    answered = [status for status in answers if status]
    assert 503 in answered, f"/healthz never failed: {answers}"
    assert 200 not in answered[answered.index(503) :], f"/healthz healthy again: {answers}"
    for name in (before, after):
        annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
        assert annotations[wire.ADMISSION_FLOOR_ANNOTATION] == "1", name
