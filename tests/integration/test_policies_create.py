"""Creation on the real API server: a managed TrainJob is created only as `dispatch-start`
makes it (pipelines/policies/guard.yaml: create-initial, create-identity-env), and an identity
the ledger says was started is not made again (pipelines/policies/ledger.yaml: ledger-spent);
where no policy is installed, the audit finds the TrainJob made again by its UID.

Every create is a team member's (tests/support/team.py), of what a person has at hand: start's
own dry-run output, or a live job as `kubectl get -o yaml` shows it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import ledger, wire
from dispatch_k8s.core.shell.gateway import Gateway
from dispatch_k8s.steps import start
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.lifecycle import (
    DEADLINE,
    TRAINER,
    Kubelet,
    Step,
    read_trainjob,
    run_stage,
    start_args,
)
from tests.support.policies import refused_with
from tests.support.replicas import replicas
from tests.support.shipped import TORCH_RUNTIME

pytestmark = pytest.mark.integration
Edit = Callable[[dict[str, Any]], None]
SERVER_FIELDS: Final = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
)


def dry_run_output(
    step: Step, namespace: str, runtime: str, job_id: str, submission: str = "7"
) -> dict[str, Any]:
    """What `dispatch-start --dry-run=client` prints for the request: the TrainJob it would make."""
    flags = [
        f"--submission={submission}" if flag.startswith("--submission=") else flag
        for flag in start_args(namespace, runtime, job_id)
    ]
    printed = step("start", "--dry-run=client", f"--runtime-file={TORCH_RUNTIME}", *flags)
    assert printed.code == 0, printed.error
    return printed.result


def as_kubectl_gets_it(live: dict[str, Any], name: str) -> dict[str, Any]:
    """A live TrainJob as `kubectl get -o yaml` shows it, made ready for `kubectl create` under
    another name: what the API server would refuse to create (its UID, resourceVersion and
    status; Kueue's runtime patch, which Kueue's webhook adds again) taken out, all else kept."""
    body = copy.deepcopy(live)
    body.pop("status", None)
    body["spec"]["runtimePatches"] = [
        p for p in body["spec"]["runtimePatches"] if p["manager"] == wire.PATCH_MANAGER
    ]
    for key in SERVER_FIELDS:
        body["metadata"].pop(key, None)
    body["metadata"]["name"] = name
    return body


def create_as(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    made = client.CustomObjectsApi(api).create_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", body
    )
    assert isinstance(made, dict)
    return made


def _our_a(job: dict[str, Any], value: str) -> None:
    (entry,) = [p for p in job["spec"]["runtimePatches"] if p["manager"] == wire.PATCH_MANAGER]
    replicated = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    replicated["template"]["spec"]["template"]["metadata"]["annotations"][
        wire.ADMISSION_ANNOTATION
    ] = value


def _annotation(key: str, value: str) -> Edit:
    def edit(job: dict[str, Any]) -> None:
        job["metadata"]["annotations"][key] = value

    return edit


def _env(name: str, value: str) -> Edit:
    def edit(job: dict[str, Any]) -> None:
        (entry,) = [e for e in job["spec"]["trainer"]["env"] if e["name"] == name]
        entry["value"] = value

    return edit


def _submission_only(job: dict[str, Any]) -> None:
    """Another N in the annotations, the env left with the first one's epochs."""
    job["metadata"]["annotations"][wire.SUBMISSION_ANNOTATION] = "8"


RECORDS: Final = (
    wire.OPEN_UNTIL_GENERATION_ANNOTATION,
    wire.LAST_EXECUTION_ANNOTATION,
    wire.HIGHEST_RESTART_ANNOTATION,
    wire.JOBSET_UID_ANNOTATION,
    wire.RAISED_FOR_ANNOTATION,
)
LAST_EXECUTION: Final = json.dumps({"pod": "forged", "r": 1, "slot": "pinned/0/0"})
# Each forgery of start's initial state: its rule, and the field the message names.
FORGED: Final[dict[str, tuple[str, str, Edit]]] = {
    "floor": (
        "create-initial",
        wire.ADMISSION_FLOOR_ANNOTATION,
        _annotation(wire.ADMISSION_FLOOR_ANNOTATION, "1"),
    ),
    "a": ("create-initial", wire.ADMISSION_ANNOTATION, lambda job: _our_a(job, "1")),
    "open-until": (
        "create-initial",
        wire.OPEN_UNTIL_GENERATION_ANNOTATION,
        _annotation(wire.OPEN_UNTIL_GENERATION_ANNOTATION, "999999"),
    ),
    "last-execution": (
        "create-initial",
        wire.LAST_EXECUTION_ANNOTATION,
        _annotation(wire.LAST_EXECUTION_ANNOTATION, LAST_EXECUTION),
    ),
    "highest-restart": (
        "create-initial",
        wire.HIGHEST_RESTART_ANNOTATION,
        _annotation(wire.HIGHEST_RESTART_ANNOTATION, "0"),
    ),
    "jobset-uid": (
        "create-initial",
        wire.JOBSET_UID_ANNOTATION,
        _annotation(wire.JOBSET_UID_ANNOTATION, "5f0c1a2e-0000-4000-8000-000000000009"),
    ),
    "raised-for": (
        "create-initial",
        wire.RAISED_FOR_ANNOTATION,
        _annotation(wire.RAISED_FOR_ANNOTATION, "uid 2026-12-06T00:00:00Z"),
    ),
    "epoch-prefix": (
        "create-identity-env",
        wire.ENV_EPOCH_PREFIX,
        _env(wire.ENV_EPOCH_PREFIX, "3000008"),
    ),
    "token-prefix": (
        "create-identity-env",
        wire.ENV_TOKEN_PREFIX,
        _env(wire.ENV_TOKEN_PREFIX, "other.7.1"),
    ),
    "submission-alone": ("create-identity-env", wire.ENV_EPOCH_PREFIX, _submission_only),
}


@pytest.mark.parametrize("forged", sorted(FORGED))
def test_each_record_forged_at_creation_is_refused_with_its_rule(
    forged: str, step: Step, namespace: str, torch_runtime: str, member: client.ApiClient
) -> None:
    """start's dry-run output of an identity never started, with one record forged."""
    rule, field, edit = FORGED[forged]
    body = dry_run_output(step, namespace, torch_runtime, f"forged-{forged}")
    edit(body)
    said = refused_with(rule, lambda: create_as(member, namespace, body))
    assert field in said, said


def test_start_and_its_dry_run_output_are_created(
    step: Step,
    namespace: str,
    torch_runtime: str,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    """Start's initial state passes: its own create, and its dry-run output created by hand
    for an identity never started (which a later start of the same request takes as its own)."""
    started = step("start", *start_args(namespace, torch_runtime, "by-start"))
    assert (started.code, started.result["outcome"]) == (0, "created"), started.error

    made = create_as(member, namespace, dry_run_output(step, namespace, torch_runtime, "by-hand"))
    adopted = step("start", *start_args(namespace, torch_runtime, "by-hand"))
    assert (adopted.code, adopted.result["outcome"]) == (0, "exists"), adopted.error
    assert adopted.result["uid"] == made["metadata"]["uid"]
    annotations = read_trainjob(custom, namespace, made["metadata"]["name"])["metadata"][
        "annotations"
    ]
    assert annotations[wire.ADMISSION_FLOOR_ANNOTATION] == "0"


def _deleted(custom: client.CustomObjectsApi, namespace: str, name: str) -> None:
    custom.delete_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)

    def gone() -> bool | None:
        try:
            read_trainjob(custom, namespace, name)
        except ApiException as e:
            return True if e.status == 404 else None
        return None

    wait_until(gone, what=f"TrainJob {name} to go", timeout=DEADLINE)


@pytest.mark.policies("guard")
def test_a_started_identity_is_not_created_again_by_hand(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    """Deleted and made again from start's dry-run output, or copied under another name while
    it lives: refused, naming the ledger record; a new N is created."""
    started = step("start", *start_args(namespace, torch_runtime, "spent"))
    assert started.code == 0, started.error
    name = started.result["name"]
    assert run_stage(step, "unsuspend", "--namespace", namespace, "--name", name).code == 0
    kubelet.wait_for_pod(name, restart=0, admission=1)
    live = read_trainjob(custom, namespace, name)

    copied = as_kubectl_gets_it(live, f"{name}-copy")
    copied["spec"]["suspend"] = True  # start's initial state, as the guard asks
    for key in RECORDS:
        copied["metadata"]["annotations"].pop(key, None)
    _our_a(copied, "0")
    copied["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] = "0"
    said = refused_with("ledger-spent", lambda: create_as(member, namespace, copied))
    assert started.result["uid"] in said, said

    _deleted(custom, namespace, name)
    again = dry_run_output(step, namespace, torch_runtime, "spent")
    said = refused_with("ledger-spent", lambda: create_as(member, namespace, again))
    assert "new submission number N" in said, said
    record = ledger.created_name(again)
    assert f"ledger record {record}" in said, said

    create_as(member, namespace, dry_run_output(step, namespace, torch_runtime, "spent", "8"))


@pytest.mark.policies("none")
def test_without_the_policies_the_audit_finds_a_trainjob_made_again(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    started = step("start", *start_args(namespace, torch_runtime, "remade"))
    assert started.code == 0, started.error
    name, first_uid = started.result["name"], started.result["uid"]
    target = ["--namespace", namespace, "--name", name]
    assert run_stage(step, "unsuspend", *target).code == 0
    first_pod = kubelet.wait_for_pod(name, restart=0, admission=1)
    first = kubelet.execute(first_pod)
    assert run_stage(step, "audit", *target).code == 0

    _deleted(custom, namespace, name)
    made = create_as(member, namespace, dry_run_output(step, namespace, torch_runtime, "remade"))
    assert run_stage(step, "unsuspend", *target).code == 0

    def made_again() -> dict[str, Any] | None:
        pod = kubelet.wait_for_pod(name, restart=0, admission=1)
        return pod if pod["metadata"]["uid"] != first_pod["metadata"]["uid"] else None

    second = kubelet.execute(wait_until(made_again, what="its execution", timeout=DEADLINE))
    assert second.epoch == first.epoch, "nothing stopped it: the first one's epoch again"

    for audit in (target, ["--namespace", namespace, "--all"]):
        audited = run_stage(step, "audit", *audit)
        assert audited.code == 7, audited.error
        assert "made again outside start" in audited.stderr
        assert first_uid in audited.stderr
        assert made["metadata"]["uid"] in audited.stderr
    annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
    assert annotations[wire.FOREIGN_ANNOTATION] == wire.FOREIGN
    assert "made again outside start" in annotations[wire.FOREIGN_CAUSE_ANNOTATION]


@pytest.mark.policies("none")
def test_without_the_policies_the_auditor_flags_a_trainjob_made_again(
    control_plane: Cluster,
    step: Step,
    namespace: str,
    torch_runtime: str,
    member: client.ApiClient,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """The admission controller's auditor compares the UID as dispatch-audit does, as soon as
    the TrainJob made again appears (no execution, no audit step needed)."""
    started = step("start", *start_args(namespace, torch_runtime, "remade-seen"))
    assert started.code == 0, started.error
    name = started.result["name"]
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "auditor"):
        _deleted(custom, namespace, name)
        body = dry_run_output(step, namespace, torch_runtime, "remade-seen")
        made = create_as(member, namespace, body)

        def flagged() -> str | None:
            annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
            cause = annotations.get(wire.FOREIGN_CAUSE_ANNOTATION, "")
            return cause if "made again outside start" in cause else None

        cause = wait_until(flagged, what=f"the auditor to flag {name}", timeout=DEADLINE)
    assert made["metadata"]["uid"] in cause
    assert started.result["uid"] in cause


class AnotherStartFirst(Gateway):
    """The steps' gateway, whose create of the TrainJob comes after another start of the same
    request made its TrainJob and the record of it: the start that lost the race."""

    def __init__(self, gateway: Gateway) -> None:
        super().__init__(gateway._api)
        self._other = gateway

    def create_trainjob(self, trainjob: Any) -> dict[str, Any] | None:
        _made, outcome = start._create(self._other, trainjob)
        assert outcome == "created"
        return super().create_trainjob(trainjob)


def test_a_start_that_lost_the_race_to_another_finds_its_trainjob(
    control_plane: Cluster, namespace: str, torch_runtime: str, step: Step
) -> None:
    """The ledger policy refuses the second create before the API server says the name is
    taken: start reads the ledger again and finds the first one's TrainJob (exit 0)."""
    gateway = Gateway.connect(kubeconfig=control_plane.kubeconfig, context=None)
    wanted = dry_run_output(step, namespace, torch_runtime, "raced")
    found, outcome = start._create(AnotherStartFirst(gateway), wanted)
    assert outcome == "exists"
    record = gateway.find_config_map(namespace, ledger.created_name(wanted))
    assert record is not None
    assert record["data"][ledger.TRAINJOB_UID_KEY] == found["metadata"]["uid"]
