"""The shipped controller Deployment's pod on the real node as it ships: the image, command,
args, env, securityContext, probes, resources and volumes of dist/install-kueue.yaml, whose
Deployment the chart's default values render alike (checked here; dist/install.yaml ships no
controller), as the shipped ServiceAccount, gating every namespace. Only
node_controller.shipped_on_the_node changes it, where the node forces it; the pod that ran is
compared with the one the shipped template makes, and any other difference fails. Through that
pod: the Lease taken, /metrics scraped over TLS with a ServiceAccount token as
pipelines/monitoring/servicemonitor.yaml tells Prometheus to, a Kueue reservation gated (the
AdmissionCheck approved and A raised by the pod), and a TrainJob opened by hand flagged by its
continuous auditor, the flag counted in /metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from release.dist import DIST
from tests.cluster import kube
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.controller_identity import metrics_reader
from tests.support.executions import DEADLINE, api_port
from tests.support.kueue_objects import KueueSetup, check_state
from tests.support.lifecycle import (
    TRAINER,
    Step,
    as_dict,
    read_trainjob,
    start_args,
    start_queued,
)
from tests.support.node_controller import (
    INSTANCE_KEY,
    Listeners,
    chart_deployment,
    forced,
    lease_holder,
    pod_spec_differences,
    replica_states,
    shipped_deployment,
    shipped_on_the_node,
)
from tests.support.replicas import admitted, secure_get
from tests.support.step_identity import StepIdentity

pytestmark = [pytest.mark.node, pytest.mark.cluster, pytest.mark.images]
INSTANCE: Final = "as-shipped"
# The auditor's cause for an opening no raise of A covers (core/rules/opening.py).
UNRAISED: Final = "is open (spec.suspend is not true) at metadata.generation"


# No policies in the test's namespace: the opening by hand is to reach the auditor, not the guard.
@pytest.mark.policies("none")
def test_the_shipped_controller_pod_runs_as_shipped_leads_gates_flags_and_serves_metrics(
    controller_identity: StepIdentity,
    control_plane: Cluster,
    api_client: client.ApiClient,
    namespace: str,
    step_image_on_node: str,
    step: Step,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    member: client.ApiClient,
    tmp_path: Path,
) -> None:
    kueue.install(cpu="8")
    shipped = shipped_deployment()
    # The chart in check mode makes the same pods: this one pod is both installs' (one run, not
    # two, on the node). Its default values choose policy mode where the API server serves
    # MutatingAdmissionPolicy (as helm template assumes): the policy-mode bundle's pods.
    charted = chart_deployment(tmp_path, ["kueue.mode=check"])
    assert charted["spec"] == shipped["spec"], "the chart's check-mode Deployment is the bundle's"
    policy_mode = shipped_deployment(DIST / "install-kueue-policy.yaml")
    assert chart_deployment(tmp_path)["spec"] == policy_mode["spec"], "and its default, policy mode"
    (container,) = shipped["spec"]["template"]["spec"]["containers"]
    assert container["image"] == step_image_on_node, "the image the Deployment names"
    listeners, api = Listeners.free(), api_port(control_plane.kubeconfig)
    deployment = shipped_on_the_node(
        shipped, instance=INSTANCE, listeners=listeners, api=api, namespace=namespace
    )
    core = client.CoreV1Api(api_client)
    selector = f"{INSTANCE_KEY}={INSTANCE}"

    def scheduled_pod(ready: bool) -> dict[str, Any] | None:
        for pod in as_dict(core.list_namespaced_pod(namespace, label_selector=selector))["items"]:
            conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or []}
            if pod["spec"].get("nodeName") and (not ready or conditions.get("Ready") == "True"):
                return dict(pod)
        return None

    # The reader's binding made first: a scrape refused while it reaches the authorizer is
    # remembered for a minute.
    with metrics_reader(api_client, namespace) as token:
        kube.apply(api_client, deployment, namespace=namespace)
        try:
            pod = wait_until(
                lambda: scheduled_pod(False), what="the pod scheduled", timeout=DEADLINE
            )
            found = pod_spec_differences(api_client, namespace, shipped, pod)
            assert {path: ran for path, (_, ran) in found.items()} == forced(
                found, pod, listeners=listeners, api=api
            ), f"only what the node forces differs from the shipped pod: {sorted(found)}"
            try:
                pod = wait_until(
                    lambda: scheduled_pod(True), what="the pod Ready", timeout=DEADLINE
                )
            except AssertionError as e:
                raise AssertionError(f"{e}: {replica_states(core, namespace)}") from None
            name = pod["metadata"]["name"]
            assert (
                wait_until(
                    lambda: lease_holder(api_client, namespace), what="a leader", timeout=DEADLINE
                )
                == name
            )
            # A reservation gated by the pod: it approves the AdmissionCheck and raises A.
            gated = start_queued(step, namespace, torch_runtime, kueue, "gated").result["name"]
            assert check_state(admitted(custom, namespace, gated), kueue.check) == "Ready"
            annotations = read_trainjob(custom, namespace, gated)["metadata"]["annotations"]
            assert annotations[wire.ADMISSION_FLOOR_ANNOTATION] == "1", gated
            # A bypass flagged by the pod's auditor: a member opens a job with no raise of A.
            started = step("start", *start_args(namespace, torch_runtime, "bypass"))
            assert started.code == 0, started.error
            bypass = started.result["name"]
            client.CustomObjectsApi(member).patch_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", bypass, {"spec": {"suspend": False}}
            )

            def cause() -> str | None:
                job = read_trainjob(custom, namespace, bypass)
                found = (job["metadata"].get("annotations") or {}).get(
                    wire.FOREIGN_CAUSE_ANNOTATION
                )
                return found if found and UNRAISED in found else None

            wait_until(cause, what=f"the pod's auditor to flag {bypass}", timeout=DEADLINE)
            # As servicemonitor.yaml scrapes: https, the certificate not verified, the bearer a
            # token of a ServiceAccount bound to metrics-reader.yaml's ClusterRole.

            def scraped() -> bytes | None:
                status, body, _ = secure_get(listeners.metrics, "/metrics", token)
                return body if status == 200 else None

            body = wait_until(scraped, what="the reader's scrape over TLS", timeout=90)
            assert b"dispatch_admission_leader 1.0" in body
            finding = f'kind="unraised-opening",namespace="{namespace}"'.encode()
            assert any(
                line.startswith(b"dispatch_admission_findings_total{") and finding in line
                for line in body.splitlines()
            ), "the flag counted where Prometheus reads it"
        finally:
            kube.delete(api_client, deployment, namespace=namespace)
            wait_until(
                lambda: (
                    not core.list_namespaced_pod(namespace, label_selector=selector).items or None
                ),
                what="the shipped pod gone: it gates every namespace",
                timeout=DEADLINE,
            )
