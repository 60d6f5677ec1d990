"""The README's first command, scripts/demo, on the node suite's cluster.

`scripts/demo` is `scripts/setup --demo`, then `python -m tests.demo`, which starts a local
cluster like this suite's and runs its lifecycles there; run here with `--kubeconfig`, it runs
the same lifecycles on this suite's cluster instead, so that a demo broken by a change elsewhere
(its table of expected executions, a helper it shares with the tests) fails CI.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.cluster_under_test import Cluster
from tests.support.environment import host_env

pytestmark = [pytest.mark.node, pytest.mark.cluster]


def test_the_demo_prints_every_execution_as_the_formulas_say(control_plane: Cluster) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.demo", "--kubeconfig", str(control_plane.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
        env=host_env(),
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}"
    assert done.stdout.splitlines()[-1] == (
        "6 executions of 3 jobs; every epoch above the last of its job: yes; every line as the "
        "formulas say: yes: PASS"
    ), done.stdout
