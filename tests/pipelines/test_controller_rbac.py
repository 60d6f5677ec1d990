"""The shipped admission controller (pipelines/controller/) on the real API server.

Its manifests are accepted as written (strict field validation), its pod passes Pod
Security "restricted", and its Deployment's command line parses with the controller's own
parser into the Lease the Role names. Its RBAC is enough: the controller, run with a token of
the shipped ServiceAccount (TokenRequest API), raises and approves a queued TrainJob, keeps
its AdmissionCheck Active, holds its Lease and records its Event. And nothing more: the
server's rules review lists only the shipped grants, and anything else is 403.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.controller.settings import ControllerSettings
from dispatch_k8s.core.rules import events, wire
from dispatch_k8s.core.shell.settings import load_settings
from tests.cluster import kube
from tests.cluster.process import free_ports
from tests.cluster.wait import wait_until
from tests.support import cli
from tests.support.cluster_under_test import Cluster
from tests.support.controller_identity import (
    CONTROLLER,
    RBAC,
    SERVICE_ACCOUNT,
    metrics_reader,
)
from tests.support.kueue_objects import KueueSetup
from tests.support.lifecycle import Step, as_dict, read_trainjob, start_args, start_queued
from tests.support.node_controller import pod_of
from tests.support.replicas import admitted, replicas, secure_get
from tests.support.shipped import Manifest, documents
from tests.support.step_identity import (
    StepIdentity,
    granted_by_the_server,
    service_account_token,
    shipped_grants,
)

pytestmark = [pytest.mark.pipelines, pytest.mark.cluster]
SCRIPT: Final = cli.CONTROLLER
TRAINER: Final = (wire.TRAINER_GROUP, wire.TRAINER_VERSION)
KUEUE: Final = (wire.KUEUE_GROUP, wire.KUEUE_VERSION)
DOCUMENTS: Final = [
    (path, document) for path in sorted(CONTROLLER.glob("*.yaml")) for document in documents(path)
]
IDS: Final = [f"{path.name}:{doc['kind']}/{doc['metadata']['name']}" for path, doc in DOCUMENTS]


def shipped(kind: str) -> Manifest:
    """The one shipped object of `kind` under pipelines/controller/."""
    found = [copy.deepcopy(doc) for _, doc in DOCUMENTS if doc["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


# --- the manifests ------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "document"), DOCUMENTS, ids=IDS)
def test_the_api_server_accepts_it(
    path: Path, document: Manifest, api_client: client.ApiClient, namespace: str
) -> None:
    answer = kube.dry_run(api_client, document, namespace=namespace)
    assert (answer["kind"], answer["apiVersion"]) == (document["kind"], document["apiVersion"])
    assert answer["metadata"]["name"] == document["metadata"]["name"]


def test_it_ships_the_whole_controller() -> None:
    kinds = sorted(doc["kind"] for _, doc in DOCUMENTS)
    assert kinds == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "PodDisruptionBudget",
        ]
    )
    # `kubectl apply -f pipelines/controller/` applies files in name order: namespace first.
    assert DOCUMENTS[0][1]["kind"] == "Namespace"
    # Namespaced objects name no namespace: `kubectl apply -n` places them.
    assert all("namespace" not in doc["metadata"] for _, doc in DOCUMENTS)


def test_the_pod_passes_pod_security_restricted(
    api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    assert shipped("Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == (
        "restricted"
    )
    core.patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    kube.apply(api_client, shipped("ServiceAccount"), namespace=namespace)
    deployment = shipped("Deployment")
    answer = kube.dry_run(api_client, pod_of(deployment, "controller"), namespace=namespace)
    assert answer["spec"]["serviceAccountName"] == SERVICE_ACCOUNT
    # The check is real: the same pod without the capabilities drop is refused.
    loose = pod_of(deployment, "loose")
    del loose["spec"]["containers"][0]["securityContext"]["capabilities"]
    with pytest.raises(ApiException) as refused:
        kube.dry_run(api_client, loose, namespace=namespace)
    assert refused.value.status == 403
    assert "violates PodSecurity" in json.loads(str(refused.value.body))["message"]


def test_the_deployment_command_parses_into_the_lease_the_role_names() -> None:
    deployment = shipped("Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    (container,) = spec["template"]["spec"]["containers"]
    assert container["command"] == [SCRIPT]
    assert SCRIPT in cli.console_scripts()
    pod = {"metadata.name": "dispatch-admission-controller-7d9-x2", "metadata.namespace": "ns-a"}
    env = {var["name"]: pod[var["valueFrom"]["fieldRef"]["fieldPath"]] for var in container["env"]}
    with cli.environment(env):
        settings = load_settings(ControllerSettings, prog=SCRIPT, argv=container["args"])
    assert settings.address == "0.0.0.0:8080"
    assert settings.metrics_address == "0.0.0.0:8443"
    assert settings.identity == "dispatch-admission-controller-7d9-x2"
    assert settings.lease_namespace == "ns-a"
    port = int(settings.address.rpartition(":")[2])
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"]["path"] == path
        assert named[container[probe]["httpGet"]["port"]] == port
    assert named["https"] == int(settings.metrics_address.rpartition(":")[2])
    # The Role's get/update rule names exactly the default Lease; the binding the namespace.
    role = shipped("Role")
    named_rules = [rule for rule in role["rules"] if rule.get("resourceNames")]
    assert [rule["resourceNames"] for rule in named_rules] == [[settings.lease_name]]
    binding = shipped("ClusterRoleBinding")
    (subject,) = binding["subjects"]
    assert subject["namespace"] == shipped("Namespace")["metadata"]["name"]
    assert ControllerSettings().lease_namespace == subject["namespace"]
    assert subject["name"] == spec["template"]["spec"]["serviceAccountName"] == SERVICE_ACCOUNT


# --- the identity -------------------------------------------------------------------------


def test_the_shipped_identity_runs_the_controller(
    controller_identity: StepIdentity,
    control_plane: Cluster,
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
    tmp_path: Path,
) -> None:
    kueue.install(cpu="1")
    name = start_queued(step, namespace, torch_runtime, kueue, "rbac").result["name"]
    with replicas(controller_identity.kubeconfig, namespace, tmp_path, "sa") as (replica,):
        workload = admitted(custom, namespace, name)
        states = {s["name"]: s for s in workload["status"]["admissionChecks"]}
        assert states[kueue.check]["state"] == "Ready"
        assert states[kueue.check]["message"] == (
            'dispatch: admission count raised to 1, Previously: "Pending"'
        )
        job = read_trainjob(custom, namespace, name)
        assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "1"
        assert replica.metric("dispatch_admission_raises_total") == 1
        assert replica.metric("dispatch_admission_approvals_total", 'kind="dispatch"') == 1
        # admissionchecks/status: it keeps the check Active itself.
        check = custom.get_cluster_custom_object(*KUEUE, "admissionchecks", kueue.check)
        assert isinstance(check, dict)
        active = next(c for c in check["status"]["conditions"] if c["type"] == "Active")
        assert active["status"] == "True"
        assert "dispatch-admission-controller" in active["message"]
        # leases: it created and holds the Lease in its own namespace.
        lease = client.CoordinationV1Api(api_client).read_namespaced_lease(
            "dispatch-admission-controller", namespace
        )
        assert lease.spec is not None
        assert lease.spec.holder_identity == "sa"

        # events: the raise is recorded on the TrainJob (posted after the approval).
        def raised_event() -> bool | None:
            recorded = client.CoreV1Api(api_client).list_namespaced_event(
                namespace, field_selector=f"involvedObject.name={name}"
            )
            return events.RAISED in {event.reason for event in recorded.items} or None

        wait_until(raised_event, what=f"an {events.RAISED} Event on {name}", timeout=30)

        # trainjobs list/watch/update, jobsets, jobs and pods list/watch, runtimes get: the
        # auditor records the execution that began on the pod Kubernetes made, unasked.
        def recorded() -> str | None:
            annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
            value = annotations.get(wire.LAST_EXECUTION_ANNOTATION)
            return str(value) if value else None

        execution = wait_until(recorded, what=f"the auditor to record {name}'s execution")
        assert '"r":1' in execution
        assert replica.metric("dispatch_admission_audits_total", 'outcome="recorded"') >= 1
        assert replica.metric("dispatch_admission_audits_total", 'outcome="error"') == 0
        assert replica.metric("dispatch_admission_watched_objects", 'kind="trainjobs"') == 1
        # configmaps list/watch: it keeps the job's runtime snapshot, where Trainer took one.
        kept = client.CoreV1Api(api_client).list_namespaced_config_map(namespace).items
        taken = {as_dict(c)["metadata"]["name"] for c in kept} & {
            f"{name}{wire.RUNTIME_SNAPSHOT_SUFFIX}"
        }
        assert replica.metric("dispatch_admission_watched_objects", 'kind="snapshots"') == len(
            taken
        )
        assert replica.stop() == 0
    # Nothing it tried was refused. Every API error is told as "<status> <phrase>: …", so the
    # phrase is matched with the status: a bare "403" also occurs in timestamps and UIDs.
    refused = [r for r in replica.records() if "403 Forbidden" in json.dumps(r)]
    assert refused == []
    assert any(r["message"] == "released the leader Lease" for r in replica.records())


def lease(name: str) -> client.V1Lease:
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name=name), spec=client.V1LeaseSpec(holder_identity="x")
    )


def test_the_controller_identity_can_do_nothing_more(
    controller_identity: StepIdentity,
    step: Step,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
) -> None:
    started = step("start", *start_args(namespace, torch_runtime, "rbac-more"))
    assert started.code == 0, started.error
    name = started.result["name"]
    with contextlib.closing(controller_identity.api_client()) as api:
        assert granted_by_the_server(api, namespace) == shipped_grants(RBAC)
        # Elsewhere only the cluster-wide grants: no Lease of its own there.
        elsewhere = {r for r in shipped_grants(RBAC) if r[1] != "leases"}
        assert granted_by_the_server(api, "default") == elsewhere
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        leases = client.CoordinationV1Api(api)
        # What it may do, to show the refusals below are not a broken token.
        assert read_trainjob(custom, namespace, name)["metadata"]["name"] == name
        # The auditor's reads: what it lists and watches, cluster-wide.
        listed = custom.list_namespaced_custom_object(*TRAINER, namespace, "trainjobs")
        assert isinstance(listed, dict)
        assert [item["metadata"]["name"] for item in listed["items"]] == [name]
        assert core.list_pod_for_all_namespaces(limit=1).items is not None
        batch = client.BatchV1Api(api)
        assert batch.list_job_for_all_namespaces(limit=1).items is not None
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name="p"),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="x")]),
        )
        workload = {
            "apiVersion": "/".join(KUEUE),
            "kind": "Workload",
            "metadata": {"name": "any", "resourceVersion": "1"},
            "spec": {"active": False},
        }
        attempts: dict[str, Callable[[], Any]] = {
            "read a Secret": lambda: core.read_namespaced_secret("any", namespace),
            "list Secrets": lambda: core.list_namespaced_secret(namespace),
            "list Secrets cluster-wide": lambda: core.list_secret_for_all_namespaces(),
            "read a pod": lambda: core.read_namespaced_pod("any", namespace),
            "create a pod": lambda: core.create_namespaced_pod(namespace, pod),
            "delete a pod": lambda: core.delete_namespaced_pod("any", namespace),
            "patch a pod": lambda: core.patch_namespaced_pod(
                "any", namespace, {"metadata": {"labels": {"x": "y"}}}
            ),
            "delete a Job": lambda: batch.delete_namespaced_job("any", namespace),
            "patch a Job": lambda: batch.patch_namespaced_job(
                "any", namespace, {"spec": {"suspend": True}}
            ),
            "patch a JobSet": lambda: custom.patch_namespaced_custom_object(
                wire.JOBSET_GROUP, wire.JOBSET_VERSION, namespace, "jobsets", name, {}
            ),
            "delete a JobSet": lambda: custom.delete_namespaced_custom_object(
                wire.JOBSET_GROUP, wire.JOBSET_VERSION, namespace, "jobsets", name
            ),
            "edit a runtime": lambda: custom.patch_cluster_custom_object(
                *TRAINER, "clustertrainingruntimes", "any", {"metadata": {"labels": {"x": "y"}}}
            ),
            "delete the TrainJob": lambda: custom.delete_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", name
            ),
            "patch the TrainJob": lambda: custom.patch_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", name, {"metadata": {"labels": {"x": "y"}}}
            ),
            "create a TrainJob": lambda: custom.create_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", {"metadata": {"name": "x"}}
            ),
            "update a Workload's spec": lambda: custom.replace_namespaced_custom_object(
                *KUEUE, namespace, "workloads", "any", workload
            ),
            "patch a Workload's spec": lambda: custom.patch_namespaced_custom_object(
                *KUEUE, namespace, "workloads", "any", {"spec": {"active": False}}
            ),
            "delete a Workload": lambda: custom.delete_namespaced_custom_object(
                *KUEUE, namespace, "workloads", "any"
            ),
            "edit an AdmissionCheck's spec": lambda: custom.patch_cluster_custom_object(
                *KUEUE, "admissionchecks", "any", {"spec": {"controllerName": "x"}}
            ),
            "read another Lease": lambda: leases.read_namespaced_lease("other", namespace),
            "take another Lease": lambda: leases.replace_namespaced_lease(
                "other", namespace, lease("other")
            ),
            "make a Lease in another namespace": lambda: leases.create_namespaced_lease(
                "default", lease(SERVICE_ACCOUNT)
            ),
            # It reads the ledger's ConfigMaps by name and lists and watches them for Trainer's
            # runtime snapshots; it writes none.
            "write a ConfigMap": lambda: core.patch_namespaced_config_map(
                "any", namespace, {"metadata": {"labels": {"x": "y"}}}
            ),
        }
        for what, attempt in attempts.items():
            with pytest.raises(ApiException) as refused:
                attempt()
            assert refused.value.status == 403, f"{what}: {refused.value.status}"
    job = read_trainjob(client.CustomObjectsApi(api_client), namespace, name)
    assert "x" not in (job["metadata"].get("labels") or {})
    assert job["metadata"].get("deletionTimestamp") is None


def test_the_shipped_identity_serves_metrics_to_the_reader_role_only(
    controller_identity: StepIdentity,
    namespace: str,
    api_client: client.ApiClient,
    tmp_path: Path,
) -> None:
    """--metrics-address under the shipped RBAC (tokenreviews and subjectaccessreviews
    create): the API server reviews real ServiceAccount tokens; the one bound to
    pipelines/monitoring/metrics-reader.yaml's ClusterRole reads /metrics, another is
    refused, no token or a forged one is not authenticated."""
    client.CoreV1Api(api_client).create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="someone"))
    )
    with metrics_reader(api_client, namespace) as token:
        (port,) = free_ports(1)
        apart = ("--metrics-address", f"127.0.0.1:{port}")
        with replicas(controller_identity.kubeconfig, namespace, tmp_path, "sa", extra=apart) as (
            replica,
        ):

            def let_in() -> bytes | None:
                status, body, _ = secure_get(port, "/metrics", token)
                return body if status == 200 else None

            # A 403 while the binding reaches the authorizer is remembered for a minute.
            body = wait_until(let_in, what="the reader's scrape to be let in", timeout=90)
            assert b"dispatch_admission_leader" in body
            other = service_account_token(api_client, namespace, "someone")
            assert secure_get(port, "/metrics", other)[:2] == (403, b"Forbidden\n")
            assert secure_get(port, "/metrics", None)[0] == 401
            assert secure_get(port, "/metrics", f"{token[:-4]}AAAA")[0] == 401, "forged"
            assert replica.get("/metrics")[0] == 404, "the probes' port serves no metrics"
            assert replica.get("/readyz")[0] == 200
            assert replica.stop() == 0
        refused = [r for r in replica.records() if "403 Forbidden" in json.dumps(r)]
        assert refused == [], "the shipped RBAC lets it review"
