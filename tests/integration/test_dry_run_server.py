"""--dry-run=server on the real API server: admission answers each write, nothing is stored.

A policy of the test's own (one ValidatingAdmissionPolicy bound to the test's namespace alone)
refuses opening a suspended TrainJob: a step's dry run meets it as the real write would
(exit 6), and the job is left exactly as it was, with no Event posted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.integration.own_policy import applied, trainjob_update_policy, wait_refusing
from tests.support.lifecycle import (
    TRAINER,
    Step,
    content,
    read_trainjob,
    run_stage,
    start_args,
)

pytestmark = pytest.mark.integration
REFUSAL: Final = "dispatch-k8s test: no TrainJob is opened here"


@pytest.fixture
def no_opening(api_client: client.ApiClient, namespace: str) -> Iterator[None]:
    """A policy that refuses any update opening a suspended TrainJob, bound to `namespace`."""
    documents = trainjob_update_policy(
        namespace,
        f"dispatch-k8s-test-no-open-{namespace}",
        "!(oldObject.spec.?suspend.orValue(false) && !object.spec.?suspend.orValue(false))",
        REFUSAL,
    )
    with applied(api_client, documents):
        yield


def opened(job: dict[str, Any]) -> None:
    job["spec"]["suspend"] = False


def raised_events(namespace: str, name: str, api: client.ApiClient) -> list[client.CoreV1Event]:
    """The Events dispatch-k8s posted about TrainJob `name`."""
    listed = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    )
    return [event for event in listed.items if event.reason == "Raised"]


def started(step: Step, namespace: str, runtime: str, job_id: str) -> str:
    done = step("start", *start_args(namespace, runtime, job_id))
    assert done.code == 0, done.error
    name: str = done.result["name"]
    return name


def test_start_server_dry_run_is_admitted_and_stores_nothing(
    step: Step,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
) -> None:
    args = start_args(namespace, torch_runtime, "dry-start")
    dry = step("start", *args, "--dry-run=server")
    assert dry.code == 0, dry.error
    assert (dry.result["outcome"], dry.result["dryRun"]) == ("created", "server")
    assert dry.result["resourceVersion"] == ""
    listed = custom.list_namespaced_custom_object(*TRAINER, namespace, "trainjobs")
    assert isinstance(listed, dict)
    assert listed["items"] == []
    ledger = client.CoreV1Api(api_client).list_namespaced_config_map(
        namespace, label_selector=wire.LEDGER_LABEL
    )
    assert ledger.items == [], "no record of the identity: it was never claimed"
    real = step("start", *args)
    assert (real.code, real.result["outcome"], real.result["name"]) == (
        0,
        "created",
        dry.result["name"],
    )
    assert "dryRun" not in real.result


def test_unsuspend_server_dry_run_reports_the_raise_and_writes_nothing(
    step: Step, namespace: str, torch_runtime: str, custom: client.CustomObjectsApi
) -> None:
    name = started(step, namespace, torch_runtime, "dry-open")
    before = content(read_trainjob(custom, namespace, name))
    dry = run_stage(step, "unsuspend", "--namespace", namespace, "--name", name, "--dry-run=server")
    assert dry.code == 0, dry.error
    assert (dry.result["admission"], dry.result["dryRun"]) == (1, "server")
    assert content(read_trainjob(custom, namespace, name)) == before


def test_a_policy_refuses_a_server_dry_run_as_it_refuses_the_write(
    step: Step,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
    no_opening: None,
) -> None:
    name = started(step, namespace, torch_runtime, "refused-open")
    wait_refusing(custom, namespace, name, opened, REFUSAL)
    before = content(read_trainjob(custom, namespace, name))
    target = ["--namespace", namespace, "--name", name]

    dry = run_stage(step, "unsuspend", *target, "--dry-run=server")
    assert dry.code == 6, dry.error
    assert REFUSAL in dry.error
    assert content(read_trainjob(custom, namespace, name)) == before

    real = run_stage(step, "unsuspend", *target)
    assert real.code == 6, "the same refusal, the same exit code"
    assert REFUSAL in real.error
    assert content(read_trainjob(custom, namespace, name)) == before
    assert raised_events(namespace, name, api_client) == []

    client_side = run_stage(step, "unsuspend", *target, "--dry-run=client")
    assert client_side.code == 0, "nothing is sent, so nothing refuses it"
    [request] = client_side.result["requests"]
    assert request["body"]["spec"]["suspend"] is False
