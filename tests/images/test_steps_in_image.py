"""Every step, run in the image built for real, against the local control plane.

Each container runs as the image's non-root user on a read-only root filesystem, on the host
network, with the kubeconfig mounted read-only: what `docker run` users and pipeline pods do.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.shell import runner
from tests.cluster import engine
from tests.images.containers import ContainerRun, Mount, run_container
from tests.support import cli
from tests.support.environment import host_env
from tests.support.requests import request_flags
from tests.support.shipped import RUNTIMES, install_runtime

pytestmark = pytest.mark.images
KUBECONFIG: Final = "/kube/config"
OUTPUTS: Final = "/outputs"
# The layer the steps add to their base (venv, user, settings); build.sh's wheelhouse keeps
# pip and the kubernetes asyncio client out, so it stays well under this.
MAX_STEPS_LAYER: Final = 120 * 1024 * 1024
REQUEST: Final = request_flags("image-1")


class StepRunner:
    """Runs `dispatch-<step>` in the image, each with a fresh outputs directory."""

    def __init__(self, image: str, kubeconfig: Mount, work: Path) -> None:
        self.image = image
        self.kubeconfig = kubeconfig
        self.work = work
        self.runs = 0

    def __call__(self, step: str, *args: str) -> tuple[ContainerRun, dict[str, str]]:
        """Run one step; return how it ended and the files it wrote to --outputs-dir."""
        self.runs += 1
        outputs = self.work / f"outputs-{self.runs}-{step}"
        outputs.mkdir()
        outputs.chmod(0o777)  # written by the image's user, 65532
        run = run_container(
            self.image,
            [f"dispatch-{step}", "--kubeconfig", KUBECONFIG, "--outputs-dir", OUTPUTS, *args],
            mounts=[self.kubeconfig, Mount(host=outputs, container=OUTPUTS, writable=True)],
        )
        files = {path.name: path.read_text() for path in sorted(outputs.iterdir())}
        return run, files


@pytest.fixture
def step(step_image: str, kubeconfig_mount: Mount, tmp_path: Path) -> StepRunner:
    return StepRunner(step_image, kubeconfig_mount, tmp_path)


def assert_reported(run: ContainerRun, files: dict[str, str]) -> dict[str, Any]:
    """Exit 0, one JSON line on stdout, and the same fields one file each, no newline."""
    assert run.code == 0, run.stderr
    assert run.stdout.count("\n") == 1, f"stdout must hold the result alone: {run.stdout!r}"
    result = run.result
    assert files == {key: runner.field_text(value) for key, value in result.items()}
    assert all(not text.endswith("\n") for text in files.values())
    return result


def assert_failed(run: ContainerRun, files: dict[str, str], code: int) -> str:
    """Exit `code`, nothing on stdout or in the outputs, one JSON reason on stderr."""
    assert run.code == code, run.stderr
    assert run.stdout == ""
    assert files == {}, "a failed step writes no results"
    assert run.error["exit_code"] == code
    assert run.error["level"] == "ERROR"
    return str(run.error["message"])


def test_dry_run_in_the_image_is_the_console_scripts_trainjob(
    step_image: str, tmp_path: Path
) -> None:
    argv = ["dispatch-start", "--dry-run", "--runtime-file", "/runtimes/torch-distributed.yaml"]
    in_image = run_container(
        step_image,
        [*argv, *REQUEST],
        mounts=[Mount(host=RUNTIMES, container="/runtimes")],
    )
    assert in_image.code == 0, in_image.stderr
    assert in_image.stdout.count("\n") == 1
    on_host = subprocess.run(
        [
            str(Path(sys.executable).parent / "dispatch-start"),
            *argv[1:3],
            str(RUNTIMES / "torch-distributed.yaml"),
            *REQUEST,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=host_env(),
    )
    assert in_image.result == json.loads(on_host.stdout)


def test_plain_lifecycle_in_the_image(
    step: StepRunner, namespace: str, api_client: client.ApiClient
) -> None:
    runtime = install_runtime(api_client)
    start, files = step("start", *REQUEST, "--runtime-name", runtime, "--namespace", namespace)
    started = assert_reported(start, files)
    assert started["outcome"] == "created"
    assert (started["epochPrefix"], started["tokenPrefix"]) == ("3000007", "image-1.7.1")
    target = ["--namespace", namespace, "--name", started["name"]]

    opened = assert_reported(*step("unsuspend", *target))
    assert opened["admission"] == 1
    held = assert_reported(*step("hold", *target))
    assert (held["held"], held["changed"]) == (True, True)
    audited = assert_reported(*step("audit", *target))
    assert audited["findings"] == 0

    again, files = step("start", *REQUEST, "--runtime-name", runtime, "--namespace", namespace)
    assert assert_reported(again, files)["outcome"] == "exists", "a repeated start is a no-op"

    trainjob = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        wire.TRAINER_GROUP, wire.TRAINER_VERSION, namespace, "trainjobs", started["name"]
    )
    assert isinstance(trainjob, dict)
    assert trainjob["spec"]["suspend"] is True
    assert trainjob["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "1"


def test_missing_objects_exit_4_with_nothing_on_stdout(step: StepRunner, namespace: str) -> None:
    admit, files = step("admit", "--namespace", namespace, "--name", "no-such-job")
    assert "no-such-job" in assert_failed(admit, files, 4)
    approve, files = step(
        "approve",
        "--namespace",
        namespace,
        "--workload",
        "no-such-workload",
        "--workload-resource-version",
        "1",
        "--admission",
        "1",
    )
    assert "no-such-workload" in assert_failed(approve, files, 4)


def test_an_unknown_flag_exits_2_in_one_line(step: StepRunner) -> None:
    run, files = step("hold", "--nmae", "x")
    message = assert_failed(run, files, 2)
    assert "--nmae" in message
    assert "Traceback" not in run.stderr


def test_the_image_runs_as_non_root_on_a_read_only_root(step_image: str) -> None:
    # No user given: the image's own USER applies, as under Kubernetes runAsNonRoot.
    run = run_container(
        step_image,
        ["sh", "-c", "id -u; touch /opt/dispatch/x 2>/dev/null || echo read-only; touch /tmp/x"],
        user="",
    )
    assert run.code == 0, run.stderr
    assert run.stdout.split() == ["65532", "read-only"]


def test_the_steps_layer_stays_small(step_image: str, debian_image: str) -> None:
    added = engine.image_size(step_image) - engine.image_size(debian_image)
    assert 0 < added < MAX_STEPS_LAYER, f"the steps add {added / 2**20:.0f} MiB to their base"


def test_every_console_script_runs_in_the_image(step_image: str) -> None:
    """All of pyproject's scripts, the controller's included: build.sh staged every package."""
    scripts = sorted(cli.console_scripts())
    run = run_container(
        step_image, ["sh", "-c", "; ".join(f"{script} --version" for script in scripts)]
    )
    assert run.code == 0, run.stderr
    installed = version("dispatch-k8s")
    assert run.stdout.splitlines() == [f"{script} (dispatch-k8s) {installed}" for script in scripts]
