"""A command's --help and --version: what it does, each flag, the exit codes, an example."""

from __future__ import annotations

import textwrap
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


def exit_code_lines() -> list[str]:
    """Every exit code a step leaves with, and when (docs/cli.md: Exit codes)."""
    lines = [(0, "Done, including an idempotent no-op."), (1, "A bug: the traceback is on stderr.")]
    for error in (
        errors.BadInput,
        errors.PreconditionFailed,
        errors.NotFound,
        errors.Forbidden,
        errors.Refused,
        errors.Foreign,
        errors.Transient,
    ):
        lines.append((error.exit_code, (error.__doc__ or "").strip().splitlines()[0]))
    return [f"  {code:<4}{text}" for code, text in lines]


def render_help(cls: type[ClusterSettings], *, prog: str, about: str, example: str) -> str:
    """The step's --help: what it does, each flag (meaning, default, env), exit codes, example."""
    common = [name for name in StepSettings.model_fields if name in cls.model_fields]
    fields = [name for name in cls.model_fields if name not in common] + common
    required = [
        f"{flag_name(name)} {_extra(cls.model_fields[name], 'metavar') or 'VALUE'}"
        for name in fields
        if cls.model_fields[name].is_required()
    ]
    lines = [f"usage: {prog} {' '.join([*required, '[flags]'])}", ""]
    lines += [*about.strip().splitlines(), ""]
    over_file = ", and either over --request-file" if "request_file" in fields else ""
    header = f"flags (each also set by the environment variable named; a flag wins{over_file}):"
    lines.append(_indented(header, 0))
    for name in fields:
        info = cls.model_fields[name]
        metavar = _extra(info, "metavar")
        short = f"{SHORT_FLAGS[name]}, " if name in SHORT_FLAGS else ""
        flag = f"{short}{flag_name(name)}{f' {metavar}' if metavar else ''}"
        lines.append(f"  {flag}  (env {env_name(name)}{_env_form(info)})")
        default = _default_text(info)
        needed = default.startswith("required")
        ending = f"R{default[1:]}." if needed else f"Default: {default}."
        lines.append(_indented(f"{info.description or ''} {ending}", 6))
    lines += [
        f"  {VERBOSE}",
        _indented("Log at debug level: the same as --log-level debug.", 6),
        "  -h, --help",
        _indented("Show this help and exit.", 6),
        "  --version",
        _indented(f"Show the version of {DISTRIBUTION} and exit.", 6),
        "",
        "exit codes:",
        *exit_code_lines(),
        "",
        "example:",
        *(f"  {line}" for line in example.strip().splitlines()),
    ]
    return "\n".join(lines) + "\n"
