"""A command's --help and --version: what it does, each flag, the exit codes, an example."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Final

from pydantic.fields import FieldInfo

from dispatch_k8s.core.rules import errors
from dispatch_k8s.core.shell.settings.base import ClusterSettings, StepSettings
from dispatch_k8s.core.shell.settings.flags import (
    DISTRIBUTION,
    SHORT_FLAGS,
    VERBOSE,
    env_name,
    flag_name,
)

HELP_WIDTH: Final = 92


def version_text(prog: str) -> str:
    """`dispatch-hold (dispatch-k8s) 0.1.0`: the installed distribution's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version(DISTRIBUTION)
    except PackageNotFoundError:
        installed = "unknown (not installed)"
    return f"{prog} ({DISTRIBUTION}) {installed}\n"


def _extra(info: FieldInfo, key: str) -> str:
    extra = info.json_schema_extra
    value = extra.get(key) if isinstance(extra, dict) else None
    return value if isinstance(value, str) else ""


def _default_text(info: FieldInfo) -> str:
    written = _extra(info, "default_text")
    if written:
        return written
    if info.is_required():
        return "required"
    default = info.default
    if default is None:
        return "none"
    if isinstance(default, bool):
        return "on" if default else "off"
    return f"{default:g}" if isinstance(default, float) else str(default)


def _env_form(info: FieldInfo) -> str:
    """How the environment variable spells a list or a mapping: as JSON."""
    shown = str(info.annotation)
    if "list[" in shown:
        return ", a JSON list"
    if "dict[" in shown:
        return ", a JSON object"
    return ""


def _indented(text: str, indent: int) -> str:
    return textwrap.fill(
        text,
        width=HELP_WIDTH,
        initial_indent=" " * indent,
        subsequent_indent=" " * indent,
        break_on_hyphens=False,  # never split a flag or a character class
        break_long_words=False,
    )


def exit_codes() -> list[tuple[int, str]]:
    """Every exit code a step leaves with, and when: its error class's (docs/cli.md: Exit codes)."""
    codes = [(0, "Done, including an idempotent no-op."), (1, "A bug: the traceback is on stderr.")]
    for error in (
        errors.BadInput,
        errors.PreconditionFailed,
        errors.NotFound,
        errors.Forbidden,
        errors.Refused,
        errors.Foreign,
        errors.NotOpened,
        errors.NotHeld,
        errors.Transient,
    ):
        codes.append((error.exit_code, (error.__doc__ or "").strip().splitlines()[0]))
    return codes


@dataclass(frozen=True, slots=True, kw_only=True)
class FlagEntry:
    """One flag as --help tells it (and docs/cli.md's generated reference)."""

    flag: str  # `-n, --namespace NAMESPACE`
    env: str  # `DISPATCH_NAMESPACE`
    env_form: str  # how the variable spells a list or a mapping: `, a JSON list`
    meaning: str
    default: str  # `Default: …` or `Required…`, in words
    required: bool


def flag_entries(cls: type[ClusterSettings]) -> list[FlagEntry]:
    """Each flag of `cls`, its own first and the shared ones (StepSettings') after, in order."""
    common = [name for name in StepSettings.model_fields if name in cls.model_fields]
    fields = [name for name in cls.model_fields if name not in common] + common
    entries = []
    for name in fields:
        info = cls.model_fields[name]
        metavar = _extra(info, "metavar")
        short = f"{SHORT_FLAGS[name]}, " if name in SHORT_FLAGS else ""
        default = _default_text(info)
        needed = default.startswith("required")
        entries.append(
            FlagEntry(
                flag=f"{short}{flag_name(name)}{f' {metavar}' if metavar else ''}",
                env=env_name(name),
                env_form=_env_form(info),
                meaning=info.description or "",
                default=f"R{default[1:]}." if needed else f"Default: {default}.",
                required=info.is_required(),
            )
        )
    return entries


# The flags every command takes beside its settings, as --help tells them.
BUILT_IN_FLAGS: Final = (
    (VERBOSE, "Log at debug level: the same as --log-level debug."),
    ("-h, --help", "Show this help and exit."),
    ("--version", f"Show the version of {DISTRIBUTION} and exit."),
)


def render_help(cls: type[ClusterSettings], *, prog: str, about: str, example: str) -> str:
    """The step's --help: what it does, each flag (meaning, default, env), exit codes, example."""
    entries = flag_entries(cls)
    required = [entry.flag.split(", ")[-1] for entry in entries if entry.required]
    lines = [f"usage: {prog} {' '.join([*required, '[flags]'])}", ""]
    lines += [*about.strip().splitlines(), ""]
    over_file = ", and either over --request-file" if "request_file" in cls.model_fields else ""
    header = f"flags (each also set by the environment variable named; a flag wins{over_file}):"
    lines.append(_indented(header, 0))
    for entry in entries:
        lines.append(f"  {entry.flag}  (env {entry.env}{entry.env_form})")
        lines.append(_indented(f"{entry.meaning} {entry.default}", 6))
    for flag, meaning in BUILT_IN_FLAGS:
        lines += [f"  {flag}", _indented(meaning, 6)]
    lines += [
        "",
        "exit codes:",
        *(f"  {code:<4}{text}" for code, text in exit_codes()),
        "",
        "example:",
        *(f"  {line}" for line in example.strip().splitlines()),
    ]
    return "\n".join(lines) + "\n"
