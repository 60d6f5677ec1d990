"""Every parser fed anything: request files (JSON and YAML), flags and env, the annotations,
labels and statuses the steps read. The outcome is a value or a refusal, or a BadInput with a
one-line message (exit 2): never another exception, which would be a traceback (exit 1).
Inputs are fed as bytes too, UTF-8 or not, whole or cut short; what the API server answers
that cannot be read is Transient (75), its fault, not the input's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast
from unittest import mock

import pytest
import urllib3
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch_k8s.core.rules import decisions, names, trainjob, workload
from dispatch_k8s.core.rules.errors import BadInput, DispatchError, Transient
from dispatch_k8s.core.rules.request import StartRequest
from dispatch_k8s.core.shell.gateway import ApiError, Gateway, api_errors, kinds, kubeconfig
from dispatch_k8s.core.shell.settings import (
    StepSettings,
    TrainJobSettings,
    env_name,
    load_settings,
    read_document,
)
from dispatch_k8s.steps.admit import AdmitSettings
from dispatch_k8s.steps.approve import ApproveSettings
from dispatch_k8s.steps.start_settings import StartSettings
from tests.unit.audit_factories import decide_audit, jobset_dict, pod_dict, trainjob_dict
from tests.unit.factories import SERVER
from tests.unit.fuzz import (
    BYTES,
    JSON_VALUES,
    as_os_string,
    cut_anywhere,
    cut_in_a_character,
    is_utf8,
    leaf_paths,
    with_value,
)
from tests.unit.test_workload import CHECK, OWNER, workload_dict

STEPS: dict[str, type[StepSettings]] = {
    "start": StartSettings,
    "hold": TrainJobSettings,
    "admit": AdmitSettings,
    "approve": ApproveSettings,
}
REQUEST_KEYS = sorted(StartRequest.model_fields)
TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=12)


def _one_line(error: DispatchError) -> None:
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


# Bytes, not only text (issue 27): every input as the OS hands it over, UTF-8 or not, whole or
# cut short. Python gives argv and env as str with each undecodable byte a lone surrogate.

# No argv or env value holds a NUL byte: the OS cannot hand one over.
OS_BYTES = (
    st.binary(max_size=24) | cut_in_a_character(st.text(max_size=8).map(str.encode))
).filter(lambda data: b"\0" not in data)
# A request with characters of two, three and four bytes, so that a cut can land inside one.
REQUEST = {
    "job_id": "j",
    "generation": 1,
    "submission": 1,
    "attempt": 0,
    "image": "img:1",
    "command": ["run", "grüß", "✓", "\U0001f600"],
}
REQUEST_FILES = {
    True: json.dumps(REQUEST, ensure_ascii=False).encode(),
    False: yaml.safe_dump(REQUEST, allow_unicode=True).encode(),
}


@given(as_json=st.booleans(), data=st.data())
def test_any_request_file_bytes_are_a_request_or_bad_input(
    as_json: bool, data: st.DataObject
) -> None:
    content = data.draw(BYTES | cut_anywhere(REQUEST_FILES[as_json]))
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / ("request.json" if as_json else "request.yaml")
        path.write_bytes(content)
        _start_request_from(path)


RUNTIME_FILE = (
    Path(__file__).parents[2] / "pipelines/runtimes/torch-distributed.yaml"
).read_bytes()


@given(content=BYTES | cut_anywhere(RUNTIME_FILE))
def test_any_runtime_file_bytes_are_a_document_or_bad_input(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "runtime.yaml"
        path.write_bytes(content)
        refused = _refusal(lambda: read_document(path, what="runtime file"))
        assert refused is None or isinstance(refused, BadInput)


def _refusal(call: Callable[[], object]) -> DispatchError | None:
    """What `call` raised as a step's outcome, or None; any other exception fails the test."""
    try:
        call()
    except DispatchError as e:
        _one_line(e)
        return e
    return None


def _settings_or_utf8_refusal(step: str, argv: list[str], given: list[str]) -> None:
    """Settings, or one line of BadInput: that line, where a word given is not UTF-8."""
    refused = _refusal(lambda: load_settings(STEPS[step], prog=f"dispatch-{step}", argv=argv))
    assert refused is None or isinstance(refused, BadInput)
    if not all(is_utf8(word.encode("utf-8", "surrogateescape")) for word in given):
        assert refused is not None, "a word that is not UTF-8 is refused"
        assert "is not UTF-8" in str(refused), str(refused)


@given(step=st.sampled_from(sorted(STEPS)), data=st.data())
def test_any_flag_bytes_are_settings_or_bad_input(step: str, data: st.DataObject) -> None:
    flags = st.sampled_from(_flags(STEPS[step]))
    values = OS_BYTES.map(as_os_string)
    words = st.tuples(flags, values).map("=".join) | values.filter(lambda w: not _is_help(w))
    argv = data.draw(st.lists(words, max_size=4))
    _settings_or_utf8_refusal(step, argv, argv)


@given(step=st.sampled_from(sorted(STEPS)), data=st.data())
def test_any_env_bytes_are_settings_or_bad_input(step: str, data: st.DataObject) -> None:
    names = [env_name(field) for field in STEPS[step].model_fields]
    env = data.draw(st.dictionaries(st.sampled_from(names), OS_BYTES.map(as_os_string), max_size=4))
    with mock.patch.dict(os.environ, env):
        _settings_or_utf8_refusal(step, [], list(env.values()))


EXEC_CREDENTIAL = json.dumps(
    {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "grüß-✓"},
    },
    ensure_ascii=False,
).encode()
KUBECONFIG = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "grüß-✓", "user": {"token": "t"}}],
        "contexts": [
            {"name": "c", "context": {"cluster": "c", "user": "grüß-✓", "namespace": "n"}}
        ],
    },
    allow_unicode=True,
).encode()


@given(content=BYTES | cut_anywhere(KUBECONFIG), context=st.sampled_from([None, "c"]))
def test_any_kubeconfig_bytes_are_credentials_or_bad_input(
    content: bytes, context: str | None
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "kubeconfig"
        path.write_bytes(content)
        assert isinstance(kubeconfig.resolve_namespace(kubeconfig=path, context=context), str)
        refused = _refusal(lambda: kubeconfig.load(kubeconfig=path, context=context))
        assert refused is None or isinstance(refused, BadInput)


def _kubeconfig_with(directory: str, *, server: str, user: dict[str, Any]) -> Path:
    config = yaml.safe_load(KUBECONFIG)
    config["clusters"][0]["cluster"]["server"] = server
    config["users"][0]["user"] = user
    path = Path(directory) / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@given(server=TEXT | st.sampled_from(["https://h", "http://127.0.0.1:1", "h:6443", "https://"]))
def test_any_server_is_a_url_a_request_can_go_to_or_bad_input(server: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = _kubeconfig_with(directory, server=server, user={"token": "t"})
        try:
            loaded = kubeconfig.load(kubeconfig=path, context=None)
        except BadInput as e:
            _one_line(e)
            return
    url = urllib3.util.parse_url(loaded.host)  # what a request would be sent to
    assert url.scheme in ("http", "https")
    assert url.host


@settings(max_examples=25)  # each example runs the plugin: a process
@given(output=BYTES | cut_anywhere(EXEC_CREDENTIAL) | st.just(EXEC_CREDENTIAL))
def test_any_exec_plugin_output_is_credentials_or_bad_input(output: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        printed = Path(directory) / "printed"
        printed.write_bytes(output)
        plugin = Path(directory) / "plugin"
        plugin.write_text(f"#!/bin/sh\ncat {printed}\n")
        plugin.chmod(0o755)
        user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}}
        path = _kubeconfig_with(directory, server="https://127.0.0.1:6443", user=user)
        loaded: list[Any] = []
        refused = _refusal(lambda: loaded.append(kubeconfig.load(kubeconfig=path, context=None)))
    assert refused is None or isinstance(refused, BadInput)
    assert refused is None or output != EXEC_CREDENTIAL, str(refused)
    # Loaded only with credentials: never without them, for each request to fail as 75.
    assert all(config.api_key["BearerToken"].startswith("Bearer ") for config in loaded)


@given(
    step=st.sampled_from(["hold", "admit"]), flag=st.sampled_from(["namespace", "name"]), value=TEXT
)
def test_any_name_given_is_one_the_api_server_takes_or_bad_input(
    step: str, flag: str, value: str
) -> None:
    argv = ["--namespace=team-a", "--name=j", f"--{flag}={value}"]
    try:
        taken = load_settings(STEPS[step], prog=f"dispatch-{step}", argv=argv)
    except BadInput as e:
        _one_line(e)
        return
    rule = names.namespace_problem if flag == "namespace" else names.trainjob_name_problem
    assert rule(getattr(taken, flag)) is None


class Answering:
    """An API server that answers every request 200 with `body`, counting what it was sent."""

    configuration = SERVER

    status = 200
    reason = "OK"

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.sent = 0
        self.response = self

    def param_serialize(self, *, method: str, resource_path: str, **_: Any) -> tuple[str, str]:
        return method, resource_path

    def call_api(self, method: str, path: str, **_: Any) -> Answering:
        self.sent += 1
        return self

    def read(self) -> bytes:
        return self.body

    def stream(self, **_: Any) -> Iterator[bytes]:  # a watch's body, in two pieces
        yield from (self.body[: len(self.body) // 2], self.body[len(self.body) // 2 :])

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


OBJECT = json.dumps(
    {**TRAINJOB, "spec": {"note": "grüß ✓ \U0001f600"}}, ensure_ascii=False
).encode()
LIST = b'{"metadata": {"resourceVersion": "7"}, "items": [' + OBJECT + b"]}"
WATCH = b'{"type": "ADDED", "object": ' + OBJECT + b"}\n"
JOB = {"metadata": {"namespace": "team-a", "name": "j"}, "spec": {}}


def _unreadable_is_transient(request: Callable[[Gateway], Any], body: bytes) -> int:
    """`request` against an API server answering `body`: a value, or one line of exit 75."""
    api = Answering(body)
    with mock.patch("dispatch_k8s.core.shell.gateway.api_errors.time.sleep"):
        refused = _refusal(lambda: request(Gateway(cast(Any, api))))
    if refused is not None:
        assert isinstance(refused, Transient), refused
        assert "the API server's answer is unreadable" in str(refused), str(refused)
    return api.sent


@given(body=BYTES | cut_anywhere(OBJECT) | st.just(OBJECT))
def test_any_body_a_read_is_answered_is_an_object_or_transient(body: bytes) -> None:
    _unreadable_is_transient(lambda gateway: gateway.read_trainjob("team-a", "j"), body)


@given(body=BYTES | cut_anywhere(OBJECT))
def test_a_write_answered_unreadably_is_transient_and_not_sent_again(body: bytes) -> None:
    sent = _unreadable_is_transient(lambda gateway: gateway.update_trainjob(JOB, "7"), body)
    assert sent == 1, "the write may have applied: the rerun reads and sees"


@given(body=BYTES | cut_anywhere(LIST) | st.just(LIST))
def test_any_body_a_list_is_answered_is_items_or_transient(body: bytes) -> None:
    _unreadable_is_transient(lambda gateway: list(gateway.list_trainjobs("team-a")), body)


NO_EVENTS = b'[1]\n{"object": {}}\n{"type": "ADDED", "object": 2}\n'


@given(body=BYTES | cut_anywhere(WATCH) | st.just(NO_EVENTS + WATCH))
def test_any_body_a_watch_is_answered_is_events_or_skipped(body: bytes) -> None:
    events = list(
        Gateway(cast(Any, Answering(body))).watch(kinds.TRAINJOB, "a", version="1", timeout=1)
    )
    assert all(isinstance(obj, dict) for _, obj in events)


@given(body=BYTES | cut_anywhere('{"kind": "Status", "message": "grüß ✓"}'.encode()))
def test_any_error_body_is_one_line(body: bytes) -> None:
    _one_line(api_errors.error_for(ApiError.from_body(500, "Server Error", body), "get x"))


BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    ("script", "args", "env"),
    [
        ("dispatch-hold", [b"--name=j\xff"], {}),
        ("dispatch-hold", [b"--name", b"\xe2\x9c"], {}),  # UTF-8 cut inside its character
        ("dispatch-hold", [], {b"DISPATCH_NAME": b"j\xff"}),
        ("dispatch-start", [b"--request-file", b"{request}"], {}),
    ],
    ids=["flag", "cut-flag", "env", "request-file"],
)
def test_a_step_given_bytes_that_are_not_utf8_exits_2_in_one_line(
    script: str, args: list[bytes], env: dict[bytes, bytes], tmp_path: Path
) -> None:
    request = tmp_path / "request.yaml"
    request.write_bytes(REQUEST_FILES[False] + b"workdir: /\xff\n")
    args = [bytes(request) if arg == b"{request}" else arg for arg in args]
    clean = {k: v for k, v in os.environb.items() if not k.startswith(b"DISPATCH_")}
    done = subprocess.run(
        [bytes(BIN / script), *args],
        env={**clean, **env},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.decode().splitlines()
    assert "utf-8" in json.loads(line)["message"].lower(), line
