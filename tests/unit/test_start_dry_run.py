"""`dispatch-start --dry-run`, run as the console script users run: no cluster involved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.rules.identity import Counts, Identity, attempt_token, epoch
from dispatch_k8s.core.rules.prologue import EXIT_REFUSED
from tests.support.requests import request_flags
from tests.support.shells import SHELLS, Shell, resolve_downward_env, shell_argv0
from tests.unit.golden import check_golden

REPO = Path(__file__).resolve().parents[2]
TORCH_RUNTIME = REPO / "pipelines" / "runtimes" / "torch-distributed.yaml"
MPI_RUNTIME = REPO / "pipelines" / "runtimes" / "mpi-distributed.yaml"
START = str(Path(sys.executable).parent / "dispatch-start")
REQUEST = [
    *request_flags("train-42", attempt=2, extra={"workdir": "/workspace", "namespace": "team-a"}),
    *["--env", "B_VAR=2", "--env", "A_VAR=1"],
]
IDENTITY = Identity(job_id="train-42", generation=3, submission=7, attempt=2)


def start(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
    return subprocess.run(
        [START, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**clean, **(env or {})},
    )


def error_line(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = done.stderr.strip().splitlines()
    assert lines, "a failing step must say why on stderr"
    record: dict[str, Any] = json.loads(lines[-1])
    assert record["level"] == "ERROR"
    return record


def dry_run(*extra: str, runtime: Path = TORCH_RUNTIME) -> dict[str, Any]:
    done = start("--dry-run", "--runtime-file", str(runtime), *REQUEST, *extra)
    assert done.returncode == 0, done.stderr
    trainjob: dict[str, Any] = json.loads(done.stdout)
    return trainjob


def test_torch_dry_run_matches_golden() -> None:
    check_golden("start-torch.json", dry_run())


def test_mpi_dry_run_annotates_the_launcher_not_the_workers() -> None:
    trainjob = dry_run("--queue", "team-a-queue", *ONE_CPU, runtime=MPI_RUNTIME)
    check_golden("start-mpi-kueue.json", trainjob)
    patch = trainjob["spec"]["runtimePatches"][0]
    jobs = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert [job["name"] for job in jobs] == ["launcher"]
    assert trainjob["metadata"]["labels"][wire.QUEUE_LABEL] == "team-a-queue"


ONE_CPU = ("--resources-per-node", '{"requests":{"cpu":"1"}}')


@pytest.mark.parametrize(
    "resources",
    [None, '{"requests":{"cpu":"0"}}', '{"limits":{"memory":"0Gi"}}'],
    ids=["none", "zero-cpu", "zero-memory-limit"],
)
def test_queued_job_that_requests_nothing_is_refused(resources: str | None) -> None:
    extra = ("--resources-per-node", resources) if resources else ()
    done = start(
        "--dry-run", "--runtime-file", str(TORCH_RUNTIME), *REQUEST, "--queue", "q", *extra
    )
    assert done.returncode == 6
    message = error_line(done)["message"]
    assert "would request no resource" in message
    assert "without any admission check" in message
    assert "--resources-per-node" in message


def test_queued_job_that_requests_nothing_is_started_in_policy_mode() -> None:
    trainjob = dry_run("--queue", "q", "--kueue-mode", "policy")
    assert trainjob["metadata"]["labels"][wire.QUEUE_LABEL] == "q"
    refused = start(
        "--dry-run",
        "--runtime-file",
        str(TORCH_RUNTIME),
        *REQUEST,
        "--queue",
        "q",
        "--kueue-mode",
        "check",
    )
    assert refused.returncode == 6
    assert "--kueue-mode policy" in error_line(refused)["message"]


def test_queued_job_may_request_through_limits_or_the_runtime(tmp_path: Path) -> None:
    dry_run("--queue", "q", "--resources-per-node", '{"limits":{"nvidia.com/gpu":"1"}}')
    runtime = tmp_path / "with-requests.yaml"
    document = yaml.safe_load(TORCH_RUNTIME.read_text())
    trainer = document["spec"]["template"]["spec"]["replicatedJobs"][0]
    container = trainer["template"]["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": "500m"}}
    runtime.write_text(yaml.safe_dump(document))
    assert dry_run("--queue", "q", runtime=runtime)["metadata"]["labels"][wire.QUEUE_LABEL] == "q"


def test_trainjob_is_suspended_with_env_in_design_order() -> None:
    trainjob = dry_run()
    assert trainjob["spec"]["suspend"] is True
    names = [var["name"] for var in trainjob["spec"]["trainer"]["env"]]
    assert names == [
        "A_VAR",
        "B_VAR",
        wire.ENV_EPOCH_PREFIX,
        wire.ENV_TOKEN_PREFIX,
        wire.ENV_WORKDIR,
        wire.ENV_ADMISSION,
        wire.ENV_RESTART,
    ]
    assert trainjob["spec"]["trainer"]["args"] == ["--lr", "0.1"]
    assert trainjob["spec"]["trainer"]["command"][-2:] == ["python", "train.py"]


def test_same_request_renders_the_same_name_and_digest() -> None:
    first, second = dry_run(), dry_run()
    assert first == second
    other = dry_run("--attempt", "3")
    assert other["metadata"]["name"] != first["metadata"]["name"]
    digest = wire.REQUEST_DIGEST_ANNOTATION
    assert other["metadata"]["annotations"][digest] != first["metadata"]["annotations"][digest]


def pod_seeing(admission: str | None, restart: str | None) -> dict[str, Any]:
    annotations = {} if admission is None else {wire.ADMISSION_ANNOTATION: admission}
    labels = {} if restart is None else {wire.RESTART_ATTEMPT_KEY: restart}
    return {"metadata": {"annotations": annotations, "labels": labels}}


def execute(
    trainjob: dict[str, Any], shell: Shell, links: Path, pod: dict[str, Any], workdir: Path
) -> subprocess.CompletedProcess[str]:
    trainer = trainjob["spec"]["trainer"]
    env = resolve_downward_env(trainer["env"], pod)
    env[wire.ENV_WORKDIR] = str(workdir)  # the rendered /workspace does not exist here
    env["PATH"] = "/usr/bin:/bin"
    # The user command is replaced by one that reports what it sees, after the prologue.
    report = 'echo "$DISPATCH_EPOCH $DISPATCH_ATTEMPT"'
    command = [*trainer["command"][:4], "/bin/sh", "-c", report]
    command[0] = shell_argv0(shell, links)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture(scope="module")
def rendered() -> dict[str, Any]:
    return dry_run()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s.name)
@pytest.mark.parametrize(
    ("admission", "restart"), [(1, 0), (2, 1), (3, 1), (999_000, 999)], ids=str
)
def test_rendered_command_gives_the_core_epoch_in_every_shell(
    rendered: dict[str, Any], shell: Shell, tmp_path: Path, admission: int, restart: int
) -> None:
    done = execute(rendered, shell, tmp_path, pod_seeing(str(admission), str(restart)), tmp_path)
    assert done.returncode == 0, done.stderr
    counts = Counts(admission=admission, restart=restart)
    assert done.stdout.split() == [str(epoch(IDENTITY, counts)), attempt_token(IDENTITY, counts)]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s.name)
@pytest.mark.parametrize(
    ("admission", "restart"),
    [(None, "0"), ("1", None), ("", "0"), ("07", "0"), ("1", "-1"), ("999999", "1")],
    ids=["no-annotation", "no-label", "empty", "octal-looking", "negative", "r-overflow"],
)
def test_rendered_command_refuses_bad_counters_in_every_shell(
    rendered: dict[str, Any],
    shell: Shell,
    tmp_path: Path,
    admission: str | None,
    restart: str | None,
) -> None:
    done = execute(rendered, shell, tmp_path, pod_seeing(admission, restart), tmp_path)
    assert done.returncode == EXIT_REFUSED
    assert done.stdout == ""
    assert done.stderr.startswith("dispatch: ")


def test_request_file_gives_fields_and_flags_override_it(tmp_path: Path) -> None:
    request = tmp_path / "request.yaml"
    request.write_text(
        "jobId: from-file\ngeneration: 1\nsubmission: 2\nattempt: 0\nimage: img:1\n"
        "command: [python, train.py]\nenv: {X: '1'}\n"
    )
    done = start(
        "--dry-run",
        "--runtime-file",
        str(TORCH_RUNTIME),
        "--request-file",
        str(request),
        "--attempt",
        "5",
    )
    assert done.returncode == 0, done.stderr
    annotations = json.loads(done.stdout)["metadata"]["annotations"]
    assert annotations[wire.JOB_ID_ANNOTATION] == "from-file"
    assert annotations[wire.ATTEMPT_ANNOTATION] == "5"


ENV_REQUEST = {
    "DISPATCH_JOB_ID": "env-job",
    "DISPATCH_GENERATION": "1",
    "DISPATCH_SUBMISSION": "1",
    "DISPATCH_IMAGE": "img:1",
    "DISPATCH_COMMAND": '["run"]',
}


def test_env_settings_are_read_with_the_dispatch_prefix() -> None:
    done = start(
        "--dry-run",
        "--runtime-file",
        str(TORCH_RUNTIME),
        env={**ENV_REQUEST, "DISPATCH_START_ATTEMPT": "4"},
    )
    assert done.returncode == 0, done.stderr
    annotations = json.loads(done.stdout)["metadata"]["annotations"]
    assert annotations[wire.JOB_ID_ANNOTATION] == "env-job"
    assert annotations[wire.ATTEMPT_ANNOTATION] == "4"
    assert done.stderr.count('"WARNING"') == 0


def test_the_former_attempt_variable_is_read_with_one_line_of_warning() -> None:
    env = {**ENV_REQUEST, "DISPATCH_ATTEMPT": "3"}
    done = start("--dry-run", "--runtime-file", str(TORCH_RUNTIME), env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["metadata"]["annotations"][wire.ATTEMPT_ANNOTATION] == "3"
    [warning] = [json.loads(line) for line in done.stderr.splitlines() if '"WARNING"' in line]
    assert warning["message"].startswith("DISPATCH_ATTEMPT is deprecated")
    assert "DISPATCH_START_ATTEMPT" in warning["message"]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--env", "DISPATCH_EPOCH=1"], "DISPATCH_* names are reserved"),
        (["--workdir", "relative/dir"], "must be an absolute path"),
        (["--name", "Not_A_Label"], "RFC 1035 label"),
        (["--submission", "1000000"], "below 10^6"),
        (["--generation", "0", "--submission", "0"], "at least 1"),
        (["--generation", "9223373"], "signed 64-bit"),
        (["--generation", "three"], "generation"),
        (["--no-such-flag"], "unrecognized arguments"),
        (["--runtime-name", "other"], "holds ClusterTrainingRuntime dispatch-torch-distributed"),
    ],
    ids=[
        "reserved-env",
        "relative-workdir",
        "bad-name",
        "n-too-large",
        "prefix-zero",
        "epoch-overflow",
        "not-a-number",
        "unknown-flag",
        "runtime-mismatch",
    ],
)
def test_bad_input_is_one_line_and_exit_2(extra: list[str], says: str) -> None:
    done = start("--dry-run", "--runtime-file", str(TORCH_RUNTIME), *REQUEST, *extra)
    assert done.returncode == 2
    assert done.stdout == ""
    assert says in error_line(done)["message"]
    assert "\n" not in error_line(done)["message"]


WITHOUT_COMMAND = [w for w in REQUEST if not w.startswith("--command")]


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ([], "--command (env DISPATCH_COMMAND, or command in --request-file) is required"),
        (["--command=-x"], "must name a program"),
    ],
    ids=["missing", "option-like"],
)
def test_command_must_name_a_program(command: list[str], says: str) -> None:
    done = start("--dry-run", "--runtime-file", str(TORCH_RUNTIME), *WITHOUT_COMMAND, *command)
    assert done.returncode == 2
    assert says in error_line(done)["message"]


def test_upstream_shaped_runtime_is_refused_with_field_paths(tmp_path: Path) -> None:
    runtime = tmp_path / "torch.yaml"
    runtime.write_text(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\n"
        "metadata: {name: torch-distributed}\nspec:\n  mlPolicy: {numNodes: 1, torch: {}}\n"
        "  template:\n    spec:\n      replicatedJobs:\n      - name: node\n        template:\n"
        "          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}\n"
        "          spec:\n            template:\n              spec:\n"
        "                containers: [{name: node, image: pytorch/pytorch}]\n"
    )
    done = start("--dry-run", "--runtime-file", str(runtime), *REQUEST)
    assert done.returncode == 6
    message = error_line(done)["message"]
    assert "ClusterTrainingRuntime/torch-distributed" in message
    job = "spec.template.spec.replicatedJobs[0].template.spec"
    assert f"{job}.backoffLimit" in message
    assert f"{job}.template.spec.restartPolicy" in message


def test_dry_run_without_runtime_file_is_bad_input() -> None:
    done = start("--dry-run", *REQUEST)
    assert done.returncode == 2
    assert "--runtime-file" in error_line(done)["message"]


def test_no_empty_fields_in_spec_trainer() -> None:
    # Kueue round-trips the TrainJob through Go types that drop empty lists; Trainer's CEL
    # immutability rule on spec.trainer then refuses Kueue's update (trainer#3888).
    without_args = [w for w in REQUEST if not w.startswith("--args")]
    done = start("--dry-run", "--runtime-file", str(TORCH_RUNTIME), *without_args)
    assert done.returncode == 0, done.stderr
    trainer = json.loads(done.stdout)["spec"]["trainer"]
    assert "args" not in trainer
    assert all(value not in ([], {}, "", None) for value in trainer.values())


@pytest.mark.parametrize(
    "words",
    [["a,b"], ["[x]"], ['printf "%s\\n"', "{}"], ["--lr", "0.1", "x=y"], ["", "$HOME"]],
    ids=["comma", "brackets", "quotes-and-braces", "option-like-args", "empty-and-dollar"],
)
def test_command_and_args_words_pass_untouched(words: list[str]) -> None:
    # Flags take one word each, kept as given: no comma splitting, no JSON reading.
    flags = [f"--args={word}" for word in words]
    base = [w for w in WITHOUT_COMMAND if not w.startswith("--args")]
    done = start(
        "--dry-run",
        "--runtime-file",
        str(TORCH_RUNTIME),
        *base,
        "--command",
        "run",
        "--command",
        words[0] or "x",
        *flags,
    )
    assert done.returncode == 0, done.stderr
    trainer = json.loads(done.stdout)["spec"]["trainer"]
    assert trainer["args"] == words
    assert trainer["command"][-2:] == ["run", words[0] or "x"]
