"""dispatch-status on the real API server: its JSON against the objects, and kubectl's plugin."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.environment import host_env
from tests.support.kubectl import HOW_TO_BUILD, find_kubectl
from tests.support.kueue_objects import KueueSetup
from tests.support.lifecycle import (
    BIN,
    DEADLINE,
    Kubelet,
    Step,
    read_jobset,
    read_trainjob,
    run_stage,
    start_args,
    start_queued,
)

pytestmark = pytest.mark.integration


def shown(step: Step, namespace: str, name: str, *flags: str) -> dict[str, Any]:
    run = step("status", "--namespace", namespace, "--name", name, "-o", "json", *flags)
    assert run.code == 0, run.error
    return run.result


def assert_counters_as_recorded(record: dict[str, Any], job: dict[str, Any], restarts: int) -> None:
    annotations = job["metadata"]["annotations"]
    assert record["admission"]["floor"] == int(annotations[wire.ADMISSION_FLOOR_ANNOTATION])
    assert record["restart"]["current"] == restarts
    assert record["restart"]["highest"] == int(
        annotations.get(wire.HIGHEST_RESTART_ANNOTATION, "0")
    )


def test_status_shows_what_each_execution_of_a_plain_job_sees(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
) -> None:
    started = step("start", *start_args(namespace, torch_runtime, "status-1"))
    assert started.code == 0, started.error
    name = started.result["name"]

    before = shown(step, namespace, name)
    assert (before["name"], before["namespace"]) == (name, namespace)
    assert (before["mode"], before["state"], before["queue"]) == ("plain", "Suspended", None)
    assert before["admission"] == {"patch": 0, "floor": 0}
    assert before["execution"]["which"] == "next"
    assert before["execution"]["epoch"] == 3_000_007_000_001, "the first execution: R = 1"
    assert (before["pendingRaise"], before["foreign"], before["workload"]) == (False, False, None)
    assert before["problems"] == []

    opened = run_stage(step, "unsuspend", "--namespace", namespace, "--name", name)
    assert opened.code == 0, opened.error
    pod = kubelet.wait_for_pod(name, restart=0, admission=1)
    first = kubelet.execute(pod)
    running = shown(step, namespace, name)
    assert running["state"] == "Running"
    assert running["execution"] == {
        "which": "running",
        "admission": first.admission,
        "restart": first.restart,
        "r": first.r,
        "epoch": first.epoch,
        "attempt": first.attempt,
    }, "the epoch and attempt the prologue printed in the pod"
    assert_counters_as_recorded(running, read_trainjob(custom, namespace, name), 0)

    kubelet.set_phase(pod, "Failed")  # the real JobSet controller restarts it: J = 1
    second = kubelet.execute(kubelet.wait_for_pod(name, restart=1, admission=1))

    def restarted() -> dict[str, Any] | None:
        record = shown(step, namespace, name)
        return record if record["restart"]["current"] == 1 else None

    record = wait_until(restarted, what=f"status of {name} with J = 1", timeout=DEADLINE)
    assert (record["execution"]["epoch"], record["execution"]["attempt"]) == (
        second.epoch,
        second.attempt,
    )
    jobset = read_jobset(custom, namespace, name)
    assert_counters_as_recorded(record, read_trainjob(custom, namespace, name), 1)
    assert jobset["status"]["restarts"] == 1

    listed = step("status", "--namespace", namespace, "--all", "-o", "json")
    assert listed.code == 0, listed.error
    assert listed.result["name"] == name, "the namespace's one managed job, one JSON line"


def test_status_of_a_queued_job_shows_its_pending_raise_and_the_check(
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    kueue.install(cpu="1")
    started = start_queued(step, namespace, torch_runtime, kueue, "status-q")
    name = started.result["name"]
    target = ["--namespace", namespace, "--check", kueue.check]

    admitted = run_stage(
        step, "admit", *target, "--name", name, "--wait", "--timeout", str(DEADLINE)
    )
    assert admitted.code == 0, admitted.error
    record = shown(step, namespace, name, "--check", kueue.check)
    assert (record["mode"], record["queue"], record["state"]) == (
        "queue",
        kueue.local_queue,
        "Suspended",
    )
    assert record["pendingRaise"] is True, "raised for the reservation, not yet approved"
    assert record["execution"]["admission"] == admitted.result["admission"]
    assert record["workload"] == {
        "name": admitted.result["workload"],
        "clusterQueue": f"{namespace}-cq",
        "raisedFor": True,
        "check": "Pending",
        "finished": False,
    }
    annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
    assert record["admission"]["floor"] == int(annotations[wire.ADMISSION_FLOOR_ANNOTATION])


def test_kubectl_finds_the_plugin_and_runs_status_through_it(
    step: Step, namespace: str, torch_runtime: str, control_plane: Cluster
) -> None:
    kubectl = find_kubectl()
    assert kubectl is not None, f"scripts/setup builds kubectl: {HOW_TO_BUILD}"
    # kubectl finds plugins on PATH: the console scripts' directory, where pip put them.
    env = host_env({"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    plugins = subprocess.run(
        [str(kubectl), "plugin", "list", "--name-only"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert "kubectl-dispatch" in plugins.stdout.split(), plugins.stdout + plugins.stderr

    started = step("start", *start_args(namespace, torch_runtime, "status-k"))
    assert started.code == 0, started.error
    name = started.result["name"]
    argv = [str(kubectl), "dispatch", "status", name, "-n", namespace]
    argv += ["--kubeconfig", str(control_plane.kubeconfig), "-o", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == name
    table = subprocess.run(
        argv[:-2], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split()[:3] == ["NAME", "MODE", "STATE"]
    assert row.split()[:3] == [name, "plain", "Suspended"]
