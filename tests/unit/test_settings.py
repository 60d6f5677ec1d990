"""Flags and env into settings: list words verbatim, errors one line, the namespace as
kubectl resolves it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
import yaml
from loguru import logger

from dispatch_k8s.controller import settings as controller_settings
from dispatch_k8s.controller.settings import ControllerSettings
from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.rules.errors import BadInput
from dispatch_k8s.core.shell.gateway import kubeconfig
from dispatch_k8s.core.shell.settings import (
    ClusterSettings,
    NamespacedSettings,
    TrainJobSettings,
    env_name,
    load_settings,
    take_verbatim,
)
from dispatch_k8s.core.shell.settings import base as settings_base
from dispatch_k8s.steps import admit, approve, audit, start_settings, status
from dispatch_k8s.steps.admit import AdmitSettings
from dispatch_k8s.steps.approve import ApproveSettings
from dispatch_k8s.steps.audit import AuditSettings
from dispatch_k8s.steps.start_settings import StartSettings
from tests.support.requests import request_flags


@pytest.mark.parametrize(
    ("argv", "rest", "taken"),
    [
        (["--command", "a,b", "--job-id", "j"], ["--job-id", "j"], {"command": ["a,b"]}),
        (["--args=--lr", "--args", "[1]"], [], {"args": ["--lr", "[1]"]}),
        (["--", "--command", "x"], ["--", "--command", "x"], {}),
        (["--commander", "x"], ["--commander", "x"], {}),
    ],
    ids=["space-form", "equals-form", "after-double-dash", "longer-flag-name"],
)
def test_take_verbatim(argv: list[str], rest: list[str], taken: dict[str, list[str]]) -> None:
    assert take_verbatim(argv, ("command", "args"), prog="p") == (rest, taken)


def test_flag_without_its_word_is_bad_input() -> None:
    with pytest.raises(BadInput, match="--command: expected one argument"):
        take_verbatim(["--command"], ("command",), prog="p")


def test_verbatim_words_count_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISPATCH_COMMAND", '["from-env"]')
    settings = load_settings(StartSettings, prog="p", argv=["--command", 'a,"b"'])
    assert settings.command == ['a,"b"']
    assert "command" in settings.model_fields_set
    from_env = load_settings(StartSettings, prog="p", argv=[])
    assert from_env.command == ["from-env"]


@pytest.mark.parametrize(
    ("cls", "argv", "prefix"),
    [
        (TrainJobSettings, ["--namespac", "team-a", "--name", "job"], "--namespac"),
        (TrainJobSettings, ["--namespace", "team-a", "--nam", "job"], "--nam"),
        (ControllerSettings, ["--worker", "2"], "--worker"),
    ],
)
def test_a_prefix_of_a_flag_is_refused_as_kubectl_refuses_it(
    cls: type[TrainJobSettings | ControllerSettings], argv: list[str], prefix: str
) -> None:
    with pytest.raises(BadInput, match=f"unrecognized arguments: {prefix} "):
        load_settings(cls, prog="p", argv=argv)


def test_a_flag_written_whole_is_taken() -> None:
    settings = load_settings(
        TrainJobSettings, prog="p", argv=["--namespace", "team-a", "--name", "j"]
    )
    assert (settings.namespace, settings.name) == ("team-a", "j")


def write_kubeconfig(path: Path, current: str, namespaces: dict[str, str | None]) -> Path:
    """A kubeconfig whose contexts are `namespaces`' keys, each in its namespace (or none)."""
    contexts = [
        {"name": name, "context": {"cluster": "c", "user": "u"} | ({"namespace": ns} if ns else {})}
        for name, ns in namespaces.items()
    ]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": contexts,
    }
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass(frozen=True)
class Machine:
    """Where kubectl looks for a namespace, each place empty until a test fills it."""

    kubeconfig: Path  # what $KUBECONFIG names
    service_account_namespace: Path


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Machine:
    """Outside a pod, $KUBECONFIG naming a file not yet written, no ServiceAccount file."""
    here = Machine(tmp_path / "kubeconfig", tmp_path / "serviceaccount-namespace")
    for name in ("KUBERNETES_SERVICE_HOST", "DISPATCH_NAMESPACE", "DISPATCH_KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(here.kubeconfig))
    monkeypatch.setattr(kubeconfig, "SERVICE_ACCOUNT_NAMESPACE", here.service_account_namespace)
    return here


# Each step that acts in one namespace, with the flags it needs besides.
NAMESPACED: Final = [
    (TrainJobSettings, ["--name", "j"]),
    (AdmitSettings, ["--name", "j"]),
    (AuditSettings, ["--all"]),
    (ApproveSettings, ["--workload", "w", "--workload-resource-version", "1", "--admission", "1"]),
]


def namespace_of(cls: type[ClusterSettings], argv: list[str]) -> str:
    """The namespace the step acts in: start's request's, any other step's own setting."""
    settings = load_settings(cls, prog="p", argv=argv)
    if isinstance(settings, StartSettings):
        return settings.start_request().namespace
    assert isinstance(settings, NamespacedSettings)
    return settings.namespace


@pytest.mark.parametrize(("cls", "needed"), NAMESPACED)
def test_without_a_namespace_the_kubeconfig_context_s_is_used(
    machine: Machine, cls: type[ClusterSettings], needed: list[str]
) -> None:
    write_kubeconfig(machine.kubeconfig, "a", {"a": "team-a", "b": "team-b"})
    assert namespace_of(cls, needed) == "team-a"
    assert namespace_of(cls, [*needed, "--context", "b"]) == "team-b"


@pytest.mark.parametrize(("cls", "needed"), NAMESPACED)
def test_a_namespace_given_wins_over_the_context_s(
    machine: Machine, monkeypatch: pytest.MonkeyPatch, cls: type[ClusterSettings], needed: list[str]
) -> None:
    write_kubeconfig(machine.kubeconfig, "a", {"a": "team-a"})
    assert namespace_of(cls, [*needed, "--namespace", "team-x"]) == "team-x"
    monkeypatch.setenv("DISPATCH_NAMESPACE", "team-env")
    assert namespace_of(cls, needed) == "team-env"
    assert namespace_of(cls, [*needed, "-n", "team-x"]) == "team-x"


def test_the_kubeconfig_flag_wins_over_the_env_s_files(machine: Machine, tmp_path: Path) -> None:
    write_kubeconfig(machine.kubeconfig, "a", {"a": "team-a"})
    given = write_kubeconfig(tmp_path / "given", "g", {"g": "team-g"})
    assert namespace_of(TrainJobSettings, ["--name", "j", "--kubeconfig", str(given)]) == "team-g"


def test_the_env_s_files_are_merged_as_the_client_merges_them(
    machine: Machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client keeps the first file's context of a name and the last current-context.
    first = write_kubeconfig(tmp_path / "first", "a", {"a": "team-a"})
    second = write_kubeconfig(tmp_path / "second", "b", {"a": "ignored", "b": "team-b"})
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}")
    assert namespace_of(TrainJobSettings, ["--name", "j"]) == "team-b"
    assert namespace_of(TrainJobSettings, ["--name", "j", "--context", "a"]) == "team-a"


@pytest.mark.parametrize(("cls", "needed"), NAMESPACED)
def test_the_service_account_s_namespace_comes_after_the_context_s(
    machine: Machine, cls: type[ClusterSettings], needed: list[str]
) -> None:
    machine.service_account_namespace.write_text("team-sa\n")
    assert namespace_of(cls, needed) == "team-sa", "no kubeconfig at all"
    write_kubeconfig(machine.kubeconfig, "a", {"a": None})
    assert namespace_of(cls, needed) == "team-sa", "a context without a namespace"
    write_kubeconfig(machine.kubeconfig, "a", {"a": "team-a"})
    assert namespace_of(cls, needed) == "team-a"


def test_in_a_pod_the_kubeconfig_is_read_only_when_given(
    machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As the client connects: in-cluster config unless --kubeconfig names a file.
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    machine.service_account_namespace.write_text("team-sa")
    write_kubeconfig(machine.kubeconfig, "a", {"a": "team-a"})
    assert namespace_of(TrainJobSettings, ["--name", "j"]) == "team-sa"
    given = ["--name", "j", "--kubeconfig", str(machine.kubeconfig)]
    assert namespace_of(TrainJobSettings, given) == "team-a"


@pytest.mark.parametrize(("cls", "needed"), NAMESPACED)
def test_default_is_the_last_resort(
    machine: Machine, cls: type[ClusterSettings], needed: list[str]
) -> None:
    assert namespace_of(cls, needed) == "default"


@pytest.mark.parametrize(
    "kubeconfig_text",
    ["just words\n", "- a list\n", "current-context: nowhere\ncontexts: []\n", "{{{\n"],
)
def test_a_kubeconfig_that_names_no_namespace_leaves_it_to_the_next_place(
    machine: Machine, kubeconfig_text: str
) -> None:
    machine.kubeconfig.write_text(kubeconfig_text)
    assert namespace_of(TrainJobSettings, ["--name", "j"]) == "default"


def test_start_takes_the_request_file_s_namespace_over_the_context_s(
    machine: Machine, tmp_path: Path
) -> None:
    write_kubeconfig(machine.kubeconfig, "a", {"a": "team-a"})
    flags = request_flags("train-42", attempt=0, extra={"runtime_name": "r"})
    assert namespace_of(StartSettings, flags) == "team-a"
    assert namespace_of(StartSettings, [*flags, "-n", "team-x"]) == "team-x"
    request_file = tmp_path / "request.yaml"
    request_file.write_text("namespace: team-file\n")
    assert namespace_of(StartSettings, [*flags, "--request-file", str(request_file)]) == (
        "team-file"
    )


@pytest.mark.parametrize("argv", [["-n", "team-a"], ["-n=team-a"], ["-nteam-a"]])
def test_n_is_namespace_in_each_of_kubectl_s_spellings(machine: Machine, argv: list[str]) -> None:
    settings = load_settings(TrainJobSettings, prog="p", argv=[*argv, "--name", "j"])
    assert settings.namespace == "team-a"


def test_a_short_flag_is_no_word_of_the_job_s_command(machine: Machine) -> None:
    argv = [*request_flags("j", attempt=0, args=False), "--args", "-n", "--args", "-v"]
    settings = load_settings(StartSettings, prog="p", argv=[*argv, "-n", "team-a"])
    assert settings.args == ["-n", "-v"]
    assert (settings.namespace, settings.log_level) == ("team-a", "info")


def test_the_controller_takes_no_n() -> None:
    with pytest.raises(BadInput, match="unrecognized arguments: -n "):
        load_settings(ControllerSettings, prog="p", argv=["-n", "team-a"])


def test_policy_mode_is_the_controller_without_its_gate_and_needs_the_auditor() -> None:
    assert load_settings(ControllerSettings, prog="p", argv=[]).gate is True
    policy = load_settings(ControllerSettings, prog="p", argv=["--no-gate"])
    assert (policy.gate, policy.audit) == (False, True)
    with pytest.raises(BadInput, match="--no-gate needs --audit"):
        load_settings(ControllerSettings, prog="p", argv=["--no-gate", "--no-audit"])


# No input is read from a variable a training pod sees (issue 27): DISPATCH_ATTEMPT was start's.
POD_ENV: Final = {value for name, value in vars(wire).items() if name.startswith("ENV_")}
# Every model, the shell's and those beside their step or the controller, once each.
INPUTS: Final = list(
    {
        cls: None
        for module in (
            settings_base,
            start_settings,
            admit,
            approve,
            audit,
            status,
            controller_settings,
        )
        for cls in vars(module).values()
        if isinstance(cls, type) and issubclass(cls, ClusterSettings)
    }
)


@pytest.mark.parametrize("cls", INPUTS, ids=lambda cls: cls.__name__)
def test_no_input_is_read_from_a_variable_the_training_pods_see(
    cls: type[ClusterSettings],
) -> None:
    assert {wire.ENV_EPOCH, wire.ENV_ATTEMPT, wire.ENV_WORKDIR} <= POD_ENV
    assert not {env_name(field) for field in cls.model_fields} & POD_ENV


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    """What the settings log at WARNING, as the steps' stderr has it."""
    told: list[str] = []
    handler = logger.add(lambda message: told.append(message.record["message"]), level="WARNING")
    yield told
    logger.remove(handler)


@pytest.mark.parametrize(
    ("env", "attempt", "warned"),
    [
        ({"DISPATCH_START_ATTEMPT": "5"}, 5, False),
        ({"DISPATCH_ATTEMPT": "4"}, 4, True),  # the former name, for one release
        ({"DISPATCH_ATTEMPT": "4", "DISPATCH_START_ATTEMPT": "5"}, 5, False),  # in a pod
        ({}, None, False),
    ],
    ids=["new", "former", "both", "neither"],
)
def test_start_s_attempt_is_read_from_its_own_env_variable(
    monkeypatch: pytest.MonkeyPatch,
    warnings: list[str],
    env: dict[str, str],
    attempt: int | None,
    warned: bool,
) -> None:
    for name in ("DISPATCH_ATTEMPT", "DISPATCH_START_ATTEMPT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert load_settings(StartSettings, prog="dispatch-start", argv=[]).attempt == attempt
    if warned:
        [warning] = warnings
        assert warning.startswith("DISPATCH_ATTEMPT is deprecated as --attempt's env variable")
        assert "is not read from 0.3.0 on: set DISPATCH_START_ATTEMPT" in warning
    else:
        assert warnings == []


def test_a_step_without_an_attempt_ignores_the_pod_s(
    monkeypatch: pytest.MonkeyPatch, warnings: list[str]
) -> None:
    monkeypatch.setenv("DISPATCH_ATTEMPT", "train-42.3.7.2.1.0")
    load_settings(TrainJobSettings, prog="dispatch-hold", argv=["--name", "j"])
    assert warnings == []


def test_a_bad_attempt_in_the_env_is_named_by_its_new_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DISPATCH_START_ATTEMPT", "two")
    with pytest.raises(BadInput) as raised:
        load_settings(StartSettings, prog="dispatch-start", argv=[])
    assert str(raised.value).startswith("dispatch-start: --attempt (env DISPATCH_START_ATTEMPT): ")
