"""Flags and env into settings: list words verbatim, errors one line."""

from __future__ import annotations

import pytest

from dispatch_k8s.core.rules.errors import BadInput
from dispatch_k8s.core.shell.settings import (
    ControllerSettings,
    StartSettings,
    TrainJobSettings,
    load_settings,
    take_verbatim,
)


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
