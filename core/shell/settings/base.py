"""The settings every command shares, and those of the steps that act on one TrainJob or many.

A model that only one step takes lives beside that step (steps/); the controller's in
controller/settings.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, ClassVar, Final

from loguru import logger
from pydantic import AfterValidator, BeforeValidator, Field, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from dispatch_k8s.core.rules import names
from dispatch_k8s.core.rules.errors import BadInput
from dispatch_k8s.core.shell.gateway.kubeconfig import DEFAULT_NAMESPACE, resolve_namespace
from dispatch_k8s.core.shell.literals import DryRun, LogLevel, OutputFormat
from dispatch_k8s.core.shell.settings.flags import ENV_NAMES, ENV_PREFIX, doc, flag_name

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


def _refusing(problem: Callable[[str], str | None]) -> AfterValidator:
    """A validator that refuses a value as `problem` says why (core/rules/names.py)."""

    def check(value: str) -> str:
        told = problem(value)
        if told is not None:
            raise ValueError(told)
        return value

    return AfterValidator(check)


# Names checked as the API server checks them, so a bad one is exit 2 before any request.
Namespace = Annotated[str, _refusing(names.namespace_problem)]
TrainJobName = Annotated[str, _refusing(names.trainjob_name_problem)]
ObjectName = Annotated[str, _refusing(names.object_name_problem)]

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
        """The namespace when none is given, as kubectl resolves it (NAMESPACE_DEFAULT).

        Checked as a namespace given is: a kubeconfig may name any string.
        """
        namespace = resolve_namespace(kubeconfig=self.kubeconfig, context=self.context)
        problem = names.namespace_problem(namespace)
        if problem is not None:
            raise BadInput(f"the namespace of the kubeconfig's context: {problem}")
        return namespace


class ResultSettings(ClusterSettings):
    """What every step takes: where the cluster is and where results also go."""

    outputs_dir: Annotated[
        Path | None,
        doc(
            "Also write each field of the result to DIR/<field>, without a trailing newline "
            "(for Argo valueFrom.path and Tekton results).",
            metavar="DIR",
            default="none: the result goes to stdout only",
        ),
    ] = None


# --output is declared apart from --request-timeout so that a step that prints its results in
# a form of its own (status: a table) declares its own --output in this same place: a class on
# ResultSettings, before DeadlineSettings among its bases. The flags keep one order in every
# step (pydantic orders fields by the bases, the first declared first), in --help and in the
# errors of a command line with several bad flags.
class PrintedSettings(ResultSettings):
    """A step whose result the runner prints: in the format --output names."""

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


class DeadlineSettings(ResultSettings):
    """A step that connects: --request-timeout bounds it from then on."""

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


class StepSettings(DeadlineSettings, PrintedSettings):
    """What a step whose result the runner prints takes: its format, and the deadline."""


# DISPATCH_DRY_RUN was a boolean in earlier builds (start's alone): it still means the same.
_DRY_RUN_BOOLEAN: Final = {"true": "client", "1": "client", "false": "none", "0": "none"}


def _dry_run_from_boolean(value: object) -> object:
    return _DRY_RUN_BOOLEAN.get(value.lower(), value) if isinstance(value, str) else value


# What --dry-run takes in every step that writes: kubectl's words, and the former boolean.
DryRunFlag = Annotated[DryRun, BeforeValidator(_dry_run_from_boolean)]


class WritingSettings(StepSettings):
    """A step that writes: --dry-run says what becomes of its write."""

    dry_run: Annotated[
        DryRunFlag,
        doc(
            "As kubectl's: none writes; client reads and decides, then prints the result and "
            "the requests it would send (`requests`) and sends none; server sends the write "
            "with dryRun=All, so admission policies and webhooks answer (a refusal is exit 6) "
            "and nothing is persisted. --dry-run alone is client. A dry run posts no Event.",
            metavar="none|client|server",
            default="none",
        ),
    ] = "none"


NAMESPACE_DOC: Final = doc(
    "The TrainJob's namespace.", metavar="NAMESPACE", default=NAMESPACE_DEFAULT
)
CHECK_DOC: Final = doc(
    "The name of this project's AdmissionCheck, as the ClusterQueue lists it.",
    metavar="NAME",
    default="dispatch-admission",
)


class NamespacedSettings(DeadlineSettings):
    """A step that acts in one namespace: the one given, else the one kubectl would use."""

    namespace: Annotated[Namespace, NAMESPACE_DOC] = DEFAULT_NAMESPACE


class TrainJobSettings(NamespacedSettings, WritingSettings):
    """A step that writes one TrainJob."""

    name: Annotated[TrainJobName, doc("The TrainJob's name.", metavar="NAME", default="required")]


class TargetSettings(NamespacedSettings):
    """One TrainJob, or every dispatch-managed one of the namespace."""

    name: Annotated[
        TrainJobName | None,
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
