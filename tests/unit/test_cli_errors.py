"""Bad input tried offline on the console scripts as shipped: a kubeconfig that cannot be used
(its exec plugin missing or failing, its server no URL, a user or context it lacks), names and
namespaces the API server would refuse, an API server that cannot be reached, a request file
that holds no mapping. Each is one line of the step's own on stderr, in words, with its
documented exit code (docs/cli.md: Exit codes); none sends a request."""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, cast

import pytest
import urllib3
import yaml

from dispatch_k8s.controller.settings import ControllerSettings
from dispatch_k8s.core.rules import names
from dispatch_k8s.core.rules.errors import BadInput, Transient
from dispatch_k8s.core.shell import runner
from dispatch_k8s.core.shell.gateway import Gateway, kinds
from dispatch_k8s.core.shell.literals import LogLevel
from dispatch_k8s.core.shell.settings import (
    NamespacedSettings,
    TrainJobSettings,
    load_settings,
    read_document,
)
from dispatch_k8s.steps.approve import ApproveSettings
from dispatch_k8s.steps.doctor import DoctorSettings
from dispatch_k8s.steps.status import StatusSettings
from tests.unit.factories import SERVER

BIN: Final = Path(sys.executable).parent
# A Python type's name where a person should read words (`NoneType`, `MaxRetryError`).
TYPE_NAME: Final = re.compile(r"\b\w*(Error|Exception|Type)\b|\bNoneType\b")


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the block ends


def write_kubeconfig(
    path: Path,
    *,
    server: str = "",
    user: dict[str, Any] | None = None,
    context_user: str = "u",
    namespace: str = "team-a",
) -> Path:
    """A kubeconfig of one context `c`; by default a token and a closed loopback port."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [
            {"name": "k", "cluster": {"server": server or f"https://127.0.0.1:{closed_port()}"}}
        ],
        "users": [{"name": "u", "user": user or {"token": "t"}}],
        "contexts": [
            {"name": "c", "context": {"cluster": "k", "user": context_user, "namespace": namespace}}
        ],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def exec_user(command: str) -> dict[str, Any]:
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": command}}


def plugin(tmp_path: Path, body: str) -> str:
    """An exec credential plugin: a shell script of `body`."""
    path = tmp_path / "plugin"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def run_step(script: str, *argv: str, tmp_path: Path) -> tuple[int, list[dict[str, Any]]]:
    """The console script as installed, with no kubeconfig of the machine's: its exit code and
    its stderr, every line of which must be one of its own JSON lines."""
    done = subprocess.run(
        [str(BIN / script), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # a stray line fails here
    return done.returncode, lines


def the_error(lines: list[dict[str, Any]]) -> str:
    [error] = [line for line in lines if line["level"] == "ERROR"]
    message = str(error["message"])
    assert "\n" not in message
    assert not TYPE_NAME.search(message), message
    return message


Fields = Callable[[Path], dict[str, Any]]
KUBECONFIGS: Final[dict[str, tuple[Fields, str]]] = {
    "exec-plugin-missing": (
        lambda tmp: {"user": exec_user(str(tmp / "no-such-plugin"))},
        "its exec credential plugin failed: [Errno 2] No such file or directory",
    ),
    "exec-plugin-failing": (
        lambda tmp: {
            "user": exec_user(plugin(tmp, "echo 'token expired:' >&2; echo relog >&2; exit 1"))
        },
        "its exec credential plugin failed: exec: process returned 1. token expired: relog",
    ),
    "exec-plugin-no-json": (
        lambda tmp: {"user": exec_user(plugin(tmp, "echo hello"))},
        "its exec credential plugin failed: exec: failed to decode process output",
    ),
    "server-no-url": (
        lambda tmp: {"server": "not a url"},
        "the cluster's server 'not a url' is not a URL (give https://HOST[:PORT])",
    ),
    "server-no-scheme": (
        lambda tmp: {"server": "127.0.0.1:6443"},
        "the cluster's server '127.0.0.1:6443' is not a URL",
    ),
    "user-missing": (
        lambda tmp: {"context_user": "nobody"},
        "user nobody of context c is not in it",
    ),
}


@pytest.mark.parametrize("case", sorted(KUBECONFIGS))
def test_a_kubeconfig_that_cannot_be_used_is_exit_2_in_one_line_of_the_step_s(
    case: str, tmp_path: Path
) -> None:
    fields, told = KUBECONFIGS[case]
    path = write_kubeconfig(tmp_path / "kubeconfig", **fields(tmp_path))
    code, lines = run_step(
        "dispatch-hold", "--kubeconfig", str(path), "--name", "j", tmp_path=tmp_path
    )
    assert code == BadInput.exit_code, lines
    message = the_error(lines)
    assert message.startswith(f"kubeconfig {path}: ")
    assert told in message


@pytest.mark.parametrize("case", sorted(KUBECONFIGS))
def test_a_kubeconfig_that_cannot_be_used_is_found_before_a_request(
    case: str, tmp_path: Path
) -> None:
    fields, told = KUBECONFIGS[case]
    path = write_kubeconfig(tmp_path / "kubeconfig", **fields(tmp_path))
    with pytest.raises(BadInput, match=re.escape(told)):
        Gateway.connect(kubeconfig=path, context=None)


def test_a_context_that_is_not_there_is_exit_2(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kubeconfig")
    code, lines = run_step(
        "dispatch-status",
        "--kubeconfig",
        str(path),
        "--context",
        "nope",
        "--all",
        tmp_path=tmp_path,
    )
    assert code == BadInput.exit_code
    assert the_error(lines) == f"context nope is not in kubeconfig {path} (its contexts: c)"


def test_an_unreachable_api_server_is_named_by_its_url_in_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("dispatch_k8s.core.shell.gateway.api_errors.time.sleep", lambda _: None)
    port = closed_port()
    path = write_kubeconfig(tmp_path / "kubeconfig", server=f"https://127.0.0.1:{port}")
    gateway = Gateway.connect(kubeconfig=path, context=None)
    with pytest.raises(Transient) as raised:
        gateway.read_trainjob("team-a", "j")
    assert str(raised.value) == (
        f"TrainJob team-a/j: API server unreachable at https://127.0.0.1:{port}: "
        "no connection (Connection refused)"
    )


def test_the_step_says_so_on_stderr_with_exit_75(tmp_path: Path) -> None:
    port = closed_port()
    path = write_kubeconfig(tmp_path / "kubeconfig", server=f"http://127.0.0.1:{port}")
    code, lines = run_step(
        "dispatch-hold", "--kubeconfig", str(path), "--name", "j", tmp_path=tmp_path
    )
    assert code == Transient.exit_code
    assert f"API server unreachable at http://127.0.0.1:{port}: " in the_error(lines)


# (flags, what the one line says): each refused as the API server would refuse it.
BAD_NAMES: Final = [
    (["--namespace", ""], "--namespace (env DISPATCH_NAMESPACE): '' is not a namespace"),
    (["--namespace=Bad NS"], "'Bad NS' is not a namespace, which is an RFC 1123 label"),
    (["-n", "team_a"], "'team_a' is not a namespace"),
    (["-n", "a" * 64], "is not a namespace"),
    (["--name", ""], "--name (env DISPATCH_NAME): '' is not a TrainJob name"),
    (["--name", "1job"], "'1job' is not a TrainJob name, which is an RFC 1035 label"),
    (["--name", "Job"], "'Job' is not a TrainJob name"),
    (["--name", "a.b"], "'a.b' is not a TrainJob name"),
]


@pytest.mark.parametrize(("flags", "told"), BAD_NAMES)
def test_a_name_or_namespace_the_api_server_would_refuse_is_bad_input(
    flags: list[str], told: str
) -> None:
    argv = ["--name", "j", *flags] if "--name" not in flags else ["-n", "team-a", *flags]
    with pytest.raises(BadInput, match=re.escape(told)):
        load_settings(TrainJobSettings, prog="dispatch-hold", argv=argv)


@pytest.mark.parametrize("namespace", ["1team", "team-a", "0", "a" * 63])
def test_a_namespace_is_an_rfc_1123_label_and_may_start_with_a_digit(namespace: str) -> None:
    settings = load_settings(
        TrainJobSettings, prog="dispatch-hold", argv=["-n", namespace, "--name", "j"]
    )
    assert settings.namespace == namespace


@pytest.mark.parametrize(
    ("cls", "argv", "told"),
    [
        (
            ApproveSettings,
            ["--workload", "A B", "--workload-resource-version", "1", "--admission", "1"],
            "'A B' is not an object name",
        ),
        (
            ApproveSettings,
            [
                "--workload",
                "w",
                "--workload-resource-version",
                "1",
                "--admission",
                "1",
                "--check=-x",
            ],
            "'-x' is not an object name",
        ),
        (StatusSettings, ["--name", "J"], "'J' is not a TrainJob name"),
        (DoctorSettings, ["-n", "A"], "'A' is not a namespace"),
        (DoctorSettings, ["--service-account", ""], "'' is not an object name"),
        (ControllerSettings, ["--namespaces", "a,B c"], "1: 'B c' is not a namespace"),
        (ControllerSettings, ["--lease-namespace", ""], "'' is not a namespace"),
        (ControllerSettings, ["--lease-name", "L"], "'L' is not an object name"),
    ],
)
def test_each_step_checks_its_names(cls: Any, argv: list[str], told: str) -> None:
    with pytest.raises(BadInput, match=re.escape(told)):
        load_settings(
            cls,
            prog="dispatch-x",
            argv=["-n", "team-a", *argv] if issubclass(cls, NamespacedSettings) else argv,
        )


def test_a_kubeconfig_context_s_namespace_is_checked_too(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kubeconfig", namespace="Team A")
    with pytest.raises(
        BadInput, match=r"the namespace of the kubeconfig's context: 'Team A' is not a namespace"
    ):
        load_settings(
            TrainJobSettings, prog="dispatch-hold", argv=["--kubeconfig", str(path), "--name", "j"]
        )


def test_a_bad_name_is_exit_2_before_any_request(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kubeconfig")  # a closed port: a request would be 75
    code, lines = run_step(
        "dispatch-unsuspend",
        "--kubeconfig",
        str(path),
        "-n",
        "Bad NS",
        "--name",
        "j",
        tmp_path=tmp_path,
    )
    assert code == BadInput.exit_code
    assert "'Bad NS' is not a namespace" in the_error(lines)


def test_start_takes_a_namespace_that_starts_with_a_digit(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            str(BIN / "dispatch-start"),
            "--dry-run=client",
            "--runtime-file",
            str(Path(__file__).resolve().parents[2] / "pipelines/runtimes/torch-distributed.yaml"),
            *("--job-id", "j", "--generation", "1", "--submission", "0", "--attempt", "0"),
            *("--image", "i", "--command", "python", "-n", "1team"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["metadata"]["namespace"] == "1team"


MAPPING: Final = "it must hold one mapping (key: value lines, or a JSON object)"


@pytest.mark.parametrize(
    ("text", "told"),
    [
        ("", f"is empty: {MAPPING}"),
        ("# only a comment\n", f"is empty: {MAPPING}"),
        ("- a\n- b\n", f"holds a list: {MAPPING}"),
        ("just words\n", f"holds a string: {MAPPING}"),
        ("3\n", f"holds a number: {MAPPING}"),
    ],
)
def test_a_request_file_without_a_mapping_says_what_it_holds_in_words(
    text: str, told: str, tmp_path: Path
) -> None:
    path = tmp_path / "request.yaml"
    path.write_text(text)
    with pytest.raises(BadInput) as raised:
        read_document(path, what="request file")
    assert str(raised.value) == f"request file {path} {told}"
    assert not TYPE_NAME.search(str(raised.value))


def test_an_empty_request_file_is_exit_2_in_words(tmp_path: Path) -> None:
    path = tmp_path / "request.yaml"
    path.write_text("")
    code, lines = run_step("dispatch-start", "--request-file", str(path), tmp_path=tmp_path)
    assert code == BadInput.exit_code
    assert the_error(lines).startswith(f"request file {path} is empty")


def test_libraries_logs_and_warnings_are_the_step_s_own_debug_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    levels: list[tuple[LogLevel, bool]] = [("info", False), ("debug", True)]
    for level, shown in levels:
        runner.configure_logging("hold", level=level)
        logging.getLogger("urllib3.connectionpool").warning("Connection pool is full")
        logging.error("exec: process returned 1")  # as the kubernetes client logs
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("Unverified HTTPS request", stacklevel=1)
        err = capsys.readouterr().err
        lines = [json.loads(line) for line in err.splitlines()]  # nothing but JSON lines
        assert bool(lines) is shown, err
        if shown:
            assert {line["library"] for line in lines} == {
                "urllib3.connectionpool",
                "root",
                "py.warnings",
            }
            assert {line["level"] for line in lines} == {"DEBUG"}
    logging.captureWarnings(False)


def test_the_name_rules_are_the_api_server_s() -> None:
    # k8s.io/apimachinery's own examples: IsDNS1123Label, IsDNS1035Label, IsDNS1123Subdomain.
    assert names.namespace_problem("123-abc") is None
    assert names.namespace_problem("-a") is not None
    assert names.trainjob_name_problem("my-name") is None
    assert names.trainjob_name_problem("123-abc") is not None
    assert names.object_name_problem("example.com") is None
    assert names.object_name_problem("a" * 254) is not None
    assert names.object_name_problem("a..b") is not None


class Cut:
    """An ApiClient whose connection is reset under every request."""

    configuration = SERVER

    def param_serialize(self, *, method: str, resource_path: str, **_: Any) -> tuple[str, str]:
        return method, resource_path

    def call_api(self, *_: Any, **__: Any) -> Any:
        raise urllib3.exceptions.ProtocolError(
            "Connection aborted.", ConnectionResetError(104, "Connection reset by peer")
        )


def test_a_watch_cut_names_the_server_and_why_in_words() -> None:
    gateway = Gateway(cast(Any, Cut()))
    with pytest.raises(Transient) as raised:
        list(gateway.watch(kinds.TRAINJOB, "team-a", version="1", timeout=1))
    assert str(raised.value) == (
        "watch /apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs: connection lost "
        "with https://127.0.0.1:6443: the connection broke (Connection reset by peer)"
    )
