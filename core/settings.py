"""Settings from `DISPATCH_*` env and CLI flags (flags win), and request/runtime files."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any, ClassVar, NoReturn, TypeVar

import yaml
from pydantic import ValidationError
from pydantic_settings import BaseSettings, CliSettingsSource, SettingsConfigDict, SettingsError

from core.errors import BadInput
from core.request import (
    RequestError,
    RuntimeKind,
    StartRequest,
    describe_validation_error,
    parse_start_request,
)


class _OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line and exit 2 through BadInput."""

    def error(self, message: str) -> NoReturn:
        # The message quotes the argument, which may hold a line break of its own.
        one_line = " ".join(message.split())
        raise BadInput(f"{self.prog}: {one_line} (see --help)")


class StepSettings(BaseSettings):
    """What every step takes: where the cluster is and where results go."""

    # List flags whose every word is kept exactly as given: pydantic-settings would read
    # `--command a,b` as two words and `--command '[x]'` as JSON (DESIGN §2: no word of the
    # user command is ever re-parsed). Repeat the flag once per word.
    verbatim_lists: ClassVar[tuple[str, ...]] = ()

    model_config = SettingsConfigDict(
        env_prefix="DISPATCH_",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_exit_on_error=False,
        extra="ignore",
        frozen=True,
    )

    kubeconfig: Path | None = None
    context: str | None = None
    outputs_dir: Path | None = None


S = TypeVar("S", bound=StepSettings)


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


def load_settings(cls: type[S], *, prog: str, argv: list[str]) -> S:
    """Parse env and flags into `cls`; anything malformed is BadInput in one line."""
    argv, verbatim = take_verbatim(argv, cls.verbatim_lists, prog=prog)
    source: CliSettingsSource[S] = CliSettingsSource(cls, root_parser=_OneLineParser(prog=prog))
    try:
        settings = cls(_cli_settings_source=source(args=argv))
    except ValidationError as e:
        raise BadInput(f"{prog}: {describe_validation_error(e)}") from e
    except SettingsError as e:  # a value pydantic-settings could not even split or decode
        raise BadInput(f"{prog}: {' '.join(str(e).split())}") from e
    return settings.model_copy(update=verbatim) if verbatim else settings


def read_document(path: Path, *, what: str) -> dict[str, Any]:
    """Read one JSON or YAML mapping from `path`."""
    try:
        text = path.read_text()
    except OSError as e:
        raise BadInput(f"cannot read {what} {path}: {e.strerror}") from e
    try:
        document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        reason = str(e).splitlines()[0]
        raise BadInput(f"{what} {path} is not valid {path.suffix or 'YAML'}: {reason}") from e
    if not isinstance(document, dict):
        raise BadInput(f"{what} {path} must hold one mapping, not {type(document).__name__}")
    return document


def snake_case(key: str) -> str:
    """`jobId`, `job-id` and `job_id` all name the field `job_id`."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).replace("-", "_").lower()


class StartSettings(StepSettings):
    """`dispatch-start`: the request from a file, env or flags (in rising precedence)."""

    verbatim_lists: ClassVar[tuple[str, ...]] = ("command", "args")

    request_file: Path | None = None
    runtime_file: Path | None = None
    dry_run: bool = False

    job_id: str | None = None
    generation: int | None = None
    submission: int | None = None
    attempt: int | None = None
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    workdir: str | None = None
    runtime_kind: RuntimeKind | None = None
    runtime_name: str | None = None
    num_nodes: int | None = None
    resources_per_node: dict[str, dict[str, str | int]] | None = None
    queue: str | None = None
    priority_class: str | None = None
    namespace: str | None = None
    name: str | None = None

    def start_request(self, *, runtime_defaults: dict[str, str] | None = None) -> StartRequest:
        """Merge the request file, env and flags, and validate the result."""
        fields: dict[str, Any] = dict(runtime_defaults or {})
        if self.request_file is not None:
            document = read_document(self.request_file, what="request file")
            keys = [key for key in document if not isinstance(key, str)]
            if keys:  # YAML allows any key: 1, null, true
                raise BadInput(f"request file {self.request_file}: key {keys[0]!r} is not a name")
            fields.update({snake_case(key): value for key, value in document.items()})
        given = self.model_fields_set & set(StartRequest.model_fields)
        fields.update({key: getattr(self, key) for key in given})
        try:
            return parse_start_request(fields)
        except RequestError as e:
            raise BadInput(f"start request refused: {e}") from e


class TrainJobSettings(StepSettings):
    """A step that acts on one TrainJob."""

    namespace: str = "default"
    name: str


class AdmitSettings(TrainJobSettings):
    """`dispatch-admit`: raise A for the Workload's current reservation."""

    check: str = "dispatch-admission"
    wait: bool = False
    timeout: float = 300.0  # seconds --wait watches for an admission to act on


class ApproveSettings(StepSettings):
    """`dispatch-approve`: mark the check Ready for the reservation admit raised A for."""

    namespace: str = "default"
    workload: str
    workload_resource_version: str
    admission: int
    check: str = "dispatch-admission"
