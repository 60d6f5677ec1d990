"""Flags and `DISPATCH_*` env into a settings model (flags win); anything malformed one line.

Before pydantic-settings reads argv: the words of verbatim list flags are taken out as given,
and kubectl's short forms are spelled long.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TypeVar, get_args

from pydantic import ValidationError
from pydantic_settings import CliSettingsSource, SettingsError

from dispatch_k8s.core.rules.errors import BadInput
from dispatch_k8s.core.shell.literals import DryRun
from dispatch_k8s.core.shell.settings.base import ClusterSettings, NamespacedSettings
from dispatch_k8s.core.shell.settings.flags import (
    ENV_NAMES,
    ENV_PREFIX,
    SHORT_FLAGS,
    VERBOSE,
    env_name,
    flag_name,
)
from dispatch_k8s.core.shell.settings.help import render_help, version_text


class _OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line and exit 2 through BadInput."""

    def error(self, message: str) -> NoReturn:
        # The message quotes the argument, which may hold a line break of its own.
        one_line = " ".join(message.split())
        raise BadInput(f"{self.prog}: {one_line} (see --help)")


class _PrintAndExit(argparse.Action):
    """`--help` and `--version`: print a text made only when asked for, exit 0."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, text: Any, **_: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs=0)
        self.text = text

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        sys.stdout.write(self.text())
        parser.exit()


S = TypeVar("S", bound=ClusterSettings)


def take_verbatim(
    argv: list[str], flags: tuple[str, ...], *, prog: str
) -> tuple[list[str], dict[str, list[str]]]:
    """Split `--flag WORD` / `--flag=WORD` of `flags` out of argv, each WORD untouched."""
    rest: list[str] = []
    taken: dict[str, list[str]] = {}
    words = iter(argv)
    for word in words:
        if word == "--":  # argparse's end of options: nothing after it is a flag
            rest += [word, *words]
            break
        name, equals, value = word.partition("=")
        field = name.removeprefix("--").replace("-", "_")
        if not name.startswith("--") or field not in flags:
            rest.append(word)
            continue
        if not equals:
            following = next(words, None)
            if following is None:
                raise BadInput(f"{prog}: argument {name}: expected one argument (see --help)")
            value = following
        taken.setdefault(field, []).append(value)
    return rest, taken


def _short_forms_spelled_long(argv: list[str], fields: set[str]) -> list[str]:
    """Before any `--`, kubectl's short flags spelled long: `-v` and those of `fields`.

    `-v` is `--log-level debug`; `-n NS`, `-n=NS` and `-nNS` (as kubectl takes them) are
    `--namespace NS`. With a `dry_run` field, a bare `--dry-run` is `--dry-run=client`, as
    kubectl's deprecated form, and `--no-dry-run` (earlier builds' boolean) `--dry-run=none`.
    """
    long_of = {short: flag_name(field) for field, short in SHORT_FLAGS.items() if field in fields}
    end = argv.index("--") if "--" in argv else len(argv)
    dry_run = "dry_run" in fields
    flags: list[str] = []
    for at, word in enumerate(argv[:end]):
        short, rest = word[:2], word[2:]
        following = argv[at + 1] if at + 1 < end else None
        if word == VERBOSE:
            flags.append("--log-level=debug")
        elif dry_run and word == "--dry-run" and following not in get_args(DryRun):
            flags.append("--dry-run=client")
        elif dry_run and word == "--no-dry-run":
            flags.append("--dry-run=none")
        elif short in long_of:
            flags.append(f"{long_of[short]}={rest.removeprefix('=')}" if rest else long_of[short])
        else:
            flags.append(word)
    return flags + argv[end:]


def _is_utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _check_utf8(cls: type[ClusterSettings], argv: list[str], *, prog: str) -> None:
    """BadInput for a flag word, or a variable `cls` reads, that is not UTF-8.

    Python hands such bytes over as lone surrogates, which pass every check of a str and then
    fail where the value is printed or sent: refused here, named (escaped) in one line.
    """
    for word in argv:
        if not _is_utf8(word):
            raise BadInput(f"{prog}: argument {word!r} is not UTF-8")
    read = {env_name(field) for field in cls.model_fields}
    read |= {f"{ENV_PREFIX}{field.upper()}" for field in ENV_NAMES if field in cls.model_fields}
    for name, value in os.environ.items():
        if name.upper() in read and not _is_utf8(value):  # the settings ignore the name's case
            raise BadInput(f"{prog}: env {name} {value!r} is not UTF-8")


def load_settings(
    cls: type[S], *, prog: str, argv: list[str], about: str = "", example: str = ""
) -> S:
    """Parse env and flags into `cls`; anything malformed is BadInput in one line.

    `--help` prints `render_help` (with `about` and `example`) and `--version` the
    distribution's version, each exiting 0.
    """
    _check_utf8(cls, argv, prog=prog)
    # The verbatim words first: `--args -n` is a word of the job's, not a short flag.
    argv, verbatim = take_verbatim(argv, cls.verbatim_lists, prog=prog)
    argv = _short_forms_spelled_long(argv, set(cls.model_fields))
    # As kubectl: a flag is written whole; a prefix of one (`--namespac`) is an error.
    parser = _OneLineParser(prog=prog, add_help=False, allow_abbrev=False)
    parser.add_argument(
        "-h",
        "--help",
        action=_PrintAndExit,
        text=lambda: render_help(cls, prog=prog, about=about, example=example),
    )
    parser.add_argument("--version", action=_PrintAndExit, text=lambda: version_text(prog))
    source: CliSettingsSource[S] = CliSettingsSource(cls, root_parser=parser)
    try:
        settings = cls(_cli_settings_source=source(args=argv))
    except ValidationError as e:
        raise BadInput(f"{prog}: {describe_settings_error(e)}") from e
    except SettingsError as e:  # a value pydantic-settings could not even split or decode
        raise BadInput(f"{prog}: {' '.join(str(e).split())}") from e
    updates: dict[str, Any] = dict(verbatim)
    if isinstance(settings, NamespacedSettings) and "namespace" not in settings.model_fields_set:
        updates["namespace"] = settings.default_namespace()
    return settings.model_copy(update=updates) if updates else settings


def describe_settings_error(error: ValidationError, *, request_file: bool = False) -> str:
    """One line naming each bad setting by its flag and env variable.

    `--name (env DISPATCH_NAME) is required`; with `request_file`, its key there too.
    """
    parts = []
    for item in error.errors():
        message = item["msg"].removeprefix("Value error, ")
        where = [str(part) for part in item["loc"]]
        if not where:  # a rule over several flags, which names them itself
            parts.append(message)
            continue
        in_file = f", or {where[0]} in --request-file" if request_file else ""
        named = f"{flag_name(where[0])} (env {env_name(where[0])}{in_file})"
        inside = ".".join(where[1:])  # a key or item of a list or mapping flag
        if item["type"] == "missing":
            parts.append(f"{named} is required")
        else:
            parts.append(f"{named}: {f'{inside}: ' if inside else ''}{message}")
    return "; ".join(parts).replace("\n", " ")
