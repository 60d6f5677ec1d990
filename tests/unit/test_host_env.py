"""No `DISPATCH_*` of the test process reaches a process the tests start as the product
(tests/support/environment.py): a step reads its settings from them where a flag is not given."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatch_k8s.core.rules import wire
from tests.support import lifecycle
from tests.support.environment import host_env
from tests.support.requests import request_flags
from tests.support.shipped import TORCH_RUNTIME

# What a developer's shell may hold: a trainer's identity, and a setting start reads.
HOST: dict[str, str] = {"DISPATCH_EPOCH": "1000001000001", "DISPATCH_QUEUE": "from-the-host"}
DRY_RUN = ("--dry-run", "--runtime-file", str(TORCH_RUNTIME), *request_flags("host-env"))


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in HOST.items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("host")
def test_host_env_drops_every_dispatch_variable_and_keeps_the_rest() -> None:
    env = host_env({"DISPATCH_IDENTITY": "named-by-the-test"})
    assert not HOST.keys() & env.keys()
    assert env["DISPATCH_IDENTITY"] == "named-by-the-test"
    assert "PATH" in env


@pytest.mark.usefixtures("host")
def test_the_lifecycles_steps_do_not_see_the_hosts_dispatch_variables(tmp_path: Path) -> None:
    """start's dry run, as the cluster suites run a step: with DISPATCH_QUEUE inherited it
    would queue the TrainJob (and refuse it: a queued job must request resources)."""
    kubeconfig = tmp_path / "unused.kubeconfig"  # a dry run from a runtime file reads none
    for run in (
        lifecycle.run_step("start", *DRY_RUN, kubeconfig=kubeconfig),
        lifecycle.run_step("start", *DRY_RUN, kubeconfig=kubeconfig, outputs=tmp_path / "o"),
    ):
        assert run.code == 0, run.stderr
        assert wire.QUEUE_LABEL not in (run.result["metadata"].get("labels") or {})
