"""Logs: the level every command takes (`--log-level`, `-v`, DISPATCH_LOG_LEVEL), JSON lines for
machines, and a person's terminal shown plain lines without source locations."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import pytest
from loguru import logger

from dispatch_k8s.controller.settings import ControllerSettings
from dispatch_k8s.core.rules.errors import BadInput
from dispatch_k8s.core.shell import runner
from dispatch_k8s.core.shell.literals import LogLevel
from dispatch_k8s.core.shell.settings import StepSettings, load_settings
from tests.support.lifecycle import BIN

TERMINAL_LINE: Final = re.compile(r"\d\d:\d\d:\d\d (DEBUG  |INFO   |WARNING|ERROR  ) \S.*")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@contextmanager
def _terminal(step: str, level: LogLevel = "info") -> Iterator[_Terminal]:
    """Logging configured as on a person's terminal, which the lines are kept from."""
    screen = _Terminal()
    # Set in the test's own phase: pytest's capture puts its own sys.stderr back between phases.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stderr", screen)
        runner.configure_logging(step, level=level)
        try:
            yield screen
        finally:
            logger.remove()


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        ([], "info"),
        (["-v"], "debug"),
        (["--log-level", "warning"], "warning"),
        (["--log-level=error"], "error"),
        (["-v", "--log-level", "error"], "error"),  # the last one given wins, as any flag
    ],
)
def test_the_log_level_is_a_flag_of_every_command(argv: list[str], level: str) -> None:
    for settings in (StepSettings, ControllerSettings):
        assert load_settings(settings, prog="p", argv=argv).log_level == level


def test_the_log_level_is_also_set_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISPATCH_LOG_LEVEL", "warning")
    assert load_settings(StepSettings, prog="p", argv=[]).log_level == "warning"
    assert load_settings(StepSettings, prog="p", argv=["-v"]).log_level == "debug"


def test_an_unknown_log_level_is_one_line_naming_the_flag() -> None:
    with pytest.raises(BadInput) as raised:
        load_settings(StepSettings, prog="p", argv=["--log-level", "loud"])
    message = str(raised.value)
    assert "\n" not in message
    assert "log-level" in message or "log_level" in message, message


def test_a_v_after_the_end_of_flags_is_left_alone() -> None:
    # Positional words are refused by the steps; what matters is that -v after `--` is
    # not rewritten into a flag of ours.
    with pytest.raises(BadInput, match="-v"):
        load_settings(StepSettings, prog="p", argv=["--", "-v"])


def test_a_terminal_shows_plain_lines_with_fields_and_no_source() -> None:
    with _terminal("hold") as terminal:
        logger.bind(trainjob="train-1", admission=2).warning("raised admission")
    (line,) = terminal.getvalue().splitlines()
    assert TERMINAL_LINE.fullmatch(line), line
    assert line.endswith(" WARNING raised admission trainjob=train-1 admission=2")
    assert ":" not in line.split(" ", 1)[1], "a source location (module:function:line) is shown"


def test_lines_below_the_level_are_not_written() -> None:
    with _terminal("hold", level="warning") as terminal:
        logger.info("hidden")
        logger.debug("hidden too")
        logger.error("shown")
    assert [line[9:] for line in terminal.getvalue().splitlines()] == ["ERROR   shown"]


def test_debug_lines_are_written_at_debug() -> None:
    with _terminal("hold", level="debug") as terminal:
        logger.debug("shown")
    assert terminal.getvalue().split(" ", 1)[1] == "DEBUG   shown\n"


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run a console script with its stderr on a pseudo-terminal, as a person would."""
    primary, secondary = pty.openpty()
    with open(os.devnull, "rb") as nothing:
        done = subprocess.run(
            argv, stdin=nothing, stdout=subprocess.DEVNULL, stderr=secondary, env=env, check=False
        )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # EIO: the terminal's other side is closed and everything was read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    return done.returncode, b"".join(chunks).decode()


def test_a_step_s_error_on_a_person_s_terminal_is_one_plain_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "kubeconfig"
    code, shown = _on_a_terminal(
        [str(BIN / "dispatch-hold"), "--name", "x", "--kubeconfig", str(missing)],
        env={"PATH": "/usr/bin:/bin"},
    )
    assert code == BadInput.exit_code
    lines = shown.splitlines()
    assert len(lines) == 1, shown
    assert TERMINAL_LINE.fullmatch(lines[0]), lines[0]
    assert f"ERROR   kubeconfig {missing} does not exist" in lines[0]
    assert "dispatch_k8s" not in shown, "a source location is shown"
