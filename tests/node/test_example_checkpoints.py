"""The training-code example (examples/checkpoints) on the real node, across executions: each
resumes from the newest complete save, and a late save of an older execution, tried after a
newer one began and at a step far beyond it, is refused and is not what the next execution
resumes from."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from dispatch_checkpoints import Execution, FilesystemStore, StaleExecution
from kubernetes import client

from tests.cluster.wait import wait_until
from tests.support.executions import DEADLINE, TRAINER, execution_logs, node_runtime, start_flags
from tests.support.lifecycle import Step, run_stage, wait_for_drained_jobset

pytestmark = [pytest.mark.node, pytest.mark.cluster]
REPO: Final = Path(__file__).resolve().parents[2]
EXAMPLE: Final = REPO / "examples" / "checkpoints"
LIBRARY: Final = (
    REPO / "checkpoints"
)  # the distribution's source: its package is importable from it
TRAIN: Final = (
    "exec python3 /example/train.py --root /checkpoints --steps 1000000 --save-every 5 "
    "--step-seconds 0.05"
)
LATE_STEP: Final = 1_000  # the older execution's late save: far past any step the newer made


@pytest.fixture
def checkpoint_runtime(
    api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> Iterator[tuple[str, Path]]:
    """The node runtime with the example at /example and a shared /checkpoints (hostPaths:
    the node is this machine), and that directory as the test sees it."""
    root = tmp_path / "checkpoints"
    root.mkdir()
    runtime = node_runtime()
    runtime["metadata"] = {"name": f"{namespace}-checkpoints"}
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]["spec"]
        pod["volumes"] = [
            {"name": "checkpoints", "hostPath": {"path": str(root), "type": "Directory"}},
            {"name": "example", "hostPath": {"path": str(EXAMPLE), "type": "Directory"}},
            {"name": "library", "hostPath": {"path": str(LIBRARY), "type": "Directory"}},
        ]
        for container in pod["containers"]:
            container["volumeMounts"] = [
                {"name": "checkpoints", "mountPath": "/checkpoints"},
                {"name": "example", "mountPath": "/example", "readOnly": True},
                {"name": "library", "mountPath": "/library", "readOnly": True},
            ]
            container.setdefault("env", []).append({"name": "PYTHONPATH", "value": "/library"})
    custom = client.CustomObjectsApi(api_client)
    custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
    yield runtime["metadata"]["name"], root
    custom.delete_cluster_custom_object(
        *TRAINER, "clustertrainingruntimes", runtime["metadata"]["name"]
    )


def events_of(core: client.CoreV1Api, namespace: str, name: str, admission: int) -> list[Any]:
    """The JSON lines the execution with A = `admission` has printed so far."""
    for _, log in execution_logs(core, namespace, name, admission=admission, restart=None):
        return [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return []


def resumed(core: client.CoreV1Api, namespace: str, name: str, admission: int) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        lines = [e for e in events_of(core, namespace, name, admission) if e["event"] == "resumed"]
        return lines[0] if lines else None

    return wait_until(found, what=f"execution A={admission} to resume", timeout=DEADLINE)


def saved_by(root: Path, epoch: int) -> int:
    """Until the execution of `epoch` has a complete save; its step."""

    def found() -> int | None:
        newest = FilesystemStore(root).latest()
        return newest.step if newest is not None and newest.epoch == epoch else None

    return wait_until(found, what=f"a save of epoch {epoch}", timeout=DEADLINE)


def test_the_next_execution_resumes_from_the_newer_save_not_the_late_older_one(
    step: Step,
    namespace: str,
    checkpoint_runtime: tuple[str, Path],
    training_images: dict[str, str],
    api_client: client.ApiClient,
) -> None:
    runtime, root = checkpoint_runtime
    core = client.CoreV1Api(api_client)
    flags = start_flags(namespace, runtime, train=TRAIN, image=training_images["debian"])
    started = step("start", *flags)
    assert started.code == 0, started.error
    name = started.result["name"]
    target = ("--namespace", namespace, "--name", name)

    def release(admission: int) -> dict[str, Any]:
        opened = run_stage(step, "unsuspend", *target)
        assert (opened.code, opened.result.get("admission")) == (0, admission), opened.error
        return resumed(core, namespace, name, admission)

    def hold() -> None:
        assert run_stage(step, "hold", *target).code == 0
        wait_for_drained_jobset(api_client, namespace, name)

    first = release(1)
    assert (first["from_epoch"], first["step"]) == (None, 0)
    saved_by(root, first["epoch"])
    hold()  # SIGTERM: the first execution saves once more, in its grace period

    second = release(2)
    assert second["epoch"] > first["epoch"]
    assert second["from_epoch"] == first["epoch"]
    newer_step = saved_by(root, second["epoch"])
    # The first execution again, as a process that went on after the second began would:
    # its own epoch, a step far beyond the second's. The store refuses it.
    late = Execution(first["epoch"], "late")
    with pytest.raises(StaleExecution):
        FilesystemStore(root).save(late, LATE_STEP, {"state.json": b'{"step": 1000}'})
    hold()

    third = release(3)
    assert third["from_epoch"] == second["epoch"], "resumed from the older execution's late save"
    assert newer_step <= third["step"] < LATE_STEP
