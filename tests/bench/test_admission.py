"""The admission benchmark's own code, run at its smallest (N = 1, one round, no idle wait) on
the tests' cluster: not its figures, which a test never judges, but that its three columns are
what they say, each reservation raised exactly once where a mode raises and never on the floor
(a policy bound in the floor's namespace, or one not bound in policy mode's, would show here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench import admission
from tests.support import policies
from tests.support.cluster_under_test import Cluster

pytestmark = pytest.mark.integration


def test_the_benchmark_verifies_one_raise_per_reservation_in_each_mode(
    control_plane: Cluster, admission_policies: None, tmp_path: Path
) -> None:
    controllers = policies.HARNESS_CONTROLLERS if control_plane.plane is not None else None
    lines = admission.bench(
        control_plane.kubeconfig, tmp_path, {1: 1}, 4, idle_seconds=0, controllers=controllers
    )
    latencies = next(line for line in lines if line.startswith("| 1 |"))
    costs = next(line for line in lines[lines.index(latencies) + 1 :] if line.startswith("| 1 |"))
    cells = [cell.strip() for cell in costs.strip("|").split("|")]
    # Not raised exactly once: plain / policy / check; evictions; the gate's raises / approvals.
    assert cells[2:4] == ["0 / 0 / 0", "0"], costs
    assert cells[4].startswith("1.00 / 1.00, "), costs
    assert [cell.strip() for cell in latencies.strip("|").split("|")][1] == "1", latencies
