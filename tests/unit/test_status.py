"""dispatch-status's record and row, from the objects as read (plain dicts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatch_k8s.core.rules import status, wire
from dispatch_k8s.core.shell.settings import load_settings
from dispatch_k8s.steps import status as status_step
from dispatch_k8s.steps.status import StatusSettings
from tests.unit.audit_factories import NAME, jobset_dict, trainjob_dict
from tests.unit.golden import check_golden_text

CHECK = "dispatch-admission"
RESERVED_AT = "2026-11-30T10:00:00Z"
# G = 3, N = 7, attempt 2: every epoch is 3_000_007_000_000 + R.
IDENTITY = {
    wire.JOB_ID_ANNOTATION: "train-42",
    wire.GENERATION_ANNOTATION: "3",
    wire.SUBMISSION_ANNOTATION: "7",
    wire.ATTEMPT_ANNOTATION: "2",
}


def job(*, suspend: bool = False, queue: str | None = None, **fields: Any) -> dict[str, Any]:
    made = trainjob_dict(**fields)
    made["metadata"]["annotations"].update(IDENTITY)
    made["metadata"]["uid"] = "job-uid"
    made["spec"]["suspend"] = suspend
    if queue is not None:
        made["metadata"]["labels"] = {wire.QUEUE_LABEL: queue}
    return made


def annotate(made: dict[str, Any], **annotations: str) -> dict[str, Any]:
    made["metadata"]["annotations"].update(annotations)
    return made


def workload(
    *,
    name: str = "wl",
    reserved: bool = True,
    created: str = "2026-11-30T09:00:00Z",
    **status_: Any,
) -> dict[str, Any]:
    conditions = [
        {"type": "QuotaReserved", "status": str(reserved), "lastTransitionTime": RESERVED_AT}
    ]
    return {
        "metadata": {"name": name, "uid": f"{name}-uid", "creationTimestamp": created},
        "status": {
            "conditions": conditions,
            "admissionChecks": [{"name": CHECK, "state": "Pending"}],
            **({"admission": {"clusterQueue": "cq"}} if reserved else {}),
            **status_,
        },
    }


def describe(made: dict[str, Any], jobset: Any = None, *workloads: Any) -> dict[str, Any]:
    return status.describe(made, jobset, list(workloads), check=CHECK)


def test_a_running_plain_job_shows_what_its_execution_sees() -> None:
    record = describe(job(admission="2", floor="2"), jobset_dict(restarts=1))
    assert record["mode"] == status.PLAIN
    assert record["state"] == status.RUNNING
    assert record["admission"] == {"patch": 2, "floor": 2}
    assert record["restart"] == {"current": 1, "highest": 0}
    assert record["execution"] == {
        "which": "running",
        "admission": 2,
        "restart": 1,
        "r": 3,
        "epoch": 3_000_007_000_003,
        "attempt": "train-42.7.2.2.1",
    }
    assert record["pendingRaise"] is False
    assert record["workload"] is None
    assert record["problems"] == []


def test_a_job_never_opened_shows_the_first_execution_at_r_1() -> None:
    record = describe(job(suspend=True, admission="0", floor="0", open_until=None))
    assert record["state"] == status.SUSPENDED
    assert record["execution"]["which"] == "next"
    assert (record["execution"]["r"], record["execution"]["epoch"]) == (1, 3_000_007_000_001)


def test_after_a_reset_of_j_the_next_execution_is_above_every_r() -> None:
    # A = 2 ran up to J = 3 (R = 5); the JobSet was replaced (J = 0): the next R is 6.
    # Held after the raise that opened it at generation 1 (the record is spent).
    made = job(suspend=True, admission="2", floor="2", highest_restart="3", open_until="1")
    execution = describe(made, jobset_dict(restarts=0))["execution"]
    assert (execution["admission"], execution["restart"], execution["r"]) == (6, 0, 6)


def test_a_queued_raise_for_the_current_reservation_is_pending() -> None:
    # admit read generation 3 and wrote 4: the raise covers an opening up to generation 5.
    current = workload()
    made = annotate(
        job(suspend=True, queue="team-a", admission="4", floor="4", generation=4),
        **{
            wire.OPEN_UNTIL_GENERATION_ANNOTATION: "5",
            wire.RAISED_FOR_ANNOTATION: f"wl-uid 0 {RESERVED_AT}",
        },
    )
    record = describe(made, None, current)
    assert record["mode"] == status.QUEUE
    assert record["queue"] == "team-a"
    assert record["pendingRaise"] is True
    assert record["execution"]["admission"] == 4, "the next execution runs on the raise made"
    assert record["workload"] == {
        "name": "wl",
        "clusterQueue": "cq",
        "raisedFor": True,
        "check": "Pending",
        "finished": False,
    }


def test_a_raise_for_a_reservation_that_is_gone_is_not_pending() -> None:
    made = annotate(
        job(suspend=True, queue="team-a", admission="4", floor="4", generation=4),
        **{wire.OPEN_UNTIL_GENERATION_ANNOTATION: "5", wire.RAISED_FOR_ANNOTATION: "old 0 t"},
    )
    record = describe(made, None, workload(reserved=False))
    assert record["pendingRaise"] is False
    assert record["execution"]["admission"] == 5, "the next reservation gets its own raise"
    assert record["workload"]["clusterQueue"] is None


def test_a_job_held_after_its_opening_has_no_pending_raise() -> None:
    # unsuspend opened at generation 4 (spent there); the hold moved it to 5.
    made = annotate(job(suspend=True, generation=5), **{wire.OPEN_UNTIL_GENERATION_ANNOTATION: "4"})
    assert describe(made)["pendingRaise"] is False


def test_the_current_workload_is_the_newest_live_one() -> None:
    old = workload(name="old", created="2026-11-30T08:00:00Z")
    finished = workload(
        name="done",
        created="2026-11-30T10:00:00Z",
        conditions=[{"type": "Finished", "status": "True"}],
    )
    assert status.current_workload([old, finished]) is old
    assert status.current_workload([finished]) is finished
    assert status.current_workload([]) is None


def test_foreign_flag_cause_and_last_execution_are_shown() -> None:
    last = json.dumps({"pod": "p-uid", "r": 3, "slot": "node/0/0"})
    made = job(foreign="true", cause="JobSet UID x is not y", last_execution=last)
    record = describe(made, jobset_dict())
    assert (record["foreign"], record["foreignCause"]) == (True, "JobSet UID x is not y")
    assert record["lastExecution"] == {"r": 3, "pods": {"node/0/0": "p-uid"}}


@pytest.mark.parametrize(
    "fields",
    [{"floor": "01"}, {"admission": "x"}, {"highest_restart": "-1"}],
    ids=["floor", "patch", "highest"],
)
def test_a_garbled_counter_is_a_problem_told_not_a_failure(fields: dict[str, Any]) -> None:
    record = describe(job(**fields), jobset_dict())
    assert record["execution"] is None
    assert len(record["problems"]) == 1


def test_a_garbled_identity_is_a_problem_told() -> None:
    made = annotate(job(), **{wire.GENERATION_ANNOTATION: "three"})
    record = describe(made, jobset_dict())
    assert record["execution"] is None
    assert record["problems"] == ["generation 'three' is not a canonical decimal"]


def test_the_table_has_kubectl_s_headers_and_aligned_columns() -> None:
    rows = [status.row(describe(job(), jobset_dict())), status.row(describe(job(floor="x")))]
    widths = status.widths(rows)
    lines = [status.line(cells, widths) for cells in (status.HEADERS, *rows)]
    assert lines[0].startswith("NAME      MODE    STATE     A   FLOOR    J   HIGHEST-J   R ")
    assert all(header == header.upper() for header in status.HEADERS)
    starts = [lines[0].index(header) for header in ("MODE", "EPOCH", "CHECK")]
    for text in lines[1:]:
        assert all(text[start - 1] == " " and text[start] != " " for start in starts)
    assert rows[0][:3] == [NAME, "plain", "Running"]
    assert rows[1][status.HEADERS.index("FLOOR")] == "<none>"
    assert rows[0][status.HEADERS.index("FOREIGN")] == "false"


def test_the_table_is_the_one_last_reviewed() -> None:
    """A plain job running, one with a garbled floor, and a queued one: the whole table."""
    records = [
        describe(job(), jobset_dict()),
        describe(job(floor="x")),
        describe(job(suspend=True, queue="team-queue")),
    ]
    rows = [status.row(record) for record in records]
    widths = status.widths(rows)
    table = "".join(status.line(cells, widths) + "\n" for cells in (status.HEADERS, *rows))
    check_golden_text("status-table.txt", table)


def settings(*flags: str) -> StatusSettings:
    return load_settings(StatusSettings, prog="dispatch-status", argv=["-n", "team-a", *flags])


def test_short_flags_as_kubectl_s() -> None:
    parsed = settings("-l", "team=vision", "-o", "yaml", "-w")
    assert (parsed.selector, parsed.output, parsed.watch) == ("team=vision", "yaml", True)
    assert settings("--all").output == "table", "a table by default, on a terminal or not"


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_json_and_yaml_print_the_records_one_each(
    form: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    records = [describe(job(), jobset_dict()), describe(job(suspend=True))]
    status_step._Printer(settings("--all", "-o", form, "--outputs-dir", str(tmp_path)), records)
    out = capsys.readouterr().out
    parsed = (
        [json.loads(text) for text in out.splitlines()]
        if form == "json"
        else list(yaml.safe_load_all(out))
    )
    assert parsed == records
    assert json.loads((tmp_path / "items").read_text()) == records


def test_no_job_is_said_on_stderr_as_kubectl_says_it(capsys: pytest.CaptureFixture[str]) -> None:
    status_step._Printer(settings("--all"), [])
    told = capsys.readouterr()
    assert (told.out, told.err) == ("", "No resources found in team-a namespace.\n")
