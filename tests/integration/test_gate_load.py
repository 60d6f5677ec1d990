"""The gate's load on the API server, with the real Kueue, as the API server saw it: a Workload
whose raise keeps failing comes back after a backoff of its own, doubled with each failure,
holding no other Workload up; the leader's requests keep to its token bucket.

What was sent, and when, is read from the API server's audit log (the replica acts as an
audited user, tests/cluster/harness.py), not from the replica's own word; its metrics must
agree with it, labelled by the ClusterQueue that reserved each Workload.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import combinations
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.harness import ControlPlane
from tests.cluster.wait import wait_until
from tests.integration.own_policy import applied, trainjob_update_policy, wait_refusing
from tests.support.kueue_objects import KueueSetup
from tests.support.lifecycle import DEADLINE, Step, read_trainjob, start_queued
from tests.support.replicas import admitted, received, replicas

pytestmark = [pytest.mark.integration, pytest.mark.policies("none")]
REFUSAL: Final = "dispatch-k8s test: this TrainJob's A is never raised"
FAILURES_BEFORE: Final = 12  # a key's 12th failure in a row is followed by 10 s of backoff
WINDOW: Final = timedelta(seconds=40)  # how long the failing key is watched
FAST: Final = (6, timedelta(seconds=3))  # at least 6 attempts within 3 s of the first
# Attempts within WINDOW: 14 doubling from 5 ms; a resync (every 20 s) adds the key at once,
# and its backoff's own turn comes too.
AT_MOST: Final = 20


def sent(plane: ControlPlane, user: str) -> list[dict[str, Any]]:
    """`user`'s requests, each once: a watch is logged when it starts and when it ends."""
    return list({e["auditID"]: e for e in plane.audit_events(user)}.values())


def floor_raised(job: dict[str, Any]) -> None:
    job["metadata"].setdefault("annotations", {})[wire.ADMISSION_FLOOR_ANNOTATION] = "99"


def test_a_workload_whose_raise_keeps_failing_backs_off_alone_and_holds_no_other_up(
    plane: ControlPlane,
    api_client: client.ApiClient,
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """One worker; a policy refuses every raise of one TrainJob's A (a failure no pass can get
    past). Its key comes back at once at first, then ever later: at least 6
    attempts within 3 s (no fixed delay of a second or more), at most 20 within 40 s (no
    spinning, no fixed delay under two seconds). After its 12th failure, while its backoff is
    10 s or more, another job is approved within 5 s of its reservation: the one worker is
    not held by the failing key's wait. Every failed pass is in the metrics, as many as the
    API server refused, under the ClusterQueue's name."""
    kueue.install(cpu="2")
    cluster_queue = f"{namespace}-cq"
    stuck = start_queued(step, namespace, torch_runtime, kueue, "stuck").result["name"]
    never = (
        f"object.metadata.name != '{stuck}' || "
        f"object.metadata.?annotations[?'{wire.ADMISSION_FLOOR_ANNOTATION}'].orValue('') == "
        f"oldObject.metadata.?annotations[?'{wire.ADMISSION_FLOOR_ANNOTATION}'].orValue('')"
    )
    policy = trainjob_update_policy(namespace, f"dispatch-k8s-test-{namespace}", never, REFUSAL)
    user = f"{namespace}-gate"
    audited = plane.audited_kubeconfig(user, tmp_path / f"{user}.kubeconfig")
    one_worker = ("--workers", "1", "--no-audit")

    def refused() -> list[datetime]:
        """When the API server received each raise of `stuck` it refused."""
        return sorted(
            received(e)
            for e in sent(plane, user)
            if e["verb"] == "update"
            and e["objectRef"].get("resource") == "trainjobs"
            and e["objectRef"].get("name") == stuck
            and REFUSAL in e["responseStatus"].get("message", "")
        )

    with applied(api_client, policy):
        wait_refusing(custom, namespace, stuck, floor_raised, REFUSAL)
        with replicas(audited, namespace, tmp_path, "only", extra=one_worker) as (only,):
            wait_until(
                lambda: len(refused()) >= FAILURES_BEFORE or None,
                what=f"{FAILURES_BEFORE} refused raises",
                timeout=DEADLINE,
            )
            free = start_queued(step, namespace, torch_runtime, kueue, "free").result["name"]
            admitted(custom, namespace, free)
            first = refused()[0]
            wait_until(
                lambda: datetime.now().astimezone() > first + WINDOW or None,
                what="the failing key's window to pass",
                timeout=WINDOW.total_seconds() + DEADLINE,
            )

            def failed_passes() -> float | None:
                """The replica's count of refused passes, once it agrees with the server's."""
                labels = f'cluster_queue="{cluster_queue}",error="refused"'
                counted = only.metric("dispatch_admission_reconcile_errors_total", labels)
                return counted if counted == len(refused()) else None

            wait_until(failed_passes, what="the metrics to count each refusal", timeout=30)
            approved_within_5s = only.metric(
                "dispatch_admission_reserved_to_approved_seconds_bucket", 'le="5.0"'
            )
            successes = only.metric(
                "dispatch_admission_reconcile_total",
                f'cluster_queue="{cluster_queue}",result="success"',
            )
    attempts = refused()
    window = [at for at in attempts if at <= first + WINDOW]
    fast_count, fast_span = FAST
    offsets = [round((at - first).total_seconds(), 3) for at in attempts]  # for the messages
    assert attempts[fast_count - 1] - first <= fast_span, f"the first retries, at {offsets} s"
    assert len(window) <= AT_MOST, f"{len(window)} attempts in {WINDOW}, at {offsets} s"
    assert approved_within_5s == 1, "the other job waited behind the failing key"
    assert successes >= 1
    assert (
        read_trainjob(custom, namespace, free)["metadata"]["annotations"][
            wire.ADMISSION_FLOOR_ANNOTATION
        ]
        == "1"
    )


QPS: Final = 2
BURST: Final = 2
JOBS: Final = 4
# The writes of a raise and an approval: (HTTP verb, resource label) -> as the audit log has
# them (verb, resource, subresource).
TIMED_WRITES: Final = {
    ("PUT", "trainjobs"): ("update", "trainjobs", ""),
    ("PATCH", "workloads/status"): ("patch", "workloads", "status"),
}


def test_the_leaders_requests_keep_to_its_token_bucket(
    plane: ControlPlane,
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """Four reservations waiting when a replica with --kube-api-qps 2 --kube-api-burst 2
    takes the Lease: its lists and watches, then for each Workload a JobSet read, the raise,
    its Events and the approval, some 30 requests it would otherwise send within a second or
    two. Between any two of its requests the API server received no more than the bucket
    allows (the burst, 2 a second, and one for the requests' own latency); the Lease's
    renewals are not held back, and not counted. All four are raised for and admitted."""
    kueue.install(cpu=str(JOBS))
    names = [
        start_queued(step, namespace, torch_runtime, kueue, f"limited-{i}").result["name"]
        for i in range(JOBS)
    ]
    user = f"{namespace}-limited"
    audited = plane.audited_kubeconfig(user, tmp_path / f"{user}.kubeconfig")
    limit = ("--kube-api-qps", str(QPS), "--kube-api-burst", str(BURST), "--no-audit")
    with replicas(audited, namespace, tmp_path, "limited", extra=limit) as (limited,):
        for name in names:
            admitted(custom, namespace, name)
        waited = limited.metric("dispatch_admission_rate_limiter_wait_seconds_sum")
        timed = {
            (verb, resource): limited.metric(
                "dispatch_admission_request_duration_seconds_count",
                f'resource="{resource}",verb="{verb}"',  # as prometheus_client sorts them
            )
            for verb, resource in TIMED_WRITES
        }
    requests = [e for e in sent(plane, user) if e["objectRef"].get("resource") != "leases"]
    times = sorted(received(e) for e in requests)
    assert len(times) >= 6 * JOBS, f"only {len(times)} requests: the bucket was never tested"
    over = [
        (str(times[i]), str(times[j]), j - i + 1)
        for i, j in combinations(range(len(times)), 2)
        if j - i + 1 > BURST + QPS * (times[j] - times[i]).total_seconds() + 1
    ]
    assert over == [], f"more requests than the bucket allows between these: {over[:5]}"
    assert waited > 0, "no request waited for a token"
    # Each write of its work is timed once, under its verb and resource, as the server saw it.
    for (verb, resource), count in timed.items():
        seen = [
            e
            for e in requests
            if (e["verb"], e["objectRef"].get("resource"), e["objectRef"].get("subresource", ""))
            == TIMED_WRITES[(verb, resource)]
        ]
        assert count == len(seen) >= JOBS, (verb, resource, count, len(seen))
    for name in names:
        annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
        assert annotations[wire.ADMISSION_FLOOR_ANNOTATION] == "1", name
