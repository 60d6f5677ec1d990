"""`dispatch-status`: read-only: what one TrainJob, or a namespace's, is at: mode, A, J, R."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Final, Literal

import yaml

from dispatch_k8s.core.rules import gate, status, trainjob, wire
from dispatch_k8s.core.rules.carried import Uncarried
from dispatch_k8s.core.rules.errors import NotFound
from dispatch_k8s.core.shell import carrying, runner
from dispatch_k8s.core.shell.gateway import Gateway, kinds, watching
from dispatch_k8s.core.shell.settings import (
    CHECK_DOC,
    ObjectName,
    ResultSettings,
    TargetSettings,
    TrainJobName,
    doc,
    load_settings,
)


class _Table(ResultSettings):
    """A table, as kubectl get prints, where the steps print a result: a format of its own."""

    output: Annotated[
        Literal["table", "json", "yaml"],
        doc(
            "table (as kubectl get: a header, one row per job), json (one object per job, "
            "one a line) or yaml (one document per job).",
            metavar="table|json|yaml",
            default="table, on a terminal or not (as kubectl)",
        ),
    ] = "table"


class StatusSettings(TargetSettings, _Table):
    """`dispatch-status`: what one TrainJob, or every dispatch-managed one, is at, read-only."""

    name: Annotated[
        TrainJobName | None,
        doc(
            "The TrainJob to show.", metavar="NAME", default="none: give this, --all or --selector"
        ),
    ] = None
    all: Annotated[
        bool,
        doc("Show every TrainJob of the namespace that dispatch-start made.", default="off"),
    ] = False
    watch: Annotated[
        bool,
        doc(
            "After the jobs, watch them and print a job again each time its TrainJob changes, "
            "until interrupted (Ctrl-C ends it with 0).",
            default="off",
        ),
    ] = False
    check: Annotated[ObjectName, CHECK_DOC] = "dispatch-admission"


STEP: Final = "status"
# How long each watch request lasts before the next: the watch itself goes on until Ctrl-C.
WATCH_SECONDS: Final = 300.0


def run(settings: StatusSettings) -> None:
    """Read each job and its JobSet and Workloads, print its record; with --watch, follow."""
    gateway = runner.connect(settings)  # --request-timeout bounds a --watch too
    namespace, name = settings.namespace, settings.name
    if settings.watch:
        events = watching.list_then_watch(
            gateway,
            kinds.TRAINJOB,
            namespace,
            watch_seconds=lambda: WATCH_SECONDS,
            label_selector="" if name is not None else _selector(settings),
        )
        # Ctrl-C is how a person ends a watch, as kubectl get -w's: not a failure.
        with contextlib.suppress(KeyboardInterrupt):
            _watch(gateway, settings, events)
        return
    if name is not None:
        records = [_record(gateway, settings, gateway.read_trainjob(namespace, name))]
    else:
        records = _namespace_records(gateway, settings)
    _Printer(settings, records)


def _watch(gateway: Gateway, settings: StatusSettings, events: Iterator[watching.Event]) -> None:
    """The jobs as the watch's list has them, then each again as its TrainJob changes."""
    listed: list[dict[str, Any]] = []
    for kind, job in events:
        if kind == watching.SYNCED:
            break
        if kind == watching.LISTED and _wanted(job, settings):
            listed.append(_record(gateway, settings, job))
    if settings.name is not None and not listed:
        raise NotFound(f"{kinds.TRAINJOB.describe(settings.namespace, settings.name)} not found")
    printer = _Printer(settings, listed)
    # After the first list, a LISTED item is one of a list made again (410): shown anew too.
    for job in watching.objects(events):
        if _wanted(job, settings):
            printer.print(_record(gateway, settings, job))


def _wanted(job: Mapping[str, Any], settings: StatusSettings) -> bool:
    if settings.name is not None:
        return bool(job["metadata"]["name"] == settings.name)
    return gate.is_dispatch_managed(job)


def _selector(settings: StatusSettings) -> str:
    return settings.selector or f"{wire.MANAGED_BY_LABEL}={wire.MANAGED_BY}"


def _record(gateway: Gateway, settings: StatusSettings, job: Mapping[str, Any]) -> dict[str, Any]:
    """One job's record from its own reads: its JobSet and, queued, its Workloads."""
    namespace, name = settings.namespace, job["metadata"]["name"]
    workloads = []
    if trainjob.is_kueue_managed(job):
        selector = f"{wire.KUEUE_JOB_UID_LABEL}={job['metadata'].get('uid')}"
        workloads = gateway.list_workloads(namespace, selector)
    jobset = gateway.read_jobset(namespace, name)
    return status.describe(
        job, jobset, workloads, check=settings.check, uncarried=_uncarried(gateway, job, jobset)
    )


def _uncarried(
    gateway: Gateway, job: Mapping[str, Any], jobset: Mapping[str, Any] | None
) -> Uncarried | None:
    """What Trainer could not open or hold of the job, with its reason (Events read only then)."""
    found = carrying.read_carried(gateway, job, jobset)
    return found if isinstance(found, Uncarried) else None


def _namespace_records(gateway: Gateway, settings: StatusSettings) -> list[dict[str, Any]]:
    """Every managed job's record, from one list each of TrainJobs, JobSets and Workloads."""
    namespace = settings.namespace
    jobs = [
        job
        for job in gateway.list_trainjobs(namespace, _selector(settings))
        if gate.is_dispatch_managed(job)
    ]
    jobsets = {jobset["metadata"]["name"]: jobset for jobset in gateway.list_jobsets(namespace)}
    workloads: dict[str, list[dict[str, Any]]] = {}
    if any(trainjob.is_kueue_managed(job) for job in jobs):
        for found in gateway.list_workloads(namespace, wire.KUEUE_JOB_UID_LABEL):
            uid = found["metadata"]["labels"][wire.KUEUE_JOB_UID_LABEL]
            workloads.setdefault(uid, []).append(found)
    return [
        status.describe(
            job,
            jobsets.get(job["metadata"]["name"]),
            workloads.get(job["metadata"].get("uid"), []) if trainjob.is_kueue_managed(job) else [],
            check=settings.check,
            uncarried=_uncarried(gateway, job, jobsets.get(job["metadata"]["name"])),
        )
        for job in jobs
    ]


class _Printer:
    """Prints records in the chosen format; a table keeps the columns of its first rows."""

    def __init__(self, settings: StatusSettings, records: list[dict[str, Any]]) -> None:
        self.form = settings.output
        rows = [status.row(record) for record in records]
        self.widths = status.widths(rows)
        if settings.outputs_dir is not None:
            runner.prepare_outputs_dir(settings.outputs_dir)
            summary = records[0] if settings.name is not None else {"items": records}
            runner.write_outputs(summary, settings.outputs_dir)
        if self.form == "table" and (records or settings.watch):
            self._write(status.line(status.HEADERS, self.widths))
        elif self.form == "table":  # as kubectl says it: on stderr, no header
            sys.stderr.write(f"No resources found in {settings.namespace} namespace.\n")
        for record in records:
            self.print(record)

    def print(self, record: Mapping[str, Any]) -> None:
        """One record: a row, a JSON line, or a YAML document."""
        if self.form == "table":
            self._write(status.line(status.row(record), self.widths))
        elif self.form == "json":
            self._write(json.dumps(record, sort_keys=True))
        else:
            self._write("---\n" + yaml.safe_dump(dict(record), sort_keys=True).rstrip("\n"))

    @staticmethod
    def _write(text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()  # a watch's rows are read as they come, through a pipe too


ABOUT = (
    "Read-only: each TrainJob's mode, suspension, A (patch, floor), J (JobSet, highest), R,\n"
    "the epoch and attempt its execution sees, its records, foreign flag, Workload and check."
)
EXAMPLE = """\
dispatch-status --namespace team-a --name train-42-3f9c1a2b
dispatch-status -n team-a --all -o json
dispatch-status -n team-a -l team=vision --watch
"""


def main() -> None:
    """The console script: settings, logs on stderr, the records on stdout."""

    def body() -> int:
        settings = load_settings(
            StatusSettings, prog=f"dispatch-{STEP}", argv=sys.argv[1:], about=ABOUT, example=EXAMPLE
        )
        runner.configure_logging(STEP, level=settings.log_level)
        run(settings)
        return 0

    runner.guarded(STEP, body)
