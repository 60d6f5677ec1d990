"""Every step's --help and --version, and the one-line errors of a kubeconfig that cannot be
used: what a newcomer reads before anything reaches a cluster."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Final, get_type_hints

import pytest
import yaml

from dispatch_k8s.core.rules import errors
from dispatch_k8s.core.rules.errors import BadInput
from dispatch_k8s.core.shell.gateway import Gateway
from dispatch_k8s.core.shell.settings import ClusterSettings, env_name, flag_name, load_settings
from tests.unit.golden import check_golden_text

REPO: Final = Path(__file__).resolve().parents[2]
BIN: Final = Path(sys.executable).parent
SCRIPTS: Final = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
PLUGIN: Final = (
    "kubectl-dispatch"  # runs a step by its subcommand: tests/unit/test_kubectl_plugin.py
)
STEPS: Final = sorted(set(SCRIPTS) - {PLUGIN})
# What pydantic-settings' own CLI printed as metavars: type names, not words.
TYPE_METAVAR: Final = re.compile(r"\{[a-zA-Z]+(,[a-zA-Z]+)*\}|\b(str|int|float|bool|Path|null)\b")


def step_module(script: str) -> ModuleType:
    return importlib.import_module(SCRIPTS[script].partition(":")[0])


def settings_of(script: str) -> type[ClusterSettings]:
    cls = get_type_hints(step_module(script).run)["settings"]
    assert isinstance(cls, type)
    assert issubclass(cls, ClusterSettings)
    return cls


def help_text(script: str, capsys: pytest.CaptureFixture[str], word: str = "--help") -> str:
    module = step_module(script)
    with pytest.raises(SystemExit) as exited:
        load_settings(
            settings_of(script),
            prog=script,
            argv=[word],
            about=module.ABOUT,
            example=module.EXAMPLE,
        )
    assert exited.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("script", STEPS)
def test_help_is_the_text_last_reviewed(script: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every word of --help is in tests/golden/help/: a change to a flag shows in review."""
    check_golden_text(f"help/{script}.txt", help_text(script, capsys))


@pytest.mark.parametrize("script", STEPS)
def test_help_names_every_flag_with_its_meaning_default_and_env(
    script: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_text(script, capsys)
    cls = settings_of(script)
    for field, info in cls.model_fields.items():
        entry = re.search(
            rf"^  (?:-[a-z], )?{re.escape(flag_name(field))}\b"  # a short form first, as -n
            rf"[^\n]*\(env {env_name(field)}\b[^\n]*\)\n"
            r"((?:      [^\n]*\n)+)",
            text,
            re.MULTILINE,
        )
        assert entry is not None, f"{script} --help has no entry for {flag_name(field)}"
        meaning = " ".join(entry.group(1).split())
        assert info.description, f"{field} has no description"
        assert info.description.split()[0] in meaning
        assert "Default: " in meaning or "Required" in meaning, meaning
    assert text.count("(env DISPATCH_") == len(cls.model_fields)


@pytest.mark.parametrize("script", STEPS)
def test_help_says_what_the_step_does_its_exit_codes_and_an_example(
    script: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_text(script, capsys)
    about = step_module(script).ABOUT.strip().splitlines()
    assert len(about) == 2, "what the step does, in two lines"
    assert "\n".join(about) in text
    codes = re.findall(r"^  (\d+) +\S", text.split("exit codes:\n")[1], re.MULTILINE)
    every = {0, 1} | {cls.exit_code for cls in vars(errors).values() if _is_error(cls)}
    assert {int(code) for code in codes} == every
    example = text.split("example:\n")[1]
    assert example.lstrip().startswith(f"{script} "), "the example runs the step itself"
    assert TYPE_METAVAR.search(text.split("exit codes:")[0].replace("ID>.", "")) is None
    assert max(len(line) for line in text.splitlines()) <= 100


def _is_error(value: object) -> bool:
    return (
        isinstance(value, type)
        and issubclass(value, errors.DispatchError)
        and (value is not errors.DispatchError)
    )


@pytest.mark.parametrize("script", STEPS)
def test_help_tells_n_and_the_namespace_kubectl_would_use(
    script: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_text(script, capsys)
    if "namespace" not in settings_of(script).model_fields:  # the controller: every namespace
        assert "-n," not in text
        return
    assert "\n  -n, --namespace NAMESPACE  (env DISPATCH_NAMESPACE)\n" in text
    entry = " ".join(text.split("(env DISPATCH_NAMESPACE)")[1].split("\n  -")[0].split())
    assert entry.endswith(
        "Default: the kubeconfig context's namespace, else (in a pod) the ServiceAccount's "
        "namespace, else default."
    )


def test_h_prints_the_help_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert help_text("dispatch-hold", capsys, "-h") == help_text("dispatch-hold", capsys)


def test_a_prefix_of_help_is_refused_as_any_other_prefix() -> None:
    with pytest.raises(errors.BadInput, match="unrecognized arguments: --he "):
        load_settings(settings_of("dispatch-hold"), prog="dispatch-hold", argv=["--he"])


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_version_is_the_installed_distribution_s(script: str) -> None:
    done = subprocess.run(
        [str(BIN / script), "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{script} (dispatch-k8s) {version('dispatch-k8s')}\n"


def test_help_from_the_console_script_is_on_stdout_exit_0() -> None:
    done = subprocess.run(
        [str(BIN / "dispatch-start"), "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: dispatch-start ")
    assert "--request-file FILE  (env DISPATCH_REQUEST_FILE)" in done.stdout
    assert "{int,null}" not in done.stdout


def kubeconfig(path: Path, *contexts: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": contexts[0],
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": name, "context": {"cluster": "c", "user": "u"}} for name in contexts],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_kubeconfig_that_does_not_exist_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "kubeconfig"
    with pytest.raises(BadInput) as raised:
        Gateway.connect(kubeconfig=missing, context=None)
    assert str(raised.value) == f"kubeconfig {missing} does not exist"


def test_a_kubeconfig_env_whose_files_do_not_exist_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    with pytest.raises(BadInput, match=f"kubeconfig files {tmp_path / 'a'}:{tmp_path / 'b'}"):
        Gateway.connect(kubeconfig=None, context=None)


def test_a_context_that_is_not_in_the_kubeconfig_is_named(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "kubeconfig", "team-a", "team-b")
    with pytest.raises(BadInput) as raised:
        Gateway.connect(kubeconfig=path, context="team-c")
    assert str(raised.value) == (
        f"context team-c is not in kubeconfig {path} (its contexts: team-a, team-b)"
    )
    Gateway.connect(kubeconfig=path, context="team-b")  # one it has is fine


def test_a_file_that_is_no_kubeconfig_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("just words\n")
    with pytest.raises(BadInput, match=f"kubeconfig {path} is not a kubeconfig"):
        Gateway.connect(kubeconfig=path, context=None)


@pytest.mark.parametrize("flags", [["--kubeconfig", "/nonexistent/kc"], ["--context", "nope"]])
def test_the_step_exits_2_with_the_kubeconfig_error_in_one_line(
    tmp_path: Path, flags: list[str]
) -> None:
    default = kubeconfig(tmp_path / "kubeconfig", "only")
    done = subprocess.run(
        [str(BIN / "dispatch-hold"), "--name", "x", *flags],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "KUBECONFIG": str(default)},
    )
    assert done.returncode == BadInput.exit_code
    assert "Traceback" not in done.stderr
    last = json.loads(done.stderr.strip().splitlines()[-1])
    assert flags[1] in last["message"]
    assert "\n" not in last["message"]
