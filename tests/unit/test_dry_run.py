"""--dry-run=none|client|server in every step that writes: what the gateway would send.

The steps run as console scripts (their `main`) against a recording stand-in for the client's
ApiClient: reads are answered from a table of objects, every request is kept as sent (method,
path, query, body), so a test sees the very query a write carries (`dryRun=All`), and which
requests were not sent at all.
"""

from __future__ import annotations

import json
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from dispatch_k8s.core.rules import wire, workload
from dispatch_k8s.core.rules.errors import BadInput
from dispatch_k8s.core.rules.workload import reservation_record
from dispatch_k8s.core.shell.gateway import Gateway, kinds, transport
from dispatch_k8s.core.shell.settings import TrainJobSettings, WritingSettings, load_settings
from dispatch_k8s.steps import approve, audit, hold, start, unsuspend
from dispatch_k8s.steps.admit import AdmitSettings
from dispatch_k8s.steps.approve import ApproveSettings
from dispatch_k8s.steps.audit import AuditSettings
from dispatch_k8s.steps.start_settings import StartSettings
from dispatch_k8s.steps.status import StatusSettings
from tests.support.requests import request_flags
from tests.unit.audit_factories import NAME, UID, jobset_dict, trainjob_dict
from tests.unit.factories import SERVER
from tests.unit.golden import check_golden
from tests.unit.test_workload import raised_trainjob, workload_dict

REPO: Final = Path(__file__).resolve().parents[2]
RUNTIME: Final = yaml.safe_load((REPO / "pipelines/runtimes/torch-distributed.yaml").read_text())
NAMESPACE: Final = "team-a"
DRY_RUN_ALL: Final = ("dryRun", "All")


@dataclass(frozen=True, slots=True)
class Sent:
    """One request as the gateway handed it to the client."""

    method: str
    path: str
    query: list[tuple[str, Any]]
    body: Any


@dataclass(frozen=True, slots=True)
class Answer:
    """What the client's RESTResponse gives the gateway: a status and a body."""

    status: int
    body: bytes
    reason: str = ""

    def read(self) -> bytes:
        return self.body


class Cluster:
    """An API server in a table: GETs answered from `objects`, writes answered as applied
    (a create given a uid and generation 1, the resourceVersion moved) and stored, except
    under dryRun=All, which stores nothing; every request kept in `sent`. A TrainJob opened
    has its JobSet opened, as Trainer would."""

    configuration = SERVER

    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects
        self.sent: list[Sent] = []

    def param_serialize(
        self, *, method: str, resource_path: str, query_params: Any, body: Any = None, **_: Any
    ) -> tuple[str, str, list[tuple[str, Any]], Any]:
        return method, resource_path, list(query_params), body

    def call_api(
        self, method: str, path: str, query: list[tuple[str, Any]], body: Any, **_: Any
    ) -> Answer:
        self.sent.append(Sent(method, path, query, body))
        if method == "GET":
            found = self.objects.get(path)
            if found is None:
                status = {"kind": "Status", "reason": "NotFound", "message": f"{path} not found"}
                return Answer(404, json.dumps(status).encode(), "Not Found")
            return Answer(200, json.dumps(found).encode())
        given = body["metadata"]
        name = given.get("name") or f"{given['generateName']}1"  # an Event's name is generated
        meta = {"uid": f"uid-of-{name}", "generation": 1, **given, "name": name}
        if DRY_RUN_ALL not in query:
            meta["resourceVersion"] = "101"
            self.objects[f"{path}/{meta['name']}" if method == "POST" else path] = {
                **body,
                "metadata": meta,
            }
            self._trainer(path, body, meta)
        answer = json.dumps({**body, "metadata": meta}).encode()
        return Answer(201 if method == "POST" else 200, answer)

    def _trainer(self, path: str, body: dict[str, Any], meta: dict[str, Any]) -> None:
        """Trainer's part: a TrainJob opened gets its JobSet opened (unsuspend waits for it)."""
        opened = kinds.TRAINJOB.path(meta.get("namespace"), meta["name"]) == path
        if opened and body.get("spec", {}).get("suspend") is False:
            jobset = {"metadata": {"name": meta["name"]}, "spec": {"suspend": False}}
            self.objects[kinds.JOBSET.path(meta.get("namespace"), meta["name"])] = jobset

    def writes(self) -> list[Sent]:
        return [sent for sent in self.sent if sent.method != "GET"]


@pytest.fixture
def connect_to(monkeypatch: pytest.MonkeyPatch) -> Callable[[Cluster], None]:
    """Make Gateway.connect (as the steps call it) connect to a Cluster."""

    def to(cluster: Cluster) -> None:
        monkeypatch.setattr(
            transport, "load_configuration", lambda **_: types.SimpleNamespace(retries=None)
        )
        monkeypatch.setattr("kubernetes.client.ApiClient", lambda _: cluster)

    return to


def run_main(
    main: Callable[[], None], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[dict[str, Any]]]:
    """A step's console script run with `argv`: its exit code and result lines."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["dispatch-step", *argv])
        patch.setattr(os, "environ", clean)
        with pytest.raises(SystemExit) as exited:
            main()
    out = capsys.readouterr().out
    return int(exited.value.code or 0), [json.loads(line) for line in out.splitlines()]


START_FLAGS: Final = [
    f"--namespace={NAMESPACE}",
    "--runtime-name=dispatch-torch-distributed",
    *request_flags("train-42", attempt=2),
]


def started(
    connect_to: Callable[[Cluster], None], capsys: pytest.CaptureFixture[str]
) -> tuple[Cluster, dict[str, Any]]:
    """A cluster holding the runtime and the TrainJob a real start made in it."""
    runtime_path = kinds.CLUSTER_TRAINING_RUNTIME.path(None, "dispatch-torch-distributed")
    cluster = Cluster({runtime_path: RUNTIME})
    connect_to(cluster)
    code, [result] = run_main(start.main, START_FLAGS, capsys)
    assert (code, result["outcome"]) == (0, "created")
    return cluster, cluster.objects[kinds.TRAINJOB.path(NAMESPACE, result["name"])]


# The settings


# Each writing step's settings, with the flags it requires.
WRITING: Final[dict[type[WritingSettings], list[str]]] = {
    StartSettings: [],
    TrainJobSettings: ["--name=j"],
    AdmitSettings: ["--name=j"],
    ApproveSettings: ["--workload=w", "--workload-resource-version=1", "--admission=1"],
    AuditSettings: ["--all"],
}


@pytest.mark.parametrize(
    ("argv", "mode"),
    [
        ([], "none"),
        (["--dry-run"], "client"),  # kubectl's deprecated bare form
        (["--dry-run=client"], "client"),
        (["--dry-run=server"], "server"),
        (["--dry-run", "server"], "server"),
        (["--dry-run=none"], "none"),
        (["--no-dry-run"], "none"),  # earlier builds' boolean
        (["--dry-run=server", "--no-dry-run"], "none"),  # the last flag wins, as kubectl's
    ],
)
@pytest.mark.parametrize("cls", list(WRITING), ids=lambda cls: cls.__name__)
def test_dry_run_is_none_client_or_server(
    cls: type[WritingSettings], argv: list[str], mode: str
) -> None:
    assert load_settings(cls, prog="p", argv=[*WRITING[cls], *argv]).dry_run == mode


@pytest.mark.parametrize(
    ("value", "mode"),
    [("server", "server"), ("client", "client"), ("true", "client"), ("0", "none")],
)
def test_the_env_takes_a_mode_or_earlier_builds_boolean(
    monkeypatch: pytest.MonkeyPatch, value: str, mode: str
) -> None:
    monkeypatch.setenv("DISPATCH_DRY_RUN", value)
    assert load_settings(TrainJobSettings, prog="p", argv=["--name=j"]).dry_run == mode


def test_an_unknown_mode_is_named_in_one_line() -> None:
    with pytest.raises(BadInput) as raised:
        load_settings(TrainJobSettings, prog="dispatch-hold", argv=["--name=j", "--dry-run=all"])
    assert str(raised.value).startswith("dispatch-hold: --dry-run (env DISPATCH_DRY_RUN): ")


def test_a_step_that_never_writes_has_no_dry_run() -> None:
    assert "dry_run" not in StatusSettings.model_fields
    with pytest.raises(BadInput, match="unrecognized arguments: --dry-run"):
        load_settings(StatusSettings, prog="dispatch-status", argv=["--all", "--dry-run=server"])


def test_a_job_word_spelled_like_the_flag_stays_the_job_s() -> None:
    argv = ["--command", "run", "--args", "--dry-run", "--args=--no-dry-run"]
    settings = load_settings(StartSettings, prog="dispatch-start", argv=argv)
    assert (settings.dry_run, settings.args) == ("none", ["--dry-run", "--no-dry-run"])


# The gateway: what each mode sends


JOB: Final = {"metadata": {"namespace": NAMESPACE, "name": "j", "uid": "u"}, "spec": {}}


def each_write(gateway: Gateway) -> None:
    gateway.create_config_map({"metadata": {"namespace": NAMESPACE, "name": "c"}})
    gateway.update_trainjob(JOB, "7")
    gateway.apply_workload_status({"metadata": {"namespace": NAMESPACE, "name": "w"}}, manager="m")
    gateway.emit_event(JOB, event_type="Normal", reason="Raised", message="m", step="hold")


def test_server_sends_each_write_with_dry_run_all_and_reads_without() -> None:
    cluster = Cluster({kinds.TRAINJOB.path(NAMESPACE, "j"): JOB})
    gateway = Gateway(cluster, dry_run="server")  # type: ignore[arg-type]
    gateway.read_trainjob(NAMESPACE, "j")
    each_write(gateway)
    assert [(s.method, DRY_RUN_ALL in s.query) for s in cluster.sent] == [
        ("GET", False),
        ("POST", True),
        ("PUT", True),
        ("PATCH", True),
    ], "no Event is posted"
    assert ("fieldManager", "m") in cluster.sent[-1].query, "a dry run keeps the write's own query"


def test_client_sends_the_reads_and_keeps_each_write_back() -> None:
    cluster = Cluster({kinds.TRAINJOB.path(NAMESPACE, "j"): JOB})
    gateway = Gateway(cluster, dry_run="client")  # type: ignore[arg-type]
    gateway.read_trainjob(NAMESPACE, "j")
    each_write(gateway)
    assert [s.method for s in cluster.sent] == ["GET"]
    kept = gateway.take_unsent()
    assert [(k["method"], k["path"]) for k in kept] == [
        ("POST", kinds.CONFIG_MAP.path(NAMESPACE)),
        ("PUT", kinds.TRAINJOB.path(NAMESPACE, "j")),
        ("PATCH", kinds.WORKLOAD.path(NAMESPACE, "w", subresource="status")),
    ]
    assert kept[1]["body"]["metadata"]["resourceVersion"] == "7", "the precondition it carries"
    assert gateway.take_unsent() == []


def test_without_a_dry_run_every_write_and_the_event_are_sent_as_they_are() -> None:
    cluster = Cluster({})
    each_write(Gateway(cluster))  # type: ignore[arg-type]
    assert [s.method for s in cluster.sent] == ["POST", "PUT", "PATCH", "POST"]
    assert not any(DRY_RUN_ALL in s.query for s in cluster.sent)
    assert cluster.sent[-1].path == kinds.EVENT.path(NAMESPACE)


# The steps


def test_start_server_sends_every_create_with_dry_run_all_and_reports_them(
    connect_to: Callable[[Cluster], None], capsys: pytest.CaptureFixture[str]
) -> None:
    runtime_path = kinds.CLUSTER_TRAINING_RUNTIME.path(None, "dispatch-torch-distributed")
    cluster = Cluster({runtime_path: RUNTIME})
    connect_to(cluster)
    code, [result] = run_main(start.main, [*START_FLAGS, "--dry-run=server"], capsys)
    assert code == 0
    writes = cluster.writes()
    assert [w.path for w in writes] == [
        kinds.CONFIG_MAP.path(NAMESPACE),  # the claim
        kinds.TRAINJOB.path(NAMESPACE),
        kinds.CONFIG_MAP.path(NAMESPACE),  # the record, of the TrainJob the dry run answered
    ]
    assert all(DRY_RUN_ALL in w.query for w in writes)
    assert list(cluster.objects) == [runtime_path], "nothing stored"
    assert writes[2].body["data"]["trainjob-uid"] == f"uid-of-{result['name']}"
    assert (result["outcome"], result["dryRun"], result["resourceVersion"]) == (
        "created",
        "server",
        "",
    )
    assert {"name", "namespace", "uid", "epochPrefix", "tokenPrefix"} <= set(result)


def test_start_client_still_prints_the_trainjob_alone(
    connect_to: Callable[[Cluster], None], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cluster = Cluster({})
    connect_to(cluster)
    runtime = REPO / "pipelines/runtimes/torch-distributed.yaml"
    flags = [*START_FLAGS, "--dry-run", "--runtime-file", str(runtime)]
    code, [trainjob] = run_main(start.main, flags, capsys)
    assert (code, trainjob["kind"], cluster.sent) == (0, "TrainJob", [])
    assert "dryRun" not in trainjob, "it stays an object kubectl can apply"


@pytest.fixture
def suspended(
    connect_to: Callable[[Cluster], None], capsys: pytest.CaptureFixture[str]
) -> tuple[Cluster, list[str]]:
    """A cluster with a started TrainJob, and flags naming it."""
    cluster, job = started(connect_to, capsys)
    cluster.sent.clear()
    return cluster, [f"--namespace={NAMESPACE}", f"--name={job['metadata']['name']}"]


def test_unsuspend_client_reads_decides_and_prints_the_update_it_would_send(
    suspended: tuple[Cluster, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, target = suspended
    code, [result] = run_main(unsuspend.main, [*target, "--dry-run=client"], capsys)
    assert code == 0
    assert [s.method for s in cluster.sent] == ["GET", "GET"], "the TrainJob, its JobSet"
    check_golden("unsuspend-dry-run-client.json", result)
    [request] = result["requests"]
    assert request["body"]["spec"]["suspend"] is False
    assert (result["admission"], result["dryRun"]) == (1, "client")


@pytest.mark.parametrize("mode", ["server", "none"])
def test_unsuspend_sends_its_one_update_and_an_event_only_for_real(
    suspended: tuple[Cluster, list[str]], capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    cluster, target = suspended
    code, [result] = run_main(unsuspend.main, [*target, f"--dry-run={mode}"], capsys)
    assert (code, result["admission"]) == (0, 1)
    writes = [(w.method, DRY_RUN_ALL in w.query) for w in cluster.writes()]
    if mode == "server":
        assert writes == [("PUT", True)], "no Event"
        assert result["dryRun"] == "server"
    else:
        assert writes == [("PUT", False), ("POST", False)], "the update, then its Event"
        assert "dryRun" not in result


def test_hold_client_prints_the_hold_and_sends_nothing(
    suspended: tuple[Cluster, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, target = suspended
    assert run_main(unsuspend.main, target, capsys)[0] == 0
    cluster.sent.clear()
    code, [result] = run_main(hold.main, [*target, "--dry-run"], capsys)
    assert code == 0
    assert cluster.writes() == []
    [request] = result["requests"]
    assert (request["method"], request["body"]["spec"]["suspend"]) == ("PUT", True)
    assert (result["changed"], result["dryRun"]) == (True, "client")


@pytest.mark.parametrize("mode", ["client", "server"])
def test_approve_dry_runs_its_one_status_apply(
    connect_to: Callable[[Cluster], None], capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    current = workload_dict()
    name = current["metadata"]["name"]
    cluster = Cluster(
        {
            kinds.WORKLOAD.path(NAMESPACE, name): current,
            kinds.TRAINJOB.path(NAMESPACE, "train-1"): raised_trainjob(reservation_record(current)),
        }
    )
    connect_to(cluster)
    flags = [f"--namespace={NAMESPACE}", f"--workload={name}", "--admission=2"]
    flags += ["--workload-resource-version=900", f"--dry-run={mode}"]
    code, [result] = run_main(approve.main, flags, capsys)
    assert (code, result["dryRun"], result["resourceVersion"]) == (0, mode, "900")
    writes = cluster.writes()
    if mode == "server":
        [apply] = writes
        assert apply.method == "PATCH"
        assert {DRY_RUN_ALL, ("fieldManager", workload.CHECK_MANAGER)} <= set(apply.query)
        assert "requests" not in result
    else:
        assert writes == []
        [request] = result["requests"]
        assert request["path"] == kinds.WORKLOAD.path(NAMESPACE, name, subresource="status")
        assert request["body"]["status"]["admissionChecks"][0]["state"] == "Ready"


EMPTY_LIST: Final = {"metadata": {"resourceVersion": "1"}, "items": []}


@pytest.mark.parametrize("mode", ["client", "server"])
def test_audit_dry_runs_its_one_update(
    connect_to: Callable[[Cluster], None], capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    job = trainjob_dict()  # held, its JobSet's UID not yet recorded: the audit records it
    job["spec"]["suspend"] = True
    cluster = Cluster(
        {
            kinds.TRAINJOB.path(NAMESPACE, NAME): job,
            kinds.JOBSET.path(NAMESPACE, NAME): jobset_dict(),
            kinds.JOB.path(NAMESPACE): EMPTY_LIST,
            kinds.POD.path(NAMESPACE): EMPTY_LIST,
        }
    )
    connect_to(cluster)
    flags = [f"--namespace={NAMESPACE}", f"--name={NAME}", f"--dry-run={mode}"]
    code, [result] = run_main(audit.main, flags, capsys)
    assert (code, result["recorded"], result["dryRun"]) == (0, True, mode)
    writes = [(w.method, DRY_RUN_ALL in w.query) for w in cluster.writes()]
    assert writes == ([("PUT", True)] if mode == "server" else [])
    if mode == "client":
        [request] = result["requests"]
        annotations = request["body"]["metadata"]["annotations"]
        assert annotations[wire.JOBSET_UID_ANNOTATION] == UID
