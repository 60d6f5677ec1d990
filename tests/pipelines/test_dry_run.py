"""Every manifest under pipelines/ passes a server-side dry run on the real API server, with
strict field validation: the Kubernetes kinds by the server itself, the runtimes through
Trainer's webhook, the Kueue objects through Kueue's, Argo's, Tekton's and prometheus-operator's
kinds against the schemas of their CRDs (installed from their Go modules)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Final

import pytest
from kubernetes import client

from tests.cluster import kube
from tests.support.shipped import PIPELINES, Manifest, all_documents, documents

pytestmark = [pytest.mark.pipelines, pytest.mark.cluster]
DOCUMENTS: Final = list(all_documents())
IDS: Final = [
    f"{path.relative_to(PIPELINES)}:{doc['kind']}/{doc['metadata'].get('name', '-')}"
    for path, doc in DOCUMENTS
]


@pytest.mark.usefixtures("pipeline_crds")
@pytest.mark.parametrize(("path", "document"), DOCUMENTS, ids=IDS)
def test_the_api_server_accepts_it(
    path: Path, document: Manifest, api_client: client.ApiClient, namespace: str
) -> None:
    answer = kube.dry_run(api_client, document, namespace=namespace)
    assert (answer["kind"], answer["apiVersion"]) == (document["kind"], document["apiVersion"])


def test_every_kind_shipped_is_dry_run() -> None:
    kinds = {doc["kind"] for _, doc in DOCUMENTS}
    assert kinds >= {
        "WorkflowTemplate",
        "CronWorkflow",
        "Task",
        "Pipeline",
        "Job",
        "CronJob",
        "ConfigMap",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "AdmissionCheck",
        "ClusterQueue",
        "LocalQueue",
        "ResourceFlavor",
        "ClusterTrainingRuntime",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "Service",
        "ServiceMonitor",
        "PrometheusRule",
    }


def steps_template() -> Manifest:
    return copy.deepcopy(documents(PIPELINES / "argo" / "steps.yaml")[0])


def task(name: str) -> Manifest:
    found = [
        d for d in documents(PIPELINES / "tekton" / "tasks.yaml") if d["metadata"]["name"] == name
    ]
    return copy.deepcopy(found[0])


def misspelt_retry() -> Manifest:
    template = steps_template()
    strategy = template["spec"]["templates"][0]["retryStrategy"]
    strategy["expresion"] = strategy.pop("expression")
    return template


def unknown_retry_policy() -> Manifest:
    template = steps_template()
    template["spec"]["templates"][0]["retryStrategy"]["retryPolicy"] = "OnExitCode"
    return template


def misspelt_step_command() -> Manifest:
    hold = task("dispatch-hold")
    step = hold["spec"]["steps"][0]
    step["comand"] = step.pop("command")
    return hold


def policy(kind: str) -> Manifest:
    found = [d for d in documents(PIPELINES / "policies" / "guard.yaml") if d["kind"] == kind]
    found += [
        d for d in documents(PIPELINES / "policies" / "raise-on-open.yaml") if d["kind"] == kind
    ]
    return copy.deepcopy(found[0])


def guard_with_a_cel_typo() -> Manifest:
    guard = policy("ValidatingAdmissionPolicy")
    rule = guard["spec"]["validations"][0]
    rule["expression"] = rule["expression"].replace("variables.update", "variables.updat")
    return guard


def raise_with_a_syntax_error() -> Manifest:
    raising = policy("MutatingAdmissionPolicy")
    condition = raising["spec"]["matchConditions"][0]
    condition["expression"] = condition["expression"].replace("&&", "&& &&")
    return raising


def guard_with_a_message_of_the_wrong_type() -> Manifest:
    guard = policy("ValidatingAdmissionPolicy")
    guard["spec"]["validations"][2]["messageExpression"] = "object.metadata.generation"
    return guard


@pytest.mark.usefixtures("pipeline_crds")
@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (misspelt_retry, 'unknown field "spec.templates[0].retryStrategy.expresion"'),
        (unknown_retry_policy, "Unsupported value"),
        (misspelt_step_command, 'unknown field "spec.steps[0].comand"'),
        (guard_with_a_cel_typo, "compilation failed"),
        (raise_with_a_syntax_error, "compilation failed"),
        (guard_with_a_message_of_the_wrong_type, "must evaluate to string"),
    ],
    ids=[
        "argo-misspelt-field",
        "argo-bad-enum",
        "tekton-misspelt-field",
        "guard-cel-typo",
        "raise-cel-syntax",
        "guard-message-type",
    ],
)
def test_the_dry_run_catches_a_broken_manifest(
    broken: Callable[[], Manifest], message: str, api_client: client.ApiClient, namespace: str
) -> None:
    """The validation is real: a typo the YAML parser accepts is refused by the server."""
    assert message in kube.refusal(api_client, broken(), namespace=namespace)
