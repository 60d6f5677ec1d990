"""A ValidatingAdmissionPolicy of a test's own, bound to the test's namespace alone: it refuses
the TrainJob updates a test names, so a step or the controller meets a real refusal from the
real API server's admission, where and when the test wants one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import wire
from tests.cluster import kube
from tests.cluster.wait import wait_until
from tests.support.lifecycle import DEADLINE, TRAINER, read_trainjob


def trainjob_update_policy(
    namespace: str, name: str, expression: str, message: str
) -> list[dict[str, Any]]:
    """The policy `name` and its binding to `namespace`: an UPDATE of a TrainJob for which the
    CEL `expression` (over object and oldObject) is false is refused with `message`."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [wire.TRAINER_GROUP],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE"],
                        "resources": ["trainjobs"],
                    }
                ]
            },
            "validations": [{"expression": expression, "message": message}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    return [policy, binding]


@contextmanager
def applied(api_client: client.ApiClient, documents: list[dict[str, Any]]) -> Iterator[None]:
    """The policy installed; removed before the namespace is (its deletion updates)."""
    for document in documents:
        kube.apply(api_client, document, namespace=None)
    try:
        yield
    finally:
        for document in reversed(documents):
            kube.delete(api_client, document, namespace=None)


def wait_refusing(
    custom: client.CustomObjectsApi,
    namespace: str,
    name: str,
    change: Callable[[dict[str, Any]], None],
    message: str,
) -> None:
    """Wait until the policy acts (its informer must see it): TrainJob `name` with `change`
    made to it, sent as a dry run, is refused with `message`."""

    def refused() -> bool | None:
        job = read_trainjob(custom, namespace, name)
        change(job)
        try:
            custom.replace_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", name, job, dry_run="All"
            )
        except ApiException as e:
            if message in str(e.body):
                return True
            # Trainer wrote the status meanwhile (read again), or the shipped guard refused
            # the change before this policy acts: neither is this policy's answer.
            if e.status == 409 or "dispatch-k8s guard" in str(e.body):
                return None
            raise
        return None

    wait_until(refused, what="the test's policy to refuse the change", timeout=DEADLINE)
