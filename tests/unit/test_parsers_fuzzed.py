"""Every parser fed anything: request files (JSON and YAML), flags and env, the annotations,
labels and statuses the steps read. The outcome is a value or a refusal, or a BadInput with a
one-line message (exit 2): never another exception, which would be a traceback (exit 1)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import yaml
from hypothesis import given
from hypothesis import strategies as st

from dispatch_k8s.core.rules import decisions, trainjob, workload
from dispatch_k8s.core.rules.errors import BadInput
from dispatch_k8s.core.rules.request import StartRequest
from dispatch_k8s.core.shell.settings import (
    AdmitSettings,
    ApproveSettings,
    StartSettings,
    StepSettings,
    TrainJobSettings,
    load_settings,
)
from tests.unit.audit_factories import decide_audit, jobset_dict, pod_dict, trainjob_dict
from tests.unit.fuzz import JSON_VALUES, leaf_paths, with_value
from tests.unit.test_workload import CHECK, OWNER, workload_dict

STEPS: dict[str, type[StepSettings]] = {
    "start": StartSettings,
    "hold": TrainJobSettings,
    "admit": AdmitSettings,
    "approve": ApproveSettings,
}
REQUEST_KEYS = sorted(StartRequest.model_fields)
TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=12)


def _one_line(error: BadInput) -> None:
    assert str(error), "a refusal says why"
    assert "\n" not in str(error)


def _start_request_from(path: Path) -> None:
    try:
        settings = load_settings(
            StartSettings, prog="dispatch-start", argv=["--request-file", str(path)]
        )
        settings.start_request()
    except BadInput as e:
        _one_line(e)


@given(
    document=st.dictionaries(st.sampled_from(REQUEST_KEYS) | TEXT, JSON_VALUES, max_size=8),
    as_json=st.booleans(),
)
def test_any_request_document_is_a_request_or_bad_input(
    document: dict[str, Any], as_json: bool
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / ("request.json" if as_json else "request.yaml")
        path.write_text(json.dumps(document) if as_json else yaml.safe_dump(document))
        _start_request_from(path)


@given(text=TEXT | st.text(max_size=200), as_json=st.booleans())
def test_any_request_file_text_is_a_request_or_bad_input(text: str, as_json: bool) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / ("request.json" if as_json else "request.yaml")
        path.write_text(text, errors="surrogatepass")
        _start_request_from(path)


def _flags(settings: type[StepSettings]) -> list[str]:
    return sorted(f"--{name.replace('_', '-')}" for name in settings.model_fields)


def _is_help(word: str) -> bool:  # argparse takes any prefix of --help for it
    return word.startswith("-h") or (len(word) > 2 and "--help".startswith(word))


@given(step=st.sampled_from(sorted(STEPS)), data=st.data())
def test_any_flags_are_settings_or_bad_input(step: str, data: st.DataObject) -> None:
    settings = STEPS[step]
    words = st.sampled_from(_flags(settings)) | TEXT
    argv = [w for w in data.draw(st.lists(words, max_size=8)) if not _is_help(w)]
    try:
        load_settings(settings, prog=f"dispatch-{step}", argv=argv)
    except BadInput as e:
        _one_line(e)


@given(step=st.sampled_from(sorted(STEPS)), data=st.data())
def test_any_env_is_settings_or_bad_input(step: str, data: st.DataObject) -> None:
    settings = STEPS[step]
    names = [f"DISPATCH_{name.upper()}" for name in settings.model_fields]
    env = data.draw(st.dictionaries(st.sampled_from(names), TEXT, max_size=6))
    with mock.patch.dict(os.environ, env):
        try:
            load_settings(settings, prog=f"dispatch-{step}", argv=[])
        except BadInput as e:
            _one_line(e)


def _read_parts(document: dict[str, Any]) -> list[list[str | int]]:
    """Paths the steps read from the API's objects; name, namespace and uid the server sets."""
    return [
        path
        for path in leaf_paths(document)
        if path[0] in ("spec", "status")
        or path[:2] in (["metadata", "annotations"], ["metadata", "labels"])
    ]


TRAINJOB = trainjob_dict(highest_restart="1", last_execution='{"pod": "p", "r": 1, "slot": "s"}')
TRAINJOB["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
TRAINJOB["status"] = {"conditions": [{"type": "Complete", "status": "False"}]}
SUSPENDED = with_value(TRAINJOB, ["spec", "suspend"], True)
JOBSET = jobset_dict(restarts=1)
POD = pod_dict()
WORKLOAD = workload_dict()


@given(where=st.sampled_from(_read_parts(SUSPENDED)), value=JSON_VALUES)
def test_any_trainjob_shape_gives_a_raise_or_a_refusal(where: list[str | int], value: Any) -> None:
    job = with_value(SUSPENDED, where, value)
    decision = trainjob.decide_raise(job, JOBSET)
    assert isinstance(decision, trainjob.Raise | decisions.Refusal)
    trainjob.finished_reason(job)
    trainjob.multikueue_refusal(job)
    trainjob.foreign_flag(job)


@given(where=st.sampled_from(_read_parts(JOBSET)), value=JSON_VALUES)
def test_any_jobset_shape_gives_a_raise_or_a_refusal(where: list[str | int], value: Any) -> None:
    decision = trainjob.decide_raise(SUSPENDED, with_value(JOBSET, where, value))
    assert isinstance(decision, trainjob.Raise | decisions.Refusal)


@given(
    part=st.sampled_from(["trainjob", "jobset", "pod"]),
    data=st.data(),
)
def test_any_shape_the_audit_reads_gives_findings(part: str, data: st.DataObject) -> None:
    objects = {"trainjob": TRAINJOB, "jobset": JOBSET, "pod": POD}
    where = data.draw(st.sampled_from(_read_parts(objects[part])))
    objects[part] = with_value(objects[part], where, data.draw(JSON_VALUES))
    findings, _ = decide_audit(objects["trainjob"], objects["jobset"], pods=[objects["pod"]])
    assert all("\n" not in str(finding) for finding in findings)


@given(where=st.sampled_from(_read_parts(WORKLOAD)), value=JSON_VALUES)
def test_any_workload_status_is_a_reservation_a_skip_or_a_refusal(
    where: list[str | int], value: Any
) -> None:
    changed = with_value(WORKLOAD, where, value)
    decision = workload.decide_reservation(changed, OWNER, check=CHECK)
    assert isinstance(
        decision, workload.Reservation | workload.Skip | workload.Finished | decisions.Refusal
    )
    refusal = workload.decide_approval(changed, TRAINJOB, check=CHECK, admission=1)
    assert refusal is None or isinstance(refusal, decisions.Refusal)
