"""The requests one gate pass sends, counted at the gateway: none where there is nothing to do.

A unit test of the shell's reads, with the gateway a recorder: what the API server does with
them is proven against the real one (tests/integration/test_admission_controller.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from dispatch_k8s.controller.queue import RETRY
from dispatch_k8s.controller.reconcile import Gatekeeper
from dispatch_k8s.core.rules.errors import Forbidden, NotFound, PreconditionFailed, Transient
from tests.unit.test_gate import dispatch_job
from tests.unit.test_workload import CHECK, workload_dict


class Recorder:
    """Answers reads with a dispatch TrainJob not raised for, notes every request's name; the
    request `fails_at` raises `failure`."""

    def __init__(self, *, fails_at: str = "", failure: Exception | None = None) -> None:
        self.requests: list[str] = []
        self._fails_at = fails_at
        self._failure = failure

    def __getattr__(self, request: str) -> Any:
        def answer(*args: Any, **kwargs: Any) -> Any:
            self.requests.append(request)
            if request == self._fails_at and self._failure is not None:
                raise self._failure
            return dispatch_job() if request == "read_trainjob" else None

        return answer


def gatekeeper(gateway: Recorder) -> Gatekeeper:
    return Gatekeeper(gateway, checks=lambda: frozenset({CHECK}), other_workloads="leave")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "workload",
    [
        workload_dict(state="Ready"),
        workload_dict(reserved="False"),
        workload_dict(finished="True"),
    ],
    ids=["check ready", "not reserved", "finished"],
)
def test_a_workload_with_nothing_to_gate_costs_no_request(workload: dict[str, Any]) -> None:
    gateway = Recorder()
    keeper = gatekeeper(gateway)
    try:
        assert keeper.gate(workload) is None
    finally:
        keeper.close()
    assert gateway.requests == []


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (PreconditionFailed("409"), "conflict"),
        (NotFound("404"), "gone"),
        (Transient("503"), "transient"),
        (Forbidden("403"), "refused"),
    ],
)
def test_a_failed_pass_is_retried_after_its_backoff_and_counted_by_its_queue(
    failure: Exception, error: str
) -> None:
    workload = workload_dict()
    workload["status"]["admission"] = {"clusterQueue": "team-a-queue"}
    labels = {"cluster_queue": "team-a-queue", "error": error}
    before = REGISTRY.get_sample_value("dispatch_admission_reconcile_errors_total", labels) or 0
    gateway = Recorder(fails_at="update_trainjob", failure=failure)  # the raise
    keeper = gatekeeper(gateway)
    try:
        assert keeper.gate(workload) is RETRY
    finally:
        keeper.close()
    assert gateway.requests == ["read_trainjob", "read_jobset", "update_trainjob"]
    after = REGISTRY.get_sample_value("dispatch_admission_reconcile_errors_total", labels)
    assert after == before + 1


def test_a_managed_trainjob_its_watch_told_is_not_read_again_but_its_jobset_is() -> None:
    """The raise is preconditioned on the cached TrainJob's resourceVersion; the JobSet has
    no such cover (a replaced one would show an old J), so it is read afresh."""
    gateway = Recorder(fails_at="update_trainjob", failure=PreconditionFailed("409"))
    keeper = Gatekeeper(
        gateway,  # type: ignore[arg-type]
        checks=lambda: frozenset({CHECK}),
        other_workloads="leave",
        cached_trainjob=lambda _namespace, _name: dispatch_job(),
    )
    try:
        assert keeper.gate(workload_dict()) is RETRY
    finally:
        keeper.close()
    assert gateway.requests == ["read_jobset", "update_trainjob"]
