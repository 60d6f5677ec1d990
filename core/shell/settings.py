"""Settings from `DISPATCH_*` env and CLI flags (flags win), and request/runtime files."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, Literal, NoReturn, TypeVar, get_args

import yaml
from loguru import logger
from pydantic import BeforeValidator, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    CliSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from dispatch_k8s.core.rules import errors
from dispatch_k8s.core.rules.errors import BadInput
from dispatch_k8s.core.rules.request import (
    RequestError,
    RuntimeKind,
    StartRequest,
    parse_start_request,
)
from dispatch_k8s.core.shell.gateway.client import DryRun
from dispatch_k8s.core.shell.gateway.kubeconfig import DEFAULT_NAMESPACE, resolve_namespace


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


DISTRIBUTION: Final = "dispatch-k8s"
ENV_PREFIX: Final = "DISPATCH_"
# Fields whose env variable is not DISPATCH_<FIELD>, and the release from which DISPATCH_<FIELD>,
# read with a warning while the new name is unset, is no longer read (docs/cli.md: The start
# request). DISPATCH_ATTEMPT is what every training pod sees (core/rules/prologue.py): a start
# run in one would take the pod's for its own --attempt.
ENV_NAMES: Final = {"attempt": ("DISPATCH_START_ATTEMPT", "0.3.0")}
HELP_WIDTH: Final = 92


def doc(text: str, *, metavar: str = "", default: str = "") -> Any:
    """A flag's --help entry: what it means, its value's name, and its default in words."""
    return Field(description=text, json_schema_extra={"metavar": metavar, "default_text": default})


LogLevel = Literal["debug", "info", "warning", "error"]
OutputFormat = Literal["json", "yaml", "name"]
VERBOSE: Final = "-v"  # kubectl's short verbosity flag: here, --log-level debug
# kubectl's short flags that name a field, each shown beside its long flag in --help.
SHORT_FLAGS: Final = {"namespace": "-n", "selector": "-l", "output": "-o", "watch": "-w"}
# Go's durations, as kubectl's --request-timeout takes them: `1m30s`, `1.5h`, `500ms`.
_NUMBER: Final = r"\d+(?:\.\d*)?|\.\d+"
_DURATION_PART: Final = re.compile(rf"({_NUMBER})(ns|us|µs|μs|ms|s|m|h)")
_UNIT_NUMBER: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_duration(value: object) -> object:
    """Seconds from kubectl's duration (`30s`, `1m`, `0`) or a bare number of seconds."""
    if not isinstance(value, str):
        return value  # a number, from a default or a test: pydantic checks it
    text = value.strip()
    if re.fullmatch(_NUMBER, text):
        return float(text)
    if text and re.fullmatch(rf"(?:{_DURATION_PART.pattern})+", text):
        return sum(float(n) * _UNIT_NUMBER[unit] for n, unit in _DURATION_PART.findall(text))
    raise ValueError(f"{value!r} is no duration: give one as 30s, 1m30s or 0 (none), or seconds")


NAMESPACE_DEFAULT: Final = (
    "the kubeconfig context's namespace, else (in a pod) the ServiceAccount's namespace, "
    "else default"
)


class _Environment(EnvSettingsSource):
    """The env as `env_name` names each field, and DISPATCH_<FIELD> while that name is unset."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env = dict(super()._load_env_vars())  # names lower-cased: the settings ignore case
        for field, (name, until) in ENV_NAMES.items():
            if field not in self.settings_cls.model_fields:
                continue
            former = f"{ENV_PREFIX}{field.upper()}"
            given = env.pop(former.lower(), None)  # where the source looks the field up
            value = env.get(name.lower())
            if value is None and given is not None:
                logger.warning(
                    f"{former} is deprecated as {flag_name(field)}'s env variable (a training "
                    f"pod sees one of its own) and is not read from {until} on: set {name}"
                )
                value = given
            if value is not None:
                env[former.lower()] = value
        return env


class ClusterSettings(BaseSettings):
    """What every command takes: where the cluster is."""

    # List flags whose every word is kept exactly as given: pydantic-settings would read
    # `--command a,b` as two words and `--command '[x]'` as JSON (docs/design.md §2: no word of the
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

    kubeconfig: Annotated[
        Path | None,
        doc(
            "The kubeconfig file that names the cluster and the credentials.",
            metavar="FILE",
            default="in a pod (KUBERNETES_SERVICE_HOST set) the in-cluster config, else "
            "$KUBECONFIG, else ~/.kube/config",
        ),
    ] = None
    context: Annotated[
        str | None,
        doc(
            "The kubeconfig context to use.",
            metavar="NAME",
            default="the kubeconfig's current-context",
        ),
    ] = None
    log_level: Annotated[
        LogLevel,
        doc(
            "How much is logged on stderr: debug, info, warning or error (-v is debug).",
            metavar="LEVEL",
            default="info",
        ),
    ] = "info"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The env read by `env_name` (_Environment), the other sources as pydantic-settings'."""
        return init_settings, _Environment(settings_cls), dotenv_settings, file_secret_settings

    def default_namespace(self) -> str:
        """The namespace when none is given, as kubectl resolves it (NAMESPACE_DEFAULT)."""
        return resolve_namespace(kubeconfig=self.kubeconfig, context=self.context)


class StepSettings(ClusterSettings):
    """What every step takes: where the cluster is and where results go."""

    outputs_dir: Annotated[
        Path | None,
        doc(
            "Also write each field of the result to DIR/<field>, without a trailing newline "
            "(for Argo valueFrom.path and Tekton results).",
            metavar="DIR",
            default="none: the result goes to stdout only",
        ),
    ] = None
    output: Annotated[
        OutputFormat,
        doc(
            "How the result is printed on stdout, as kubectl's -o: json (one line per result), "
            "yaml (the same fields, one document per result) or name (the object acted on, "
            "as kubectl prints it: trainjob.trainer.kubeflow.org/NAME, one line per object). "
            "--outputs-dir writes the same files whichever.",
            metavar="FORMAT",
            default="json",
        ),
    ] = "json"
    request_timeout: Annotated[
        float,
        BeforeValidator(parse_duration),
        Field(ge=0),
        doc(
            "A deadline for the whole step, counted from when it connects: as kubectl's "
            "(30s, 1m, or a number of seconds). Once it passes, no request is sent and none "
            "is awaited any longer: the step exits 75, run it again.",
            metavar="DURATION",
            default="0: no deadline (each request still times out on its own)",
        ),
    ] = 0.0


# DISPATCH_DRY_RUN was a boolean in earlier builds (start's alone): it still means the same.
_DRY_RUN_BOOLEAN: Final = {"true": "client", "1": "client", "false": "none", "0": "none"}


def _dry_run_from_boolean(value: object) -> object:
    return _DRY_RUN_BOOLEAN.get(value.lower(), value) if isinstance(value, str) else value


class WritingSettings(StepSettings):
    """A step that writes: --dry-run says what becomes of its write."""

    dry_run: Annotated[
        DryRun,
        BeforeValidator(_dry_run_from_boolean),
        doc(
            "As kubectl's: none writes; client reads and decides, then prints the result and "
            "the requests it would send (`requests`) and sends none; server sends the write "
            "with dryRun=All, so admission policies and webhooks answer (a refusal is exit 6) "
            "and nothing is persisted. --dry-run alone is client. A dry run posts no Event.",
            metavar="none|client|server",
            default="none",
        ),
    ] = "none"


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


def version_text(prog: str) -> str:
    """`dispatch-hold (dispatch-k8s) 0.1.0`: the installed distribution's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version(DISTRIBUTION)
    except PackageNotFoundError:
        installed = "unknown (not installed)"
    return f"{prog} ({DISTRIBUTION}) {installed}\n"


def env_name(field: str) -> str:
    """The environment variable that sets a field: DISPATCH_<FIELD>, unless ENV_NAMES says."""
    return ENV_NAMES[field][0] if field in ENV_NAMES else f"{ENV_PREFIX}{field.upper()}"


def flag_name(field: str) -> str:
    """The flag that sets a field: --<field in kebab-case>."""
    return "--" + field.replace("_", "-")


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


def read_document(path: Path, *, what: str) -> dict[str, Any]:
    """Read one JSON or YAML mapping, in UTF-8, from `path`."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise BadInput(f"cannot read {what} {path}: {e.strerror}") from e
    try:
        text = data.decode()
    except UnicodeDecodeError as e:  # not the locale's: a file made elsewhere reads the same
        raise BadInput(f"{what} {path} is not UTF-8: {e.reason} at byte {e.start}") from e
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


class StartSettings(WritingSettings):
    """`dispatch-start`: the request from a file, env or flags (in rising precedence)."""

    verbatim_lists: ClassVar[tuple[str, ...]] = ("command", "args")

    request_file: Annotated[
        Path | None,
        doc(
            "A JSON or YAML file holding the start request (keys snake_case, camelCase or "
            "kebab-case); env and flags override its fields.",
            metavar="FILE",
            default="none",
        ),
    ] = None
    runtime_file: Annotated[
        Path | None,
        doc(
            "With --dry-run=client: the (Cluster)TrainingRuntime as a JSON or YAML file, read "
            "instead of the cluster's; it names the runtime unless the request does.",
            metavar="FILE",
            default="none",
        ),
    ] = None
    dry_run: Annotated[
        DryRun,
        BeforeValidator(_dry_run_from_boolean),
        doc(
            "client prints the TrainJob that would be created and contacts no cluster (needs "
            "--runtime-file); server reads as a real start does and sends each create (the "
            "ledger's records, the TrainJob) with dryRun=All, so admission policies and "
            "webhooks answer (a refusal is exit 6) and nothing is persisted; none creates. "
            "--dry-run alone is client, --no-dry-run none.",
            metavar="none|client|server",
            default="none",
        ),
    ] = "none"

    job_id: Annotated[
        str | None,
        doc(
            "The job's ID: 1-128 of [A-Za-z0-9._-], starting with a letter or digit.",
            metavar="ID",
            default="required: here, in its env variable or in --request-file",
        ),
    ] = None
    generation: Annotated[
        int | None,
        doc(
            "The job generation G, >= 0: the epoch's leading digits, G x 10^12.",
            metavar="G",
            default="required: here, in its env variable or in --request-file",
        ),
    ] = None
    submission: Annotated[
        int | None,
        doc(
            "The submission number N, 0 <= N < 1000000: the epoch's middle digits; "
            "G x 10^6 + N must be at least 1.",
            metavar="N",
            default="required: here, in its env variable or in --request-file",
        ),
    ] = None
    attempt: Annotated[
        int | None,
        doc(
            "The attempt number, >= 0: the job sees DISPATCH_ATTEMPT <ID>.<N>.<attempt>.<A>.<J>.",
            metavar="ATTEMPT",
            default="required: here, in its env variable or in --request-file",
        ),
    ] = None
    image: Annotated[
        str | None,
        doc(
            "The training image.",
            metavar="IMAGE",
            default="required: here, in its env variable or in --request-file",
        ),
    ] = None
    command: Annotated[
        list[str] | None,
        doc(
            "One word of the training command; repeat the flag once per word (--command python "
            "--command train.py). Each word is kept exactly as given; an image ENTRYPOINT "
            "cannot be wrapped, so a command is needed.",
            metavar="WORD",
            default="required: here, in its env variable or in --request-file",
        ),
    ] = None
    args: Annotated[
        list[str] | None,
        doc(
            "One argument after the command; repeat once per word (--args=--lr --args=0.1). "
            "Passed untouched in spec.trainer.args.",
            metavar="WORD",
            default="none",
        ),
    ] = None
    env: Annotated[
        dict[str, str] | None,
        doc(
            "One environment variable of the job; repeat once per variable. Names are "
            "[A-Za-z_][A-Za-z0-9_]*; DISPATCH_* names are refused.",
            metavar="KEY=VALUE",
            default="none",
        ),
    ] = None
    workdir: Annotated[
        str | None,
        doc(
            "The absolute directory the prologue enters before the command runs.",
            metavar="DIR",
            default="the image's",
        ),
    ] = None
    runtime_kind: Annotated[
        RuntimeKind | None,
        doc(
            "The kind of the runtime: ClusterTrainingRuntime or TrainingRuntime.",
            metavar="KIND",
            default="ClusterTrainingRuntime",
        ),
    ] = None
    runtime_name: Annotated[
        str | None,
        doc(
            "The dispatch-ready runtime the job runs on (start refuses one that is not).",
            metavar="NAME",
            default="required, unless --runtime-file names it",
        ),
    ] = None
    num_nodes: Annotated[
        int | None,
        doc("The number of nodes, >= 1.", metavar="N", default="the runtime's"),
    ] = None
    resources_per_node: Annotated[
        dict[str, dict[str, str | int]] | None,
        doc(
            'Resources of each node\'s trainer container, as JSON: \'{"requests":{"cpu":"1"}}\' '
            "(limits and requests). In Kueue mode the pods must request something.",
            metavar="JSON",
            default="the runtime's",
        ),
    ] = None
    queue: Annotated[
        str | None,
        doc(
            "A Kueue LocalQueue: Kueue mode, where dispatch-admit and dispatch-approve gate "
            "every admission.",
            metavar="NAME",
            default="none: plain mode (dispatch-unsuspend opens the job)",
        ),
    ] = None
    priority_class: Annotated[
        str | None,
        doc("A Kueue WorkloadPriorityClass (needs --queue).", metavar="NAME", default="none"),
    ] = None
    namespace: Annotated[
        str | None,
        doc(
            "The namespace the TrainJob is made in.", metavar="NAMESPACE", default=NAMESPACE_DEFAULT
        ),
    ] = None
    name: Annotated[
        str | None,
        doc(
            "The TrainJob's name, a DNS-1035 label.",
            metavar="NAME",
            default="<slug of the job ID>-<hash of job ID, G, N and attempt>",
        ),
    ] = None

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
        if "namespace" not in fields:  # neither the file, the env nor a flag names one
            fields["namespace"] = self.default_namespace()
        try:
            return parse_start_request(fields)
        except RequestError as e:
            cause = e.__cause__  # each field of the request is a flag of start's
            told = (
                describe_settings_error(cause, request_file=True)
                if isinstance(cause, ValidationError)
                else str(e)
            )
            raise BadInput(f"start request refused: {told}") from e


NAMESPACE_DOC: Final = doc(
    "The TrainJob's namespace.", metavar="NAMESPACE", default=NAMESPACE_DEFAULT
)
CHECK_DOC: Final = doc(
    "The name of this project's AdmissionCheck, as the ClusterQueue lists it.",
    metavar="NAME",
    default="dispatch-admission",
)


class NamespacedSettings(StepSettings):
    """A step that acts in one namespace: the one given, else the one kubectl would use."""

    namespace: Annotated[str, NAMESPACE_DOC] = DEFAULT_NAMESPACE


class TrainJobSettings(NamespacedSettings, WritingSettings):
    """A step that writes one TrainJob."""

    name: Annotated[str, doc("The TrainJob's name.", metavar="NAME", default="required")]


class TargetSettings(NamespacedSettings):
    """One TrainJob, or every dispatch-managed one of the namespace."""

    name: Annotated[
        str | None,
        doc(
            "The TrainJob to audit.",
            metavar="NAME",
            default="none: give this, --all or --selector",
        ),
    ] = None
    all: Annotated[
        bool,
        doc(
            "Audit every TrainJob of the namespace that dispatch-start made, in one pass: one "
            "result line each, exit 7 if any is flagged.",
            default="off",
        ),
    ] = False
    selector: Annotated[
        str | None,
        doc(
            "As --all, for the TrainJobs that match this label selector (as kubectl -l).",
            metavar="SELECTOR",
            default="none",
        ),
    ] = None

    @model_validator(mode="after")
    def _one_target(self) -> TargetSettings:
        given = [self.name is not None, self.all, self.selector is not None]
        if sum(given) != 1:
            raise ValueError("give exactly one of --name, --all and --selector")
        return self


class AuditSettings(TargetSettings, WritingSettings):
    """`dispatch-audit`: audit one TrainJob or a namespace's, each with at most one update."""


class StatusSettings(TargetSettings):
    """`dispatch-status`: what one TrainJob, or every dispatch-managed one, is at, read-only."""

    name: Annotated[
        str | None,
        doc(
            "The TrainJob to show.", metavar="NAME", default="none: give this, --all or --selector"
        ),
    ] = None
    all: Annotated[
        bool,
        doc("Show every TrainJob of the namespace that dispatch-start made.", default="off"),
    ] = False
    # A table, as kubectl get prints, where the steps print a result: a format of its own.
    output: Annotated[
        Literal["table", "json", "yaml"],
        doc(
            "table (as kubectl get: a header, one row per job), json (one object per job, "
            "one a line) or yaml (one document per job).",
            metavar="table|json|yaml",
            default="table, on a terminal or not (as kubectl)",
        ),
    ] = "table"  # type: ignore[assignment]
    watch: Annotated[
        bool,
        doc(
            "After the jobs, watch them and print a job again each time its TrainJob changes, "
            "until interrupted (Ctrl-C ends it with 0).",
            default="off",
        ),
    ] = False
    check: Annotated[str, CHECK_DOC] = "dispatch-admission"


class AdmitSettings(TrainJobSettings):
    """`dispatch-admit`: raise A for the Workload's current reservation."""

    check: Annotated[str, CHECK_DOC] = "dispatch-admission"
    wait: Annotated[
        bool,
        doc(
            "Wait for a reservation to act on (list, then watch) and for the last execution's "
            "Jobs to drain, instead of refusing (6); --no-wait turns it off.",
            default="off",
        ),
    ] = False
    timeout: Annotated[
        float,
        doc(
            "With --wait: how long to wait before giving up with exit 75.",
            metavar="SECONDS",
            default="300",
        ),
    ] = 300.0


class ApproveSettings(NamespacedSettings, WritingSettings):
    """`dispatch-approve`: mark the check Ready for the reservation admit raised A for."""

    namespace: Annotated[
        str, doc("The Workload's namespace.", metavar="NAMESPACE", default=NAMESPACE_DEFAULT)
    ] = DEFAULT_NAMESPACE
    workload: Annotated[
        str,
        doc(
            "The Workload dispatch-admit raised A for (its `workload` result).",
            metavar="NAME",
            default="required",
        ),
    ]
    workload_resource_version: Annotated[
        str,
        doc(
            "The Workload's resourceVersion dispatch-admit read (its `workloadResourceVersion` "
            "result): the approval is preconditioned on it, so it lands on that very "
            "reservation or not at all (exit 3).",
            metavar="VERSION",
            default="required",
        ),
    ]
    admission: Annotated[
        int,
        doc(
            "The A dispatch-admit raised (its `admission` result); it must equal the "
            "TrainJob's admission floor.",
            metavar="A",
            default="required",
        ),
    ]
    check: Annotated[str, CHECK_DOC] = "dispatch-admission"


class ControllerSettings(ClusterSettings):
    """`dispatch-admission-controller`: gate every Workload of this project's checks, audit."""

    namespaces: Annotated[
        list[str],
        doc(
            "Gate the Workloads (and audit the TrainJobs) of these namespaces only (repeat the "
            "flag, or a comma-separated list); the controller then lists and watches each "
            "namespace, and needs Workload (and auditor) RBAC only there.",
            metavar="NAMESPACE",
            default="every namespace",
        ),
    ] = []
    workers: Annotated[
        int,
        doc(
            "How many Workloads are gated at once (each Workload by one worker at a time).",
            metavar="N",
        ),
    ] = 4
    resync_seconds: Annotated[
        float,
        doc(
            "How often every Workload (and, auditing, every managed TrainJob, JobSet, Job and "
            "pod) is listed and looked at again, whatever the watch said.",
            metavar="SECONDS",
        ),
    ] = 60.0
    audit: Annotated[
        bool,
        doc(
            "Audit every TrainJob labelled app.kubernetes.io/managed-by=dispatch-k8s as it, "
            "its JobSet, Jobs or pods change (the audit dispatch-audit makes): record each "
            "J and execution as it begins, flag findings foreign with a Warning Event, never "
            "stop a job; needs the auditor's RBAC (list and watch TrainJobs, JobSets, Jobs and "
            "pods). --no-audit turns it off.",
            default="on",
        ),
    ] = True
    audit_workers: Annotated[
        int,
        doc(
            "How many TrainJobs are audited at once (each TrainJob by one worker at a time).",
            metavar="N",
        ),
    ] = 2
    other_workloads: Annotated[
        Literal["approve", "leave"],
        doc(
            "A Workload of the check that is not a dispatch-managed TrainJob (a plain Job, "
            "another team's TrainJob): `approve` marks the check Ready at once, with a "
            "message saying nothing was raised; `leave` leaves it Pending for someone else.",
            metavar="approve|leave",
        ),
    ] = "approve"
    on_refusal: Annotated[
        Literal["reject", "retry", "wait"],
        doc(
            "What a reservation of a dispatch TrainJob that no wait can approve gets (the job "
            "flagged foreign, MultiKueue, a garbled counter, R past its bound, another check "
            "setting A): `reject` sets the check Rejected (Kueue deactivates the Workload and "
            "releases its quota; a person fixes the job and sets the Workload's spec.active "
            "true again); `retry` sets Retry (Kueue releases the quota and queues the Workload "
            "again 60 s later, to be refused again until fixed); `wait` leaves it Pending, "
            "holding the quota. The reason is the check's message either way.",
            metavar="reject|retry|wait",
        ),
    ] = "reject"
    kube_api_qps: Annotated[
        float,
        doc(
            "Requests a second the leader's work sends the API server at most, over all its "
            "threads (a token bucket, as client-go's); 0 turns the limit off. The Lease's "
            "renewals are never held back by it.",
            metavar="QPS",
        ),
    ] = 100.0
    kube_api_burst: Annotated[
        int,
        doc(
            "Requests sent at once, beyond --kube-api-qps, after a quiet spell.",
            metavar="N",
        ),
    ] = 200
    address: Annotated[
        str,
        doc(
            "Where /metrics (Prometheus), /healthz and /readyz are served, HOST:PORT.",
            metavar="HOST:PORT",
        ),
    ] = "127.0.0.1:8080"
    metrics_address: Annotated[
        str,
        doc(
            "Serve /metrics here over TLS instead of on --address, each scrape's bearer token "
            "reviewed by the API server and its user allowed get on /metrics (RBAC "
            "nonResourceURLs), as controller-runtime's secure metrics; needs create on "
            "tokenreviews and subjectaccessreviews.",
            metavar="HOST:PORT",
            default="none: /metrics on --address, plain HTTP",
        ),
    ] = ""
    metrics_cert_dir: Annotated[
        Path | None,
        doc(
            "tls.crt and tls.key for --metrics-address (cert-manager's layout).",
            metavar="DIR",
            default="a certificate made at start, signed by its own key",
        ),
    ] = None
    lease_namespace: Annotated[
        str,
        doc(
            "The namespace of the leader-election Lease (the controller's own).",
            metavar="NAMESPACE",
        ),
    ] = "dispatch-system"
    lease_name: Annotated[str, doc("The name of the leader-election Lease.", metavar="NAME")] = (
        "dispatch-admission-controller"
    )
    identity: Annotated[
        str,
        doc(
            "This replica's name in the Lease (the pod's name in the shipped Deployment).",
            metavar="NAME",
            default="the host name and a random suffix",
        ),
    ] = ""
    lease_seconds: Annotated[
        int,
        doc(
            "How long a Lease not renewed stays with its holder before another replica takes "
            "it; the leader renews every third of it and stops leading when it could not "
            "renew for two thirds.",
            metavar="SECONDS",
        ),
    ] = 15
