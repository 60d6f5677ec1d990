"""The step runner: a console script's settings in, logs on stderr, results out, its exit code."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NoReturn, TypeVar

import yaml
from loguru import logger

from dispatch_k8s.core.rules.errors import BadInput, DispatchError
from dispatch_k8s.core.shell.gateway import Gateway, kinds
from dispatch_k8s.core.shell.literals import DryRun, LogLevel, OutputFormat
from dispatch_k8s.core.shell.settings import (
    DeadlineSettings,
    StepSettings,
    TrainJobSettings,
    WritingSettings,
    load_settings,
)

Result = Mapping[str, Any]
S = TypeVar("S", bound=StepSettings)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """A step's outcome over many objects: a result line each, then how the whole run ends.

    `summary` is what --outputs-dir writes; `error`, when set, is the exit code after every
    line was written (a flagged job among many still shows every other job's line).
    """

    lines: Sequence[Result]
    summary: Result
    error: DispatchError | None = None


TERMINATION_LOG: Final = Path("/dev/termination-log")


def _json_sink(message: Any) -> None:
    record = message.record
    line = {
        "time": record["time"].isoformat(),
        "level": record["level"].name,
        "message": record["message"],
        **record["extra"],
    }
    sys.stderr.write(json.dumps(line, default=str) + "\n")


def _terminal_sink(message: Any) -> None:
    """One line a person reads: time, level, message and its fields, no source location."""
    record = message.record
    fields = "".join(f" {key}={value}" for key, value in record["extra"].items() if key != "step")
    when = record["time"].strftime("%H:%M:%S")
    sys.stderr.write(f"{when} {record['level'].name:<7} {record['message']}{fields}\n")


class _LibraryLogs(logging.Handler):
    """What libraries log (the kubernetes client, urllib3) and Python's warnings, as debug lines.

    Left to themselves they print plain text on stderr among the step's JSON lines: Python's
    last-resort handler prints a library's warnings, and the kubernetes client's first
    `logging.error` installs a handler that prints everything after it. Each is the step's
    own line instead, at debug (-v), named by its logger.
    """

    def emit(self, record: logging.LogRecord) -> None:
        logger.bind(library=record.name).debug(record.getMessage())


def configure_logging(step: str, *, level: LogLevel = "info", dry_run: DryRun = "none") -> None:
    """JSON lines on stderr for machines, one plain line each on a terminal; `level` and up.

    Under a dry run every line says so: "raised admission" tells what would have been done.
    Nothing else is written on stderr: libraries' logs and warnings go through `_LibraryLogs`.
    """
    logger.remove()
    sink = _terminal_sink if sys.stderr.isatty() else _json_sink
    logger.add(sink, level=level.upper())
    logger.configure(extra={"step": step, **({"dryRun": dry_run} if dry_run != "none" else {})})
    root = logging.getLogger()
    if not any(isinstance(handler, _LibraryLogs) for handler in root.handlers):
        root.addHandler(_LibraryLogs())
    root.setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
    logging.captureWarnings(True)


def field_text(value: Any) -> str:
    """How one result field is written to its own file: strings bare, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def prepare_outputs_dir(outputs_dir: Path) -> None:
    """Make sure results can be written before the step writes to the cluster."""
    try:
        outputs_dir.mkdir(parents=True, exist_ok=True)
        probe = outputs_dir / ".dispatch-write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise BadInput(f"outputs dir {outputs_dir} is not writable: {e.strerror}") from e


def write_outputs(result: Result, outputs_dir: Path) -> None:
    """One file per field, no trailing newline (Argo valueFrom.path, Tekton results)."""
    for key, value in result.items():
        (outputs_dir / key).write_text(field_text(value))


def render(lines: Sequence[Result], form: OutputFormat, name: Callable[[Result], str]) -> str:
    """The result lines as `-o` asks: JSON lines, YAML documents, or kubectl's KIND.GROUP/NAME.

    JSON and YAML keep the same keys in the same (sorted) order.
    """
    if form == "yaml":
        return yaml.safe_dump_all([dict(line) for line in lines], sort_keys=True)
    if form == "name":
        return "".join(f"{name(line)}\n" for line in lines)
    return "".join(f"{json.dumps(line, sort_keys=True)}\n" for line in lines)


def dry_run_of(settings: DeadlineSettings) -> DryRun:
    """What the step's --dry-run says (a step that never writes has none)."""
    return settings.dry_run if isinstance(settings, WritingSettings) else "none"


def connect(settings: DeadlineSettings) -> Gateway:
    """The step's connection to its cluster; its --request-timeout runs from here."""
    return Gateway.connect(
        kubeconfig=settings.kubeconfig,
        context=settings.context,
        request_timeout=settings.request_timeout,
        dry_run=dry_run_of(settings),
    )


def unsent(gateway: Gateway) -> Result:
    """--dry-run=client: the writes the step would have sent, as the result's `requests`."""
    requests = gateway.take_unsent()
    return {"requests": requests} if requests else {}


def the_trainjob(settings: TrainJobSettings, _: Result) -> str:
    """`-o name` of a step that acts on the TrainJob --name names."""
    return kinds.TRAINJOB.kubectl_name(settings.name)


def guarded(step: str, body: Callable[[], int]) -> NoReturn:
    """Run a console script's `body` with logs for `step`, and exit with the code it returns.

    A DispatchError exits with its own code, told in one logged line and as the container's
    termination message.
    """
    configure_logging(step)
    try:
        code = body()
    except DispatchError as e:
        reason = str(e).replace("\n", " ")
        logger.bind(exit_code=e.exit_code, error=type(e).__name__).error(reason)
        _record_termination(reason)
        raise SystemExit(e.exit_code) from None
    raise SystemExit(code)


def _record_termination(reason: str) -> None:
    # Kubernetes shows this file's text as the container's termination message.
    if TERMINATION_LOG.exists():
        try:
            TERMINATION_LOG.write_text(reason)
        except OSError:
            logger.warning("cannot write the termination log")


def _marked(result: Result, dry_run: DryRun) -> Result:
    """A dry run's result says so, lest it be taken for a write's.

    Not an object printed whole (start's client dry run prints its TrainJob, as kubectl's
    `--dry-run=client -o json`): it stays an object that can be applied.
    """
    return result if "apiVersion" in result else {**result, "dryRun": dry_run}


def entrypoint(
    run: Callable[[S], Result | Report],
    settings_cls: type[S],
    *,
    step: str,
    about: str,
    example: str,
    acted_on: Callable[[S, Result], str],
) -> Callable[[], None]:
    """Wrap a step's `run` as a console script: exit codes per docs/design.md §3.

    `about` (two lines: what the step does) and `example` (one command line) are its --help;
    `acted_on` is what `-o name` prints for a result line: the object it is about.
    """

    def body() -> int:
        settings = load_settings(
            settings_cls,
            prog=f"dispatch-{step}",
            argv=sys.argv[1:],
            about=about,
            example=example,
        )
        dry_run = dry_run_of(settings)
        configure_logging(step, level=settings.log_level, dry_run=dry_run)
        if settings.outputs_dir is not None:
            prepare_outputs_dir(settings.outputs_dir)
        outcome = run(settings)
        report = (
            outcome if isinstance(outcome, Report) else Report(lines=[outcome], summary=outcome)
        )
        if dry_run != "none":
            report = dataclasses.replace(
                report,
                lines=[_marked(line, dry_run) for line in report.lines],
                summary=_marked(report.summary, dry_run),
            )
        if settings.outputs_dir is not None:
            write_outputs(report.summary, settings.outputs_dir)
        sys.stdout.write(
            render(report.lines, settings.output, lambda line: acted_on(settings, line))
        )
        if report.error is not None:
            raise report.error
        logger.info("done")
        return 0

    def main() -> None:
        guarded(step, body)

    return main
