"""docs/cli.md cannot drift from the code: its "Every flag" section is generated from what each
command's --help is written from (flags, env variables, defaults), each entry is checked in the
--help the installed console script prints, and its exit code table holds exactly the codes the
code leaves with. A renamed flag or a changed default fails here until the section is
regenerated (`DISPATCH_REGENERATE=1`, never in CI) and the diff reviewed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from dispatch_k8s.core.rules import doctor, errors, prologue
from dispatch_k8s.core.shell.settings.help import BUILT_IN_FLAGS, exit_codes, flag_entries
from tests.unit.test_help import STEPS, settings_of

REPO: Final = Path(__file__).resolve().parents[2]
CLI_DOC: Final = REPO / "docs" / "cli.md"
BIN: Final = Path(sys.executable).parent
GATES: Final = REPO / "bin" / "dispatch-kueue-gates"
PLUGIN: Final = "kubectl-dispatch"
BEGIN: Final = (
    "<!-- every-flag: generated from each command's --help by tests/unit/test_cli_reference.py; "
    "DISPATCH_REGENERATE=1 rewrites it -->"
)
END: Final = "<!-- every-flag: end -->"
# Outside a code span, what Markdown would read as markup: a table's cell, emphasis, HTML.
MARKUP: Final = re.compile(r"([\\*_|\[\]])")


def _cell(text: str) -> str:
    """`text` in one table cell, shown as written: markup escaped outside code spans."""
    parts = text.split("`")
    for at in range(0, len(parts), 2):
        escaped = MARKUP.sub(r"\\\1", parts[at])
        parts[at] = escaped.replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _help_of(*argv: str) -> str:
    done = subprocess.run(
        [*argv, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def reference() -> str:
    """The section: each command's flags, its env variable, meaning and default."""
    lines = [
        BEGIN,
        "",
        "Every command also takes "
        + ", ".join(
            f"`{flag}` ({meaning[0].lower()}{meaning[1:-1]})" for flag, meaning in BUILT_IN_FLAGS
        )
        + ". Each exits with one of these codes (`--help` lists them too):",
        "",
        *(f"- `{code}`: {_cell(text)}" for code, text in exit_codes()),
        "",
    ]
    for script in STEPS:
        lines += [
            f"### `{script}`",
            "",
            "| flag | env | meaning and default |",
            "|---|---|---|",
            *(
                f"| `{e.flag}` | `{e.env}`{e.env_form} | {_cell(e.meaning)} {_cell(e.default)} |"
                for e in flag_entries(settings_of(script))
            ),
            "",
        ]
    for name, words in (
        ("dispatch-kueue-gates", ["sh", str(GATES)]),
        (PLUGIN, [str(BIN / PLUGIN)]),
    ):
        lines += [
            f"### `{name}`",
            "",
            "```text",
            *_help_of(*words).rstrip("\n").splitlines(),
            "```",
            "",
        ]
    return "\n".join([*lines, END])


def _section(text: str) -> tuple[int, int]:
    begin, end = text.find(BEGIN), text.find(END)
    assert 0 <= begin < end, f"{CLI_DOC} has no section between {BEGIN!r} and {END!r}"
    return begin, end + len(END)


def test_every_flag_section_is_generated_from_each_command_s_help() -> None:
    text = CLI_DOC.read_text()
    begin, end = _section(text)
    generated = reference()
    if os.environ.get("DISPATCH_REGENERATE") and not os.environ.get("CI"):
        CLI_DOC.write_text(text[:begin] + generated + text[end:])
        text = CLI_DOC.read_text()
        begin, end = _section(text)
    assert text[begin:end] == generated, (
        f"{CLI_DOC}: the Every flag section differs from the commands' --help: review, then "
        "DISPATCH_REGENERATE=1 .venv/bin/pytest tests/unit/test_cli_reference.py"
    )


@pytest.mark.parametrize("script", STEPS)
def test_each_flag_of_the_reference_is_in_the_installed_command_s_help(script: str) -> None:
    shown = _help_of(str(BIN / script))
    for entry in flag_entries(settings_of(script)):
        assert f"  {entry.flag}  (env {entry.env}{entry.env_form})\n" in shown, entry.flag
        told = " ".join(shown.split())
        assert " ".join(f"{entry.meaning} {entry.default}".split()) in told, entry.flag
    for flag, meaning in BUILT_IN_FLAGS:
        assert f"  {flag}\n      {meaning}\n" in shown


def _table_codes(text: str) -> list[int]:
    """The codes of the table under `### Exit codes`, in order."""
    table = text.split("### Exit codes", 1)[1].split("\n\n", 2)[1]
    return [int(row.split("|")[1]) for row in table.splitlines()[2:]]


def test_the_exit_code_table_holds_exactly_the_codes_the_code_leaves_with() -> None:
    codes = _table_codes(CLI_DOC.read_text())
    steps = [code for code, _ in exit_codes()]
    assert codes == [*steps, doctor.CHECK_FAILED], "every step's code, in order, then doctor's"
    assert {cls.exit_code for cls in _subclasses(errors.DispatchError)} <= set(steps)
    assert prologue.EXIT_REFUSED not in codes  # the prologue's, told below the table
    assert f"{prologue.EXIT_REFUSED} is the prologue's" in CLI_DOC.read_text()


def _subclasses(cls: type[errors.DispatchError]) -> list[type[errors.DispatchError]]:
    return [cls, *(sub for child in cls.__subclasses__() for sub in _subclasses(child))]


def _value_words(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


@pytest.mark.parametrize("script", STEPS)
def test_each_default_written_in_words_names_the_code_s_default(script: str) -> None:
    """A default --help tells in words (`0: no deadline`) still names the value the code
    sets: changing the one without the other fails here, as the generated section cannot."""
    cls = settings_of(script)
    for name, info in cls.model_fields.items():
        extra = info.json_schema_extra
        written = extra.get("default_text") if isinstance(extra, dict) else None
        value = info.default
        if not written or not isinstance(value, str | int | float) or value == "":
            continue  # no words of its own, or no value to name (a factory, None, empty)
        shown = re.escape(_value_words(value))
        assert re.search(rf"(?<![\w.-]){shown}(?![\w.-])", str(written)), (name, written)
