"""The shipped admission policies (pipelines/policies/) installed for the tests.

The policies go in as shipped; their bindings are narrowed to test namespaces by a label, so
one cluster holds three kinds of namespace side by side (and an existing cluster named by
DISPATCH_TEST_KUBECONFIG is touched nowhere else):

- `all`: both policies, what a 1.36 cluster gets (every test, unless it asks otherwise);
- `guard`: the ValidatingAdmissionPolicies only, what a cluster before 1.36 gets;
- `none`: no policy, where only the audit notices a bypass.

The path guard trusts controllers by name (pipelines/policies/controllers.yaml, upstream's
ServiceAccounts): the tests install that ConfigMap with the one name each controller of the
local control plane runs as (upstream's ServiceAccounts in the `releases` layout,
tests/cluster/identities.py), so a rule that trusted the wrong controller, or the admin, fails
here.

A policy acts shortly after it is created (its informer must see it): `install` polls with
server-side dry runs until every policy refuses or raises as it should.
"""

from __future__ import annotations

import copy
import functools
import json
import secrets
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import ledger, wire
from tests.cluster import identities, kube
from tests.cluster.wait import wait_until
from tests.support.requests import trainjob_body
from tests.support.shipped import PIPELINES, Manifest, documents

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
# The ConfigMap of controller identities the path guard's bindings name (controllers.yaml).
CONTROLLERS_NAME: Final = "dispatch-k8s-controllers"
CONTROLLERS_NAMESPACE: Final = "dispatch-system"
# The local control plane's (ControlPlane.controller_users, in its default layout):
# kube-controller-manager runs with --use-service-account-credentials, so each of its
# controllers acts as its own ServiceAccount; kube-scheduler as system:kube-scheduler.
HARNESS_CONTROLLERS: Final = {
    **identities.USERS[identities.DEFAULT_LAYOUT],
    **identities.system_users(),
}


def shipped() -> list[Manifest]:
    """Every object under pipelines/policies/, as shipped."""
    return [doc for path in sorted(POLICIES.glob("*.yaml")) for doc in documents(path)]


def for_tests(document: Manifest, controllers: Mapping[str, str] | None = None) -> Manifest:
    """A shipped object as the tests install it: bindings narrowed to labelled namespaces, and
    the controller identities `controllers` (key: username) when given."""
    document = copy.deepcopy(document)
    values = BOUND_IN.get(document["kind"])
    if values is not None:
        selector = {"matchExpressions": [{"key": LABEL, "operator": "In", "values": values}]}
        document["spec"].setdefault("matchResources", {})["namespaceSelector"] = selector
    if controllers is not None and document["metadata"]["name"] == CONTROLLERS_NAME:
        assert set(controllers) == set(document["data"]), "every shipped key, no other"
        document["data"] = {key: f"{user}\n" for key, user in controllers.items()}
    return document


def namespace_body(name: str, policies: Policies) -> client.V1Namespace:
    """A namespace labelled with the policies that apply in it."""
    return client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={LABEL: policies}))


def install(api: client.ApiClient, runtime: str, *, controllers: Mapping[str, str] | None) -> None:
    """Apply the policies, their bindings and parameters (the controllers' identities, or the
    shipped ones when None), then wait until each one acts."""
    core = client.CoreV1Api(api)
    try:  # the parameters' namespace (pipelines/controller/ makes it in an install)
        core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=CONTROLLERS_NAMESPACE))
        )
    except ApiException as e:
        if e.status != 409:
            raise
    for document in shipped():
        kube.apply(api, for_tests(document, controllers), namespace=None)
    wait_acting(api, runtime)


def wait_acting(api: client.ApiClient, runtime: str) -> None:
    """Wait until every policy refuses or raises as it should, probed in a namespace of its
    own (labelled `all`, so the tests' narrowed bindings apply there too), deleted after."""
    core = client.CoreV1Api(api)
    namespace = f"dispatch-policy-probe-{secrets.token_hex(3)}"
    core.create_namespace(namespace_body(namespace, "all"))
    try:
        _wait_acting(api, namespace, runtime)
    finally:
        core.delete_namespace(namespace)


def _probe_body(namespace: str, runtime: str) -> dict[str, Any]:
    return trainjob_body(
        "policy-probe", runtime=runtime, namespace=namespace, image="registry.example/probe:1"
    )


def _probe_trainjob(api: client.ApiClient, namespace: str, runtime: str) -> dict[str, Any]:
    body = _probe_body(namespace, runtime)

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


def _refusal(attempt: Callable[[], object], rule: str, *, made: bool = True) -> bool | None:
    """True once `attempt` is refused by the guard rule `rule`; None while it is not yet, and
    while the object it acts on is not `made` yet (a controller builds it)."""
    try:
        attempt()
    except ApiException as e:
        if f"dispatch-k8s guard {rule}" in str(e.body):
            return True
        if e.status == 409:  # a controller wrote meanwhile: try again from a fresh read
            return None
        if e.status == 404 and not made:
            return None
        # A binding made with its parameters (a fresh install) refuses everything until its
        # informer has seen the ConfigMap: acting, but not yet as the rule says.
        if "no params found for policy binding" in str(e.body):
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

    def job_deleted() -> object:
        return client.BatchV1Api(api).delete_namespaced_job(
            f"{name}-node-0", namespace, dry_run="All"
        )

    # Trainer builds the JobSet, JobSet the Job.
    for attempt, rule, what in (
        (jobset_deleted, "keep-jobset", "JobSet"),
        (job_deleted, "keep-job", "child Job"),
    ):
        wait_until(
            functools.partial(_refusal, attempt, rule, made=False),
            what=f"the {what} guard to refuse",
            timeout=ACTING_TIMEOUT,
        )
    core = client.CoreV1Api(api)
    # The ledger at creation reads the namespace's records as its parameters: a record of the
    # probe's identity, then a copy of the probe under another name (the namespace goes after).
    kube.apply(api, ledger.build_created(job, "probe-uid"), namespace=namespace)
    copied = _probe_body(namespace, runtime)
    copied["metadata"]["name"] = "policy-probe-copy"
    wait_until(
        lambda: _refusal(
            lambda: custom.create_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", copied, dry_run="All"
            ),
            "ledger-spent",
        ),
        what="the ledger to refuse a spent identity",
        timeout=ACTING_TIMEOUT,
    )
    wait_until(
        lambda: _refusal(
            lambda: core.create_namespaced_pod(namespace, forged_pod(), dry_run="All"),
            "pod-create",
        ),
        what="the pod guard to refuse",
        timeout=ACTING_TIMEOUT,
    )


def forged_pod() -> client.V1Pod:
    """A pod carrying an admission count that no controller gave it: the guard refuses it."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name="policy-probe", annotations={wire.ADMISSION_ANNOTATION: "1"}
        ),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="probe")]),
    )


def message(error: ApiException) -> str:
    """The API server's message of a refused request."""
    return str(json.loads(str(error.body))["message"])


def refused_with(rule: str, attempt: Callable[[], object]) -> str:
    """The message of `attempt`'s refusal, which must name guard rule `rule` (HTTP 403)."""
    with pytest.raises(ApiException) as refused:
        attempt()
    text = message(refused.value)
    assert refused.value.status == 403, text
    assert f"dispatch-k8s guard {rule}:" in text, text
    return text
