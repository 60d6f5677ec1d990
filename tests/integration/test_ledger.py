"""The ledger on the real API server: a TrainJob deleted and started again from the same
request is refused (exit 6), nothing created; a new submission N starts; a repeated start is a
no-op; concurrent starts of one request create one TrainJob and one pair of records; and the
records are kept by pipelines/policies/ledger.yaml from a team member with edit rights."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import ledger, runtime, trainjob, wire
from dispatch_k8s.core.rules.request import StartRequest
from dispatch_k8s.core.shell.gateway import Gateway
from dispatch_k8s.steps import start
from tests.cluster.wait import wait_until
from tests.support import policies
from tests.support.cluster_under_test import Cluster
from tests.support.lifecycle import (
    DEADLINE,
    TRAINER,
    Kubelet,
    Step,
    as_dict,
    read_trainjob,
    run_stage,
    start_args,
)
from tests.support.policies import message

pytestmark = pytest.mark.integration
STARTERS: Final = 4
KEEP_LEDGER: Final = "dispatch-k8s guard keep-ledger"


def ledger_records(api: client.ApiClient, namespace: str) -> dict[str, dict[str, Any]]:
    """The namespace's ledger records by name: kind, resourceVersion and data."""
    listed = as_dict(
        client.CoreV1Api(api).list_namespaced_config_map(
            namespace, label_selector=wire.LEDGER_LABEL
        )
    )
    return {
        item["metadata"]["name"]: {
            "kind": item["metadata"]["labels"][wire.LEDGER_LABEL],
            "resourceVersion": item["metadata"]["resourceVersion"],
            "data": item["data"],
        }
        for item in listed["items"]
    }


def the_record_that_it_was_created(records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (record,) = [r for r in records.values() if r["kind"] == wire.LEDGER_CREATED]
    return record


def trainjob_gone(custom: client.CustomObjectsApi, namespace: str, name: str) -> bool | None:
    try:
        custom.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return None


def with_flag(flags: list[str], field: str, value: str) -> list[str]:
    """The same request with another value of one field (`submission`, `attempt`)."""
    return [f"--{field}={value}" if f.startswith(f"--{field}=") else f for f in flags]


def test_a_deleted_trainjob_started_again_is_refused_and_a_new_submission_starts(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
    gateway: Gateway,
) -> None:
    request = start_args(namespace, torch_runtime, "spent")
    first = step("start", *request)
    assert (first.code, first.result["outcome"]) == (0, "created"), first.error
    name, uid = first.result["name"], first.result["uid"]
    records = ledger_records(api_client, namespace)
    assert sorted(r["kind"] for r in records.values()) == [wire.LEDGER_CLAIM, wire.LEDGER_CREATED]
    assert the_record_that_it_was_created(records)["data"][ledger.TRAINJOB_UID_KEY] == uid

    # Started again while it exists (a lost answer, a rerun stage): nothing to do.
    again = step("start", *request)
    assert (again.code, again.result["outcome"], again.result["uid"]) == (0, "exists", uid)
    assert ledger_records(api_client, namespace) == records, "no record written again"

    assert run_stage(step, "unsuspend", "--namespace", namespace, "--name", name).code == 0
    ran = kubelet.execute(kubelet.wait_for_pod(name, restart=0, admission=1))
    assert ran.r == 1
    custom.delete_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
    wait_until(lambda: trainjob_gone(custom, namespace, name), what=f"{name} to go")

    refused = step("start", *request)
    assert refused.code == 6, refused.error
    record = ledger.created_name(wanted_by_start(gateway, spent_request(namespace, torch_runtime)))
    assert f"ledger record {namespace}/{record}" in refused.error
    assert "was started before" in refused.error
    assert "new submission number N" in refused.error
    assert trainjob_gone(custom, namespace, name), "nothing created"
    assert ledger_records(api_client, namespace) == records, "nothing written"

    renewed = step("start", *with_flag(request, "submission", "8"))
    assert (renewed.code, renewed.result["outcome"]) == (0, "created"), renewed.error
    assert renewed.result["epochPrefix"] == "3000008"
    new_name = renewed.result["name"]
    assert new_name != name
    assert run_stage(step, "unsuspend", "--namespace", namespace, "--name", new_name).code == 0
    rerun = kubelet.execute(kubelet.wait_for_pod(new_name, restart=0, admission=1))
    assert rerun.epoch > ran.epoch, "the new N keeps the epochs increasing"
    assert len(ledger_records(api_client, namespace)) == 4


def spent_request(namespace: str, runtime_name: str) -> StartRequest:
    """The request of start_args(namespace, runtime_name, "spent"), as start reads it."""
    return StartRequest.model_validate(
        {
            "job_id": "spent",
            "generation": 3,
            "submission": 7,
            "attempt": 1,
            "image": "registry.example/trainer:1",
            "command": ["python", "train.py"],
            "runtime_name": runtime_name,
            "namespace": namespace,
        }
    )


def wanted_by_start(gateway: Gateway, request: StartRequest) -> dict[str, Any]:
    """The TrainJob `start` builds for `request` (the ledger's records are named from it)."""
    runtime_object = gateway.read_runtime(
        request.runtime_kind, request.runtime_name, request.namespace
    )
    trainer_job = runtime.trainer_job_name(runtime_object)
    assert trainer_job is not None
    return trainjob.build_trainjob(request, trainer_job=trainer_job, runtime=runtime_object)


@pytest.fixture
def gateway(control_plane: Cluster) -> Gateway:
    """The steps' own gateway, as the admin."""
    return Gateway.connect(kubeconfig=control_plane.kubeconfig, context=None)


class EveryoneReadsFirst(Gateway):
    """A gateway whose first create waits until every starter has read: the worst case."""

    def __init__(self, gateway: Gateway, barrier: threading.Barrier) -> None:
        super().__init__(gateway._api)  # one connection for every starter
        self._barrier = barrier
        self._waited = False

    def create_config_map(self, config_map: Any) -> dict[str, Any] | None:
        if not self._waited:
            self._waited = True
            self._barrier.wait(timeout=60)
        return super().create_config_map(config_map)


def test_concurrent_starts_of_one_request_create_one_trainjob_and_one_record(
    namespace: str,
    torch_runtime: str,
    gateway: Gateway,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
) -> None:
    """Every starter reads before any creates (the worst interleaving): one creates each
    object, the others find it made and carry on from it; all exit 0."""
    request = spent_request(namespace, torch_runtime)
    wanted = wanted_by_start(gateway, request)
    barrier = threading.Barrier(STARTERS)

    def starter(_: int) -> tuple[str, str]:
        made, outcome = start._create(EveryoneReadsFirst(gateway, barrier), wanted)
        return str(made["metadata"]["uid"]), outcome

    with ThreadPoolExecutor(STARTERS) as pool:
        outcomes = list(pool.map(starter, range(STARTERS)))
    assert sorted(outcome for _, outcome in outcomes) == ["created"] + ["exists"] * (STARTERS - 1)
    uid = read_trainjob(custom, namespace, request.trainjob_name)["metadata"]["uid"]
    assert {made for made, _ in outcomes} == {uid}
    records = ledger_records(api_client, namespace)
    assert sorted(r["kind"] for r in records.values()) == [wire.LEDGER_CLAIM, wire.LEDGER_CREATED]
    assert the_record_that_it_was_created(records)["data"][ledger.TRAINJOB_UID_KEY] == uid


class TrainerFirst(Gateway):
    """A gateway whose read of the runtime snapshot (before its create of the TrainJob) comes
    after another start of the same request made the TrainJob, and Trainer its JobSet: from
    v2.3.0 Trainer took the snapshot before the JobSet, so the start that lost the race finds
    one there, made for the job it was about to create."""

    def __init__(self, gateway: Gateway, wanted: dict[str, Any]) -> None:
        super().__init__(gateway._api)
        self._other, self._wanted = gateway, wanted
        self.snapshot: dict[str, Any] | None = None

    def find_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        if not name.endswith(wire.RUNTIME_SNAPSHOT_SUFFIX):
            return super().find_config_map(namespace, name)
        _made, outcome = start._create(self._other, self._wanted)
        assert outcome == "created"
        job = self._wanted["metadata"]["name"]
        wait_until(
            lambda: self._other.read_jobset(namespace, job),
            what=f"Trainer to build JobSet {job}",
            timeout=DEADLINE,
        )
        self.snapshot = super().find_config_map(namespace, name)
        return self.snapshot


def test_a_start_that_lost_the_race_to_trainers_snapshot_finds_the_trainjob_made(
    namespace: str, torch_runtime: str, gateway: Gateway, custom: client.CustomObjectsApi
) -> None:
    """A snapshot found before the create is refused only where no TrainJob was made since
    start's reads: here another start of the request made it, so this one carries on from it
    (exit 0, "exists"), as where the create itself loses the race."""
    wanted = wanted_by_start(gateway, spent_request(namespace, torch_runtime))
    racing = TrainerFirst(gateway, wanted)
    made, outcome = start._create(racing, wanted)
    assert outcome == "exists"
    assert (
        made["metadata"]["uid"]
        == read_trainjob(custom, namespace, wanted["metadata"]["name"])["metadata"]["uid"]
    )
    if racing.snapshot is not None:  # v2.3.0 on; v2.2.1 takes none, found from the cluster
        owner = racing.snapshot["metadata"]["ownerReferences"][0]
        assert owner["uid"] == made["metadata"]["uid"]


def test_concurrent_start_processes_agree(
    step: Step, namespace: str, torch_runtime: str, api_client: client.ApiClient
) -> None:
    request = start_args(namespace, torch_runtime, "race-start")
    with ThreadPoolExecutor(STARTERS) as pool:
        runs = list(pool.map(lambda _: step("start", *request), range(STARTERS)))
    assert all(run.code in (0, 3) for run in runs), [run.error for run in runs]
    assert [run.result["outcome"] for run in runs if run.code == 0].count("created") <= 1
    assert sum("created TrainJob" in run.stderr for run in runs) == 1
    assert len({run.result["uid"] for run in runs if run.code == 0}) == 1
    settle = step("start", *request)  # what a rerun of a stage that exited 3 finds
    assert (settle.code, settle.result["outcome"]) == (0, "exists"), settle.error
    records = ledger_records(api_client, namespace)
    record = the_record_that_it_was_created(records)
    assert record["data"][ledger.TRAINJOB_UID_KEY] == settle.result["uid"]
    assert len(records) == 2


def test_a_claim_left_by_a_start_cut_off_before_its_trainjob_lets_the_same_request_go_on(
    step: Step,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
    gateway: Gateway,
) -> None:
    """A claim without the record that its TrainJob was created: no TrainJob was made for
    it that any start saw, so the same request creates it; another attempt of the identity
    is refused."""
    request = spent_request(namespace, torch_runtime)
    assert gateway.create_config_map(ledger.build_claim(wanted_by_start(gateway, request)))
    flags = start_args(namespace, torch_runtime, "spent")
    other = step("start", *with_flag(flags, "attempt", "2"))
    assert other.code == 6, other.error
    assert "for another request" in other.error
    assert trainjob_gone(custom, namespace, request.trainjob_name)
    went_on = step("start", *flags)
    assert (went_on.code, went_on.result["outcome"]) == (0, "created"), went_on.error
    record = the_record_that_it_was_created(ledger_records(api_client, namespace))
    assert record["data"][ledger.TRAINJOB_UID_KEY] == went_on.result["uid"]


# --- pipelines/policies/ledger.yaml -------------------------------------------------------


def refused_by_keep_ledger(attempt: Any) -> str:
    """The message once the ledger policy refuses `attempt` (it acts shortly after it is
    created: tests/support/policies.py waits for the TrainJob guard, not for this one)."""

    def refused() -> str | None:
        try:
            attempt()
        except ApiException as e:
            if e.status == 403 and KEEP_LEDGER in str(e.body):
                return message(e)
            raise
        return None

    return wait_until(refused, what="the ledger policy to refuse", timeout=DEADLINE)


def test_a_team_member_cannot_change_or_delete_a_ledger_record_but_the_namespace_goes(
    step: Step,
    namespace: str,
    torch_runtime: str,
    member: client.ApiClient,
    api_client: client.ApiClient,
    gateway: Gateway,
) -> None:
    members = client.CoreV1Api(member)
    started = step("start", *start_args(namespace, torch_runtime, "kept"))
    assert started.code == 0, started.error
    records = ledger_records(api_client, namespace)
    created = next(n for n, r in records.items() if r["kind"] == wire.LEDGER_CREATED)
    said = refused_by_keep_ledger(
        lambda: members.delete_namespaced_config_map(created, namespace, dry_run="All")
    )
    assert f"ledger record {created}" in said
    assert "(job kept, G 3, N 7)" in said
    assert "deleted only with its namespace" in said
    for change in (
        {"metadata": {"labels": {wire.LEDGER_LABEL: None}}},  # out of the policy's sight
        {"metadata": {"labels": {wire.MANAGED_BY_LABEL: "someone-else"}}},
        {
            "metadata": {
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "0"}
                ]
            }
        },  # for the GC to delete
    ):
        with pytest.raises(ApiException) as changed:
            members.patch_namespaced_config_map(created, namespace, change)
        assert KEEP_LEDGER in message(changed.value)
        assert "may not be changed" in message(changed.value)
    for name in records:
        with pytest.raises(ApiException) as deleted:
            members.delete_namespaced_config_map(name, namespace)
        assert KEEP_LEDGER in message(deleted.value)
    mutable = ledger.build_claim(wanted_by_start(gateway, spent_request(namespace, torch_runtime)))
    mutable["immutable"] = False
    with pytest.raises(ApiException) as made:
        members.create_namespaced_config_map(namespace, mutable)  # type: ignore[arg-type]
    assert "is created immutable" in message(made.value)
    assert ledger_records(api_client, namespace) == records, "every record as it was"

    core = client.CoreV1Api(api_client)
    core.delete_namespace(namespace)

    def namespace_gone() -> bool | None:
        try:
            core.read_namespace(namespace)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return None

    wait_until(namespace_gone, what=f"namespace {namespace} to be deleted", timeout=DEADLINE)


@pytest.mark.policies("none")
def test_without_the_ledger_policy_a_team_member_can_delete_a_record(
    step: Step,
    namespace: str,
    torch_runtime: str,
    member: client.ApiClient,
    api_client: client.ApiClient,
) -> None:
    """What the policy is for: without it, deleting the records lets a deleted TrainJob be
    started again at A = 0 (the audit cannot see that: the TrainJob is new)."""
    members = client.CoreV1Api(member)
    request = start_args(namespace, torch_runtime, "unkept")
    started = step("start", *request)
    assert started.code == 0, started.error
    for name in ledger_records(api_client, namespace):
        members.delete_namespaced_config_map(name, namespace)
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", started.result["name"]
    )
    custom = client.CustomObjectsApi(api_client)
    wait_until(
        lambda: trainjob_gone(custom, namespace, started.result["name"]), what="the TrainJob to go"
    )
    again = step("start", *request)
    assert (again.code, again.result["outcome"]) == (0, "created"), again.error


def test_the_identity_is_the_namespaces_so_one_request_starts_in_a_second_namespace(
    step: Step,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
    custom: client.CustomObjectsApi,
) -> None:
    """docs/design.md §2 (One identity, one namespace), as it is: the ledger is kept in the
    TrainJob's namespace, so the request that ran in one namespace starts again in another
    from A = 0, and its executions are given the first's epochs (DISPATCH_EPOCH has no
    namespace in it). Keeping them apart is the platform's: one dispatcher and one checkpoint
    store per namespace (docs/policies.md: The trust boundary)."""
    core = client.CoreV1Api(api_client)
    other = f"{namespace[:58]}-b"
    core.create_namespace(policies.namespace_body(other, "all"))
    try:
        seen = []
        for where in (namespace, other):
            started = step("start", *start_args(where, torch_runtime, "two-places"))
            assert started.code == 0, started.error
            name = started.result["name"]
            opened = run_stage(step, "unsuspend", "--namespace", where, "--name", name)
            assert (opened.code, opened.result.get("admission")) == (0, 1), opened.error
            env = read_trainjob(custom, where, name)["spec"]["trainer"]["env"]
            prefixes = {e["name"]: e.get("value") for e in env}
            seen.append((prefixes[wire.ENV_EPOCH_PREFIX], prefixes[wire.ENV_TOKEN_PREFIX]))
        assert seen[0] == seen[1], "the same epoch and token prefixes, at the same R = 1"
    finally:
        core.delete_namespace(other)
