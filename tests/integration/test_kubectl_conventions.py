"""kubectl's conventions against the real API server: the kubeconfig context's namespace, and
--request-timeout as the step's deadline (issue 27). The parsing of each is unit-tested
(tests/unit/test_settings.py, test_kubectl_flags.py); here the API server answers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.support.cluster_under_test import Cluster
from tests.support.kueue_objects import KueueSetup
from tests.support.lifecycle import Step, read_trainjob, run_step, start_args, start_queued

pytestmark = pytest.mark.integration


def in_namespace(kubeconfig: Path, namespace: str, path: Path) -> Path:
    """The same kubeconfig with its current context's namespace set, as `kubectl config
    set-context --current --namespace` sets it."""
    config = yaml.safe_load(kubeconfig.read_text())
    (context,) = [c for c in config["contexts"] if c["name"] == config["current-context"]]
    context["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_step_with_no_namespace_acts_in_the_context_s_and_a_flag_wins(
    step: Step, namespace: str, torch_runtime: str, control_plane: Cluster, tmp_path: Path
) -> None:
    started = step("start", *start_args(namespace, torch_runtime, "context-ns"))
    assert started.code == 0, started.error
    name = started.result["name"]
    kubeconfig = in_namespace(control_plane.kubeconfig, namespace, tmp_path / "kubeconfig")

    shown = run_step("status", "--name", name, "-o", "json", kubeconfig=kubeconfig)
    assert shown.code == 0, shown.error
    assert shown.result["name"] == name
    held = run_step("hold", "--name", name, kubeconfig=kubeconfig)
    assert held.code == 0, held.error
    assert (held.result["held"], held.result["changed"]) == (True, False)  # start made it held

    # The flag wins over the context: there is no such TrainJob in default.
    elsewhere = run_step("hold", "--name", name, "-n", "default", kubeconfig=kubeconfig)
    assert elsewhere.code == 4, elsewhere.error
    assert f"TrainJob default/{name}" in elsewhere.error


def test_request_timeout_ends_a_step_waiting_on_the_api_server_with_75_and_nothing_written(
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    """admit --wait on a queue with no quota waits for a reservation that never comes (its own
    --wait-seconds is 300): the deadline ends it."""
    kueue.install(cpu="0")
    name = start_queued(step, namespace, torch_runtime, kueue, "deadline").result["name"]
    began = time.monotonic()
    waited = step(
        "admit", "-n", namespace, "--name", name, "--check", kueue.check, "--wait",
        "--request-timeout", "3s",
    )  # fmt: skip
    took = time.monotonic() - began
    assert waited.code == 75, waited.error
    assert "--request-timeout" in waited.error
    assert took < 30, f"the deadline was 3 s; the step took {took:.1f} s"
    annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
    assert annotations[wire.ADMISSION_FLOOR_ANNOTATION] == "0", "nothing raised"
