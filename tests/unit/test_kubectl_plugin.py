"""kubectl-dispatch: `kubectl dispatch SUBCOMMAND ...` runs the subcommand's step."""

from __future__ import annotations

import sys

import pytest

from dispatch_k8s.steps import kubectl_dispatch


def run(monkeypatch: pytest.MonkeyPatch, *args: str) -> int | str | None:
    monkeypatch.setattr(sys, "argv", ["kubectl-dispatch", *args])
    with pytest.raises(SystemExit) as exited:
        kubectl_dispatch.main()
    return exited.value.code


@pytest.mark.parametrize("args", [[], ["statuses"], ["--name", "x"]], ids=["none", "typo", "flag"])
def test_an_unknown_subcommand_is_exit_2_with_the_usage(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(monkeypatch, *args) == 2
    told = capsys.readouterr()
    assert told.out == ""
    assert told.err.startswith("kubectl-dispatch: ")
    assert kubectl_dispatch.USAGE in told.err


def test_help_is_the_usage_on_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(monkeypatch, "--help") == 0
    assert capsys.readouterr().out == kubectl_dispatch.USAGE


@pytest.mark.parametrize(
    ("args", "passed"),
    [
        (["status", "train-1", "-n", "team-a"], ["--name", "train-1", "-n", "team-a"]),
        (["status", "-n", "team-a", "--all"], ["-n", "team-a", "--all"]),
    ],
    ids=["name", "flags"],
)
def test_status_runs_dispatch_status_with_the_rest(
    args: list[str], passed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []
    monkeypatch.setitem(kubectl_dispatch.SUBCOMMANDS, "status", lambda: seen.append(sys.argv[1:]))
    monkeypatch.setattr(sys, "argv", ["kubectl-dispatch", *args])
    kubectl_dispatch.main()
    assert seen == [passed]
