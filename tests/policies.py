"""The shipped admission policies (pipelines/policies/) installed for the tests.

The policies go in as shipped; their bindings are narrowed to test namespaces by a label, so
one cluster holds three kinds of namespace side by side (and an existing cluster named by
DISPATCH_TEST_KUBECONFIG is touched nowhere else):

- `all`: both policies, what a 1.36 cluster gets (every test, unless it asks otherwise);
- `guard`: the ValidatingAdmissionPolicies only, what a cluster before 1.36 gets;
- `none`: no policy, where only the audit notices a bypass.

A policy acts shortly after it is created (its informer must see it): `install` polls with
server-side dry runs until every policy refuses or raises as it should.
"""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Callable
from typing import Any, Final, Literal

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core import wire
from tests.pipelines import kube
from tests.requests import trainjob_body
from tests.shipped import PIPELINES, Manifest, documents
from tests.wait import wait_until

POLICIES: Final = PIPELINES / "policies"
LABEL: Final = "dispatch-k8s.test/policies"
Policies = Literal["all", "guard", "none"]
# Which namespaces each binding applies to, by the label's value.
BOUND_IN: Final[dict[str, list[str]]] = {
    "MutatingAdmissionPolicyBinding": ["all"],
    "ValidatingAdmissionPolicyBinding": ["all", "guard"],
}
TRAINER: Final = (wire.TRAINER_GROUP, wire.TRAINER_VERSION)
JOBSET: Final = (wire.JOBSET_GROUP, wire.JOBSET_VERSION)
ACTING_TIMEOUT: Final = 60.0


def shipped() -> list[Manifest]:
    """Every object under pipelines/policies/, as shipped."""
    return [doc for path in sorted(POLICIES.glob("*.yaml")) for doc in documents(path)]


def for_tests(document: Manifest) -> Manifest:
    """A shipped object as the tests install it: bindings narrowed to labelled namespaces."""
    document = copy.deepcopy(document)
    values = BOUND_IN.get(document["kind"])
    if values is not None:
        selector = {"matchExpressions": [{"key": LABEL, "operator": "In", "values": values}]}
        document["spec"].setdefault("matchResources", {})["namespaceSelector"] = selector
    return document


def namespace_body(name: str, policies: Policies) -> client.V1Namespace:
    """A namespace labelled with the policies that apply in it."""
    return client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={LABEL: policies}))


def install(api: client.ApiClient, runtime: str) -> None:
    """Apply the policies and bindings, then wait until each one acts."""
    for document in shipped():
        kube.apply(api, for_tests(document), namespace=None)
    namespace = f"dispatch-policy-probe-{secrets.token_hex(3)}"
    core = client.CoreV1Api(api)
    core.create_namespace(namespace_body(namespace, "all"))
    try:
        _wait_acting(api, namespace, runtime)
    finally:
        core.delete_namespace(namespace)


def _probe_trainjob(api: client.ApiClient, namespace: str, runtime: str) -> dict[str, Any]:
    body = trainjob_body(
        "policy-probe", runtime=runtime, namespace=namespace, image="registry.example/probe:1"
    )

    def created() -> dict[str, Any] | None:
        try:
            answer = client.CustomObjectsApi(api).create_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", body
            )
        except ApiException as e:
            # Right after start-up the API server may not serve a new CRD's kind for a moment.
            if e.status == 503:
                return None
            raise
        assert isinstance(answer, dict)
        return answer

    return wait_until(created, what="the probe TrainJob to be created", timeout=ACTING_TIMEOUT)


def _refusal(attempt: Callable[[], object], rule: str) -> bool | None:
    """True once `attempt` is refused by the guard rule `rule`; None while it is not yet."""
    try:
        attempt()
    except ApiException as e:
        if f"dispatch-k8s guard {rule}" in str(e.body):
            return True
        if e.status == 409:  # a controller wrote meanwhile: try again from a fresh read
            return None
        raise
    return None


def _wait_acting(api: client.ApiClient, namespace: str, runtime: str) -> None:
    custom = client.CustomObjectsApi(api)
    job = _probe_trainjob(api, namespace, runtime)
    name = job["metadata"]["name"]

    def read() -> dict[str, Any]:
        got = custom.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
        assert isinstance(got, dict)
        return got

    def dry_run_replace(body: dict[str, Any]) -> object:
        return custom.replace_namespaced_custom_object(
            *TRAINER, namespace, "trainjobs", name, body, dry_run="All"
        )

    def opened_raises() -> bool | None:
        body = read()
        body["spec"]["suspend"] = False
        try:
            answer = dry_run_replace(body)
        except ApiException as e:
            if e.status == 409 or "dispatch-k8s guard open-after-raise" in str(e.body):
                return None  # the guard acts before the raise does: wait for both
            if e.status == 503:  # the raise needs the CRD's published schema, which lags
                return None
            raise
        assert isinstance(answer, dict)
        return answer["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "1" or None

    def floor_removed() -> object:
        body = read()
        del body["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION]
        return dry_run_replace(body)

    wait_until(opened_raises, what="raise-on-open to raise A", timeout=ACTING_TIMEOUT)
    wait_until(
        lambda: _refusal(floor_removed, "keep-floor"),
        what="the TrainJob guard to refuse",
        timeout=ACTING_TIMEOUT,
    )

    def jobset_deleted() -> object:
        return custom.delete_namespaced_custom_object(
            *JOBSET, namespace, "jobsets", name, dry_run="All"
        )

    def jobset_guarded() -> bool | None:
        try:
            return _refusal(jobset_deleted, "keep-jobset")
        except ApiException as e:
            if e.status == 404:
                return None  # Trainer has not built it yet
            raise

    wait_until(jobset_guarded, what="the JobSet guard to refuse", timeout=ACTING_TIMEOUT)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(
            name="policy-probe",
            labels={wire.JOBSET_NAME_KEY: name},
            annotations={wire.ADMISSION_ANNOTATION: "1"},
        ),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="probe")]),
    )
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, pod)
    change = {"metadata": {"annotations": {wire.ADMISSION_ANNOTATION: "0"}}}
    wait_until(
        lambda: _refusal(
            lambda: core.patch_namespaced_pod("policy-probe", namespace, change, dry_run="All"),
            "keep-pod-admission",
        ),
        what="the pod guard to refuse",
        timeout=ACTING_TIMEOUT,
    )


def message(error: ApiException) -> str:
    """The API server's message of a refused request."""
    return str(json.loads(str(error.body))["message"])
