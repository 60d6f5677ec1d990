"""Issue 27's kubectl-like command line: `-o json|yaml|name`, `--request-timeout` as the step's
overall deadline, and a bad or missing setting named by its flag and env variable."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, cast

import pytest
import urllib3
import yaml

from dispatch_k8s.controller.settings import ControllerSettings
from dispatch_k8s.core.rules.errors import BadInput, OutOfTime
from dispatch_k8s.core.shell import runner
from dispatch_k8s.core.shell.gateway import kinds, transport
from dispatch_k8s.core.shell.gateway.client import Gateway
from dispatch_k8s.core.shell.gateway.transport import REQUEST_TIMEOUT, Deadline
from dispatch_k8s.core.shell.settings import StepSettings, TrainJobSettings, load_settings
from dispatch_k8s.steps import approve, audit
from dispatch_k8s.steps.approve import ApproveSettings
from dispatch_k8s.steps.audit import AuditSettings
from tests.support.requests import request_flags
from tests.unit.factories import SERVER

REPO: Final = Path(__file__).resolve().parents[2]
BIN: Final = Path(sys.executable).parent
TORCH_RUNTIME: Final = REPO / "pipelines" / "runtimes" / "torch-distributed.yaml"
DRY_RUN: Final = [
    "--dry-run",
    "--runtime-file",
    str(TORCH_RUNTIME),
    *request_flags("train-42", attempt=2, extra={"namespace": "team-a"}),
]


def step(script: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """A console script as a user runs it, no DISPATCH_* of this process's env."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
    return subprocess.run(
        [str(BIN / script), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def last_error(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a failing step logs (a JSON line off a terminal): its message."""
    lines = done.stderr.strip().splitlines()
    message: str = json.loads(lines[-1])["message"]
    return message


# -o / --output


@pytest.mark.parametrize(
    "argv", [["-o", "yaml"], ["-oyaml"], ["-o=yaml"], ["--output", "yaml"], ["--output=yaml"]]
)
def test_o_is_output_in_each_of_kubectl_s_spellings(argv: list[str]) -> None:
    assert load_settings(StepSettings, prog="p", argv=argv).output == "yaml"


def test_json_stays_the_default_and_a_format_outside_the_three_is_named() -> None:
    assert load_settings(StepSettings, prog="p", argv=[]).output == "json"
    with pytest.raises(BadInput) as raised:
        load_settings(StepSettings, prog="dispatch-hold", argv=["-o", "wide"])
    assert str(raised.value) == (
        "dispatch-hold: --output (env DISPATCH_OUTPUT): Input should be 'json', 'yaml' or 'name'"
    )


def test_the_controller_has_no_result_so_no_o() -> None:
    with pytest.raises(BadInput, match="unrecognized arguments: -o json"):
        load_settings(ControllerSettings, prog="p", argv=["-o", "json"])


LINES: Final = [
    {"name": "b", "resourceVersion": "12", "findings": 0, "recorded": True},
    {"name": "a", "error": "changed\nmeanwhile", "exitCode": 3},
]


def test_json_is_one_line_per_result_its_keys_sorted() -> None:
    shown = runner.render(LINES, "json", lambda _: "unused")
    assert shown.splitlines() == [json.dumps(line, sort_keys=True) for line in LINES]


def test_yaml_is_the_same_results_in_block_style_keys_in_json_s_order() -> None:
    shown = runner.render(LINES, "yaml", lambda _: "unused")
    assert list(yaml.safe_load_all(shown)) == LINES
    documents = shown.split("---\n")
    assert len(documents) == len(LINES)
    for document, line in zip(documents, LINES, strict=True):
        # A key begins a row; a long or multi-line value goes on in indented rows.
        keys = [row.partition(":")[0] for row in document.splitlines() if row[:1].strip()]
        assert keys == list(json.loads(json.dumps(line, sort_keys=True)))
    assert "{" not in shown, "flow style"


def test_name_is_one_line_per_result_as_the_step_names_it() -> None:
    shown = runner.render(LINES, "name", lambda line: f"kind/{line['name']}")
    assert shown == "kind/b\nkind/a\n"


def test_each_step_names_the_object_it_acted_on_as_kubectl_does() -> None:
    one = load_settings(TrainJobSettings, prog="p", argv=["-n", "a", "--name", "job-1"])
    assert runner.the_trainjob(one, {}) == "trainjob.trainer.kubeflow.org/job-1"
    approval = ApproveSettings(
        workload="trainjob-job-1-5c2b1", workload_resource_version="7", admission=1
    )
    assert approve.acted_on(approval, {}) == "workload.kueue.x-k8s.io/trainjob-job-1-5c2b1"
    named = load_settings(AuditSettings, prog="p", argv=["-n", "a", "--name", "job-1"])
    assert audit.acted_on(named, {"findings": 0}) == "trainjob.trainer.kubeflow.org/job-1"


@pytest.fixture
def argv(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """sys.argv for a console script run in this process: fill it in."""
    words = ["dispatch-audit"]
    monkeypatch.setattr(sys, "argv", words)
    return words


def test_audit_all_with_o_name_prints_one_line_per_job_and_keeps_its_exit_code(
    argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    flagged = runner.Report(
        lines=LINES,
        summary={"audited": 2, "flagged": 0},
        error=OutOfTime("--request-timeout 1s passed"),
    )
    main = runner.entrypoint(
        lambda _: flagged,
        AuditSettings,
        step="audit",
        about="",
        example="",
        acted_on=audit.acted_on,
    )
    argv += ["-n", "a", "--all", "-o", "name", "--outputs-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 75
    assert capsys.readouterr().out == (
        "trainjob.trainer.kubeflow.org/b\ntrainjob.trainer.kubeflow.org/a\n"
    )
    assert {path.name: path.read_text() for path in tmp_path.iterdir()} == {
        "audited": "2",
        "flagged": "0",
    }


def test_start_prints_its_trainjob_in_each_format_and_writes_the_same_files(
    tmp_path: Path,
) -> None:
    shown: dict[str, str] = {}
    files: dict[str, dict[str, str]] = {}
    for form in ("json", "yaml", "name"):
        outputs = tmp_path / form
        done = step("dispatch-start", *DRY_RUN, "-o", form, "--outputs-dir", str(outputs))
        assert done.returncode == 0, done.stderr
        shown[form] = done.stdout
        files[form] = {path.name: path.read_text() for path in outputs.iterdir()}
    (line,) = shown["json"].splitlines()
    trainjob = json.loads(line)
    assert yaml.safe_load(shown["yaml"]) == trainjob
    assert shown["name"] == f"trainjob.trainer.kubeflow.org/{trainjob['metadata']['name']}\n"
    assert files["json"] == files["yaml"] == files["name"]
    assert files["json"]


# --request-timeout


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        ("30s", 30.0),
        ("1m", 60.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("0", 0.0),
        ("45", 45.0),
        ("2.5", 2.5),
    ],
)
def test_request_timeout_takes_kubectl_s_durations_and_bare_seconds(
    given: str, seconds: float
) -> None:
    settings = load_settings(StepSettings, prog="p", argv=["--request-timeout", given])
    assert settings.request_timeout == pytest.approx(seconds)


@pytest.mark.parametrize("given", ["5x", "s", "", "1 m", "--1s", "1s2", "m1"])
def test_a_request_timeout_that_is_no_duration_is_named(given: str) -> None:
    with pytest.raises(BadInput) as raised:
        load_settings(StepSettings, prog="dispatch-hold", argv=[f"--request-timeout={given}"])
    message = str(raised.value)
    assert message.startswith(
        "dispatch-hold: --request-timeout (env DISPATCH_REQUEST_TIMEOUT): "
    ), message
    assert "\n" not in message


def test_without_request_timeout_there_is_no_deadline() -> None:
    assert load_settings(StepSettings, prog="p", argv=[]).request_timeout == 0


class Api:
    """The part of the client's ApiClient the gateway sends through: what it was given."""

    configuration = SERVER

    def __init__(self, *, answer: Exception) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.answer = answer

    def param_serialize(self, *, method: str, resource_path: str, **_: Any) -> tuple[str, str]:
        return method, resource_path

    def call_api(self, method: str, path: str, *, _request_timeout: Any) -> Any:
        self.sent.append((method, _request_timeout))
        raise self.answer


def gateway(api: Api, deadline: Deadline | None) -> Gateway:
    return Gateway(cast(Any, api), deadline=deadline)


class Stop(Exception):
    """The test stops at what was sent."""


def test_each_request_waits_no_longer_than_the_deadline_leaves() -> None:
    api = Api(answer=Stop())
    with pytest.raises(Stop):
        gateway(api, Deadline(5.0)).read_trainjob("a", "job")
    with pytest.raises(Stop):
        next(gateway(api, Deadline(5.0)).watch(kinds.WORKLOAD, "a", version="1", timeout=60))
    with pytest.raises(Stop):
        gateway(api, None).read_trainjob("a", "job")
    (_, read), (_, watch), (_, free) = api.sent
    assert 4.0 < read <= 5.0
    assert all(4.0 < part <= 5.0 for part in watch), watch
    assert free == REQUEST_TIMEOUT


def passed() -> Deadline:
    return Deadline(1.0, start=time.monotonic() - 2)


def test_once_the_deadline_passed_nothing_is_sent_and_the_step_exits_75() -> None:
    api = Api(answer=Stop())
    job = {"metadata": {"namespace": "a", "name": "job"}}
    with pytest.raises(OutOfTime) as read:
        gateway(api, passed()).read_trainjob("a", "job")
    with pytest.raises(OutOfTime):
        gateway(api, passed()).update_trainjob(job, "7")
    assert api.sent == []
    assert read.value.exit_code == 75
    assert str(read.value).startswith(
        "--request-timeout 1s (env DISPATCH_REQUEST_TIMEOUT) passed before GET "
    )


class Clock:
    """The gateway's monotonic clock, moved on by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class Late(Api):
    """An API server that answers only once the request's own timeout has run out."""

    def __init__(self, *, answer: Exception, clock: Clock) -> None:
        super().__init__(answer=answer)
        self.clock = clock

    def call_api(self, method: str, path: str, *, _request_timeout: Any) -> Any:
        self.sent.append((method, _request_timeout))
        self.clock.now += _request_timeout
        raise self.answer


def test_a_write_cut_short_by_the_deadline_is_not_sent_again_and_names_the_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(transport, "time", clock)
    timed_out = urllib3.exceptions.ReadTimeoutError(cast(Any, None), "/", "timed out")
    late = Late(answer=timed_out, clock=clock)
    job = {"metadata": {"namespace": "a", "name": "job"}}
    with pytest.raises(OutOfTime, match="passed waiting for the answer to PUT "):
        gateway(late, Deadline(2.0, start=clock.now)).update_trainjob(job, "7")
    assert late.sent == [("PUT", 2.0)]


class StalledWatch:
    """A watch whose connection stops answering: the read times out once the time given ran out."""

    configuration = SERVER

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.sent: list[Any] = []
        self.status = 200
        self.response = self

    def param_serialize(self, *, method: str, resource_path: str, **_: Any) -> tuple[str, str]:
        return method, resource_path

    def call_api(self, method: str, path: str, *, _request_timeout: Any) -> Any:
        self.sent.append(_request_timeout)
        return self

    def stream(self, *_: Any, **__: Any) -> Iterator[bytes]:
        self.clock.now += self.sent[-1][1]
        raise urllib3.exceptions.ReadTimeoutError(cast(Any, None), "/", "timed out")

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def test_a_watch_cut_by_the_deadline_names_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(transport, "time", clock)
    api = StalledWatch(clock)
    watching = Gateway(cast(Any, api), deadline=Deadline(3.0, start=clock.now))
    with pytest.raises(OutOfTime, match="passed during watch /apis/kueue"):
        next(watching.watch(kinds.WORKLOAD, "a", version="1", timeout=60))
    assert api.sent == [(3.0, 3.0)]


def test_an_event_after_the_deadline_is_skipped_not_failed() -> None:
    api = Api(answer=Stop())
    job = {"metadata": {"namespace": "a", "name": "job", "uid": "u"}}
    posted = gateway(api, passed()).emit_event(
        job, event_type="Normal", reason="Raised", message="m", step="hold"
    )
    assert posted is False
    assert api.sent == []


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that takes connections and never answers (a stalled API server)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def kubeconfig_for(path: Path, port: int) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return path


def test_a_step_stops_at_its_request_timeout_exit_75_in_one_line(
    silent_server: int, tmp_path: Path
) -> None:
    config = kubeconfig_for(tmp_path / "kubeconfig", silent_server)
    began = time.monotonic()
    done = step(
        "dispatch-hold",
        *["--kubeconfig", str(config), "-n", "a", "--name", "job", "--request-timeout", "1s"],
        timeout=30,
    )
    took = time.monotonic() - began
    assert done.returncode == 75, done.stderr
    # Without the flag its one request alone would wait REQUEST_TIMEOUT; the bound leaves the
    # rest to the interpreter's start, which takes seconds on a loaded machine.
    assert took < REQUEST_TIMEOUT, (
        f"{took:.1f}s: its request would wait {REQUEST_TIMEOUT}s without it"
    )
    message = last_error(done)
    assert message.startswith("--request-timeout 1s (env DISPATCH_REQUEST_TIMEOUT) passed ")
    assert done.stdout == ""


# A missing or bad setting, named by its flag and env variable


def test_a_missing_setting_is_its_flag_and_env_variable(tmp_path: Path) -> None:
    done = step("dispatch-hold", "-n", "a")
    assert done.returncode == 2
    assert last_error(done) == "dispatch-hold: --name (env DISPATCH_NAME) is required"


def test_a_bad_value_from_a_flag_or_the_env_names_both(monkeypatch: pytest.MonkeyPatch) -> None:
    named = "c: --workers (env DISPATCH_WORKERS): Input should be a valid integer"
    with pytest.raises(BadInput, match=f"^{re.escape(named)}"):
        load_settings(ControllerSettings, prog="c", argv=["--workers", "many"])
    monkeypatch.setenv("DISPATCH_WORKERS", "many")
    with pytest.raises(BadInput) as raised:
        load_settings(ControllerSettings, prog="c", argv=[])
    assert str(raised.value).startswith(named)


CONTROLLER_BOUNDS: Final = (
    "dispatch-admission-controller: --workers, --audit-workers, --kube-api-burst, "
    "--backoff-base-seconds and --backoff-max-seconds must be at least 1, --resync-seconds above "
    "0, --kube-api-qps and --backoff-limit-count 0 or more and --lease-seconds at least 3"
)


@pytest.mark.parametrize(
    ("argv", "told"),
    [
        (["--workers", "0", "--lease-seconds", "2"], CONTROLLER_BOUNDS),
        (["--kube-api-qps=-1", "--resync-seconds", "0"], CONTROLLER_BOUNDS),
        (["--backoff-base-seconds", "0", "--backoff-limit-count=-1"], CONTROLLER_BOUNDS),
        # Any other bad value is told first, alone, as the bounds were once checked after it.
        (
            ["--audit-workers", "0", "--other-workloads", "x"],
            "dispatch-admission-controller: --other-workloads (env DISPATCH_OTHER_WORKLOADS): "
            "Input should be 'approve' or 'leave'",
        ),
    ],
    ids=["at-least", "above", "backoff", "other-first"],
)
def test_the_controller_s_bounds_are_told_together_in_one_line(argv: list[str], told: str) -> None:
    done = step("dispatch-admission-controller", *argv)
    assert (done.returncode, last_error(done)) == (2, told)


def test_a_rule_over_several_flags_is_told_as_it_is() -> None:
    with pytest.raises(BadInput) as raised:
        load_settings(AuditSettings, prog="dispatch-audit", argv=["--all", "--name", "x"])
    assert str(raised.value) == "dispatch-audit: give exactly one of --name, --all and --selector"


def test_a_start_request_names_each_field_s_flag_env_and_file_key() -> None:
    done = step("dispatch-start", *DRY_RUN, "--generation=-1")
    assert done.returncode == 2
    assert last_error(done) == (
        "start request refused: --generation (env DISPATCH_GENERATION, or generation in "
        "--request-file): Input should be greater than or equal to 0"
    )
