"""The requests one gate pass sends, counted at the gateway: none where there is nothing to do.

A unit test of the shell's reads, with the gateway a recorder: what the API server does with
them is proven against the real one (tests/integration/test_admission_controller.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatch_k8s.controller.queue import RETRY
from dispatch_k8s.controller.reconcile import Gatekeeper
from dispatch_k8s.core.rules.errors import PreconditionFailed, Transient
from tests.unit.test_gate import dispatch_job
from tests.unit.test_workload import CHECK, workload_dict


class Recorder:
    """Answers reads with what it was given, notes every request's name."""

    def __init__(self, *, fails_with: Exception | None = None) -> None:
        self.requests: list[str] = []
        self._fails_with = fails_with

    def __getattr__(self, request: str) -> Any:
        def answer(*args: Any, **kwargs: Any) -> Any:
            self.requests.append(request)
            if self._fails_with is not None:
                raise self._fails_with
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


@pytest.mark.parametrize("failure", [PreconditionFailed("409"), Transient("503")])
def test_a_failed_pass_is_retried_after_its_backoff(failure: Exception) -> None:
    gateway = Recorder(fails_with=failure)
    keeper = gatekeeper(gateway)
    try:
        assert keeper.gate(workload_dict()) is RETRY
    finally:
        keeper.close()
    assert gateway.requests[0] == "read_trainjob", "a pending reservation reads its TrainJob"
