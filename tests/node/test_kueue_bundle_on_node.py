"""What a platform engineer installs for Kueue, installed whole on a control plane of its own with
the real node: dist/install-kueue.yaml (check mode) as `kubectl apply --server-side -f` installs it,
and the chart with its default values as `helm install -n dispatch-system --create-namespace`
renders it (policy mode, as the API server serves MutatingAdmissionPolicy; helm's own release
bookkeeping is tests/pipelines/test_chart_install.py's). Two changes, both the node's, made by
node_controller.installed_on_the_node: the controller's Deployment as shipped_on_the_node runs it
(host network, loopback listeners), and the bundle's namespace without Pod Security `restricted`,
which forbids the host network (the shipped pod is dry-run where `restricted` is enforced, and
admitted). The pod that ran is compared with the shipped template's, and it takes the Lease.

Then a job through what was installed, as a user runs one: the shipped start Job queues a
TrainJob in a LocalQueue, Kueue reserves quota, and the installed controller approves the
AdmissionCheck the bundle made (check mode) or Kueue opens the job and the API server raises A
in that opening, which the installed auditor tells (policy mode); the training process on the
node prints R = 1. No request of the upstream controllers' is refused by RBAC.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client, config

from dispatch_k8s.core.rules import events
from release import dist
from tests.cluster import kube
from tests.cluster.harness import ControlPlane
from tests.cluster.wait import wait_until
from tests.support import tools
from tests.support.cluster_under_test import EXISTING_CLUSTER_ENV
from tests.support.executions import DEADLINE, TRAINER, api_port, expected, node_runtime, printed
from tests.support.kueue_objects import KueueSetup, check_state, condition
from tests.support.lifecycle import as_dict
from tests.support.node_controller import (
    INSTANCE_KEY,
    Listeners,
    forced,
    installed_on_the_node,
    lease_holder,
    pod_of,
    pod_spec_differences,
    replica_states,
)
from tests.support.render import JOBS
from tests.support.shipped import documents
from tests.support.shipped_jobs import (
    RESTRICTED,
    ShippedJobs,
    restricted_namespace,
    results,
    started_request,
)

pytestmark = [pytest.mark.node, pytest.mark.cluster, pytest.mark.images]

INSTANCE: Final = "installed"
RELEASE_NAMESPACE: Final = "dispatch-system"  # the chart's, as `helm install -n` names it


def bundle() -> list[dict[str, Any]]:
    """dist/install-kueue.yaml's objects: check mode."""
    return dist.objects((dist.DIST / "install-kueue.yaml").read_text())


def chart(work: Path) -> list[dict[str, Any]]:
    """The chart's objects with its default values in the release namespace, with the Namespace
    `helm install --create-namespace` makes (unlabelled) first: policy mode."""
    rendered = dist.objects(tools.template([], home=work / "helm", namespace=RELEASE_NAMESPACE))
    made = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NAMESPACE}}
    return [made, *rendered]


@pytest.fixture
def own_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane with the node, of this test's own: each install is cluster-wide. Under
    a short directory: containerd's socket paths must fit in 104 bytes."""
    if os.environ.get(EXISTING_CLUSTER_ENV):
        pytest.skip("installs cluster-wide on a local control plane of its own")
    with ControlPlane(tmp_path_factory.mktemp("kueue-plane"), node=True) as plane:
        yield plane


def ready_pod(core: client.CoreV1Api, namespace: str) -> dict[str, Any] | None:
    """The installed controller's pod, once scheduled and Ready."""
    selector = f"{INSTANCE_KEY}={INSTANCE}"
    for pod in as_dict(core.list_namespaced_pod(namespace, label_selector=selector))["items"]:
        conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or []}
        if pod["spec"].get("nodeName") and conditions.get("Ready") == "True":
            return dict(pod)
    return None


@pytest.mark.parametrize("install", ["install-kueue.yaml", "chart"])
def test_the_kueue_install_whole_runs_a_queued_job_through_the_installed_controller(
    install: str, own_plane: ControlPlane, step_image: str, tmp_path: Path
) -> None:
    check_mode = install == "install-kueue.yaml"
    objects = bundle() if check_mode else chart(tmp_path)
    (shipped,) = [o for o in objects if o["kind"] == "Deployment"]
    (account,) = [
        o for o in objects if o["kind"] == "ServiceAccount" and "steps" in o["metadata"]["name"]
    ]
    steps_namespace = account["metadata"]["namespace"]
    controller_namespace = shipped["metadata"]["namespace"]
    port, listeners = api_port(own_plane.kubeconfig), Listeners.free()
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(own_plane.kubeconfig)
    )
    with contextlib.closing(api), restricted_namespace(api) as restricted:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        # The pod as shipped is admitted where `restricted` is enforced (with its account).
        pod = pod_of(shipped, "as-shipped")
        named = client.V1ObjectMeta(name=pod["spec"]["serviceAccountName"])
        core.create_namespaced_service_account(restricted, client.V1ServiceAccount(metadata=named))
        kube.dry_run(api, pod, namespace=restricted)
        assert own_plane.node is not None
        own_plane.node.import_images([step_image])
        for o in installed_on_the_node(objects, instance=INSTANCE, listeners=listeners, api=port):
            kube.apply(api, o, namespace=None)
        if check_mode:
            labels = as_dict(core.read_namespace(controller_namespace))["metadata"]["labels"]
            assert not RESTRICTED.items() <= labels.items(), "the node's one namespace change"

        try:
            pod = wait_until(
                lambda: ready_pod(core, controller_namespace),
                what="the installed controller's pod Ready",
                timeout=DEADLINE,
            )
        except AssertionError as e:
            raise AssertionError(f"{e}: {replica_states(core, controller_namespace)}") from None
        found = pod_spec_differences(api, controller_namespace, shipped, pod)
        assert {path: ran for path, (_, ran) in found.items()} == forced(
            found, pod, listeners=listeners, api=port
        ), f"only what the node forces differs from the shipped pod: {sorted(found)}"
        holder = wait_until(
            lambda: lease_holder(api, controller_namespace), what="a leader", timeout=DEADLINE
        )
        assert holder == pod["metadata"]["name"]

        runtime = node_runtime()  # the install's torch runtime, its pods on the node
        custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
        kueue = KueueSetup(custom, steps_namespace, check_installed=check_mode)
        if check_mode:
            (check,) = [o for o in objects if o["kind"] == "AdmissionCheck"]
            kueue.check_name = check["metadata"]["name"]
        kueue.install(cpu="1", with_check=check_mode)

        request = started_request(runtime["metadata"]["name"], kueue.queued_request())
        kube.apply(api, request, namespace=steps_namespace)
        jobs = ShippedJobs(api, steps_namespace, restricted=restricted, port=port)
        (start,) = documents(JOBS / "start.yaml")
        (started,) = results(jobs.run(start))
        assert started["outcome"] == "created", started
        name, uid = str(started["name"]), str(started["uid"])

        execution = printed(core, steps_namespace, name, restart=0, admission=1)
        assert (execution.epoch, execution.attempt) == expected(1, 0)
        workload = kueue.workload_of(uid)
        assert workload is not None
        assert condition(workload, "Admitted") == "True", workload["status"]
        if check_mode:
            assert check_state(workload, kueue.check) == "Ready", workload["status"]
        else:
            assert "admissionChecks" not in workload["status"], "policy mode: no check"

            def told() -> list[str] | None:
                listed = core.list_namespaced_event(
                    steps_namespace,
                    field_selector=f"involvedObject.name={name},reason={events.RAISED}",
                )
                return [e.message or "" for e in listed.items] or None

            wait_until(told, what=f"the installed auditor to tell {name}'s raise", timeout=60)
    assert own_plane.refused_by_rbac() == []
