"""The shipped step Jobs of pipelines/jobs/ as real pods on the real node, as shipped: the
start request's ConfigMap and the start Job, then unsuspend, hold and audit of the TrainJob it
made, then a run of the audit CronJob, each with the manifest's own image, command, args, env,
securityContext, ServiceAccount and volumes (tests/support/shipped_jobs.py). A user fills in
what each manifest says to fill in (the start request, the TrainJob's name); the node forces
the host network, its toleration and the API server's loopback address, and nothing else
changes: each pod that ran is compared with the pod its filled-in manifest makes, admitted in a
namespace enforcing Pod Security `restricted`. Each Job is asserted by what it printed and did.
In Kueue mode, the start Job queues the TrainJob, Kueue reserves quota for it and holds the
reservation for the AdmissionCheck (under its shipped name, the Jobs' default), and the admit
and approve Jobs let it in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from dispatch_k8s.steps.admit import AdmitSettings
from tests.cluster import kube
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.executions import (
    DEADLINE,
    api_port,
    expected,
    pods,
    printed,
)
from tests.support.kueue_objects import KueueSetup, condition
from tests.support.lifecycle import read_trainjob
from tests.support.render import JOBS
from tests.support.shipped import documents
from tests.support.shipped_jobs import (
    ShippedJobs,
    filled,
    from_cron_job,
    restricted_namespace,
    results,
    started_request,
    with_args,
)
from tests.support.step_identity import SERVICE_ACCOUNT, StepIdentity

pytestmark = [pytest.mark.node, pytest.mark.cluster, pytest.mark.images]


@pytest.fixture
def restricted(api_client: client.ApiClient) -> Iterator[str]:
    with restricted_namespace(api_client) as name:
        yield name


def test_the_shipped_plain_mode_jobs_run_as_shipped_on_the_node(
    namespace: str,
    real_node_runtime: str,
    step_image_on_node: str,
    steps_identity: StepIdentity,
    control_plane: Cluster,
    api_client: client.ApiClient,
    restricted: str,
) -> None:
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    port = api_port(control_plane.kubeconfig)
    jobs = ShippedJobs(api_client, namespace, restricted=restricted, port=port)

    # The start request, edited as its comment says, then the start Job as shipped.
    kube.apply(api_client, started_request(real_node_runtime), namespace=namespace)
    (start,) = documents(JOBS / "start.yaml")
    (container,) = start["spec"]["template"]["spec"]["containers"]
    assert container["image"] == step_image_on_node, "the image every shipped Job names"
    assert start["spec"]["template"]["spec"]["serviceAccountName"] == SERVICE_ACCOUNT
    (started,) = results(jobs.run(start))
    assert started["outcome"] == "created", started
    name = str(started["name"])
    trainjob = read_trainjob(custom, namespace, name)
    assert trainjob["spec"]["suspend"] is True
    assert trainjob["metadata"]["labels"][wire.MANAGED_BY_LABEL] == wire.MANAGED_BY

    # Open it: A = 1, and the training process on the node prints R = 1.
    (unsuspend,) = documents(JOBS / "unsuspend.yaml")
    (opened,) = results(jobs.run(filled(unsuspend, DISPATCH_NAME=name)))
    assert opened["admission"] == 1, opened
    first = printed(core, namespace, name, restart=0, admission=1)
    assert (first.epoch, first.attempt) == expected(1, 0)

    # Hold it: suspended again, and its pods go.
    (hold,) = documents(JOBS / "hold.yaml")
    (held,) = results(jobs.run(filled(hold, DISPATCH_NAME=name)))
    assert (held["held"], held["changed"]) == (True, True), held
    assert read_trainjob(custom, namespace, name)["spec"]["suspend"] is True
    wait_until(
        lambda: not pods(core, namespace, name) or None,
        what=f"{name}'s pods gone after the hold",
        timeout=DEADLINE,
    )

    # Audit it: nothing found, and nothing to record (the hold recorded what it saw).
    (audit,) = documents(JOBS / "audit.yaml")
    (audited,) = results(jobs.run(filled(audit, DISPATCH_NAME=name)))
    assert (audited["findings"], audited["recorded"]) == (0, False), audited

    # The audit CronJob as shipped, and one run of it, as `kubectl create job --from=cronjob/`
    # makes it: its jobTemplate, owned by the CronJob. It audits every managed TrainJob here.
    (cron_job,) = documents(JOBS / "audit-cronjob.yaml")
    template = cron_job["spec"]["jobTemplate"]["spec"]["template"]
    assert template["spec"]["serviceAccountName"] == SERVICE_ACCOUNT
    stored = kube.apply(api_client, cron_job, namespace=namespace)
    (scheduled,) = results(jobs.run(from_cron_job(cron_job, stored)))
    assert scheduled == {**audited, "name": name}, "the same job found as it was, unchanged"


def test_the_shipped_kueue_mode_jobs_run_as_shipped_on_the_node(
    namespace: str,
    real_node_runtime: str,
    step_image_on_node: str,
    steps_identity: StepIdentity,
    control_plane: Cluster,
    api_client: client.ApiClient,
    restricted: str,
    kueue: KueueSetup,
) -> None:
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    jobs = ShippedJobs(
        api_client, namespace, restricted=restricted, port=api_port(control_plane.kubeconfig)
    )
    kueue.check_name = AdmitSettings.model_fields["check"].default
    kueue.install(cpu="1")

    # The start request queued in the test's LocalQueue, then the start Job as shipped.
    request = started_request(real_node_runtime, kueue.queued_request())
    kube.apply(api_client, request, namespace=namespace)
    (start,) = documents(JOBS / "start.yaml")
    (started,) = results(jobs.run(start))
    assert started["outcome"] == "created", started
    name, uid = str(started["name"]), str(started["uid"])
    assert read_trainjob(custom, namespace, name)["spec"]["suspend"] is True

    # Kueue reserves the quota and holds the reservation for the check: not admitted.
    def reserved() -> dict[str, Any] | None:
        workload = kueue.workload_of(uid)
        return workload if workload and condition(workload, "QuotaReserved") == "True" else None

    held = wait_until(reserved, what=f"Kueue to reserve quota for {name}", timeout=DEADLINE)
    assert condition(held, "Admitted") != "True", held["status"]

    # Admit raises A for the reservation and prints what approve needs; approve, filled in
    # with those three values as its comment says, lets Kueue admit it.
    (admit,) = documents(JOBS / "admit.yaml")
    (admitted,) = results(jobs.run(filled(admit, DISPATCH_NAME=name)))
    assert admitted["admission"] == 1, admitted
    (approve,) = documents(JOBS / "approve.yaml")
    values = {
        "workload": str(admitted["workload"]),
        "workload_resource_version": str(admitted["workloadResourceVersion"]),
        "admission": str(admitted["admission"]),
    }
    (approved,) = results(jobs.run(with_args(approve, **values)))
    assert approved["workload"] == admitted["workload"], approved
    first = printed(core, namespace, name, restart=0, admission=1)
    assert (first.epoch, first.attempt) == expected(1, 0)
