"""What config/, dist/ and the chart install, used as a cluster admin and a pipeline use it, on a
control plane of this module's own (tests/pipelines/test_dist_install.py says why):

- each overlay that installs alone, and the chart with every option on, installed from nothing
  with the pinned kubectl and helm as the admin, its objects there and the controller's pods
  made and admitted, then removed to nothing but Events;
- a plain lifecycle through config/plain: the steps as the installed ServiceAccount, the
  installed policies refusing a forbidden write and raising A on an opening by hand;
- a Kueue lifecycle through the chart, with this plane's controllers named in its values: the
  installed controller raises and approves once, the installed guard refuses a JobSet delete and
  lets JobSet restart the execution (R rises), then `helm uninstall`;
- an upgrade from an earlier Kueue bundle (kept in the tree, under earlier/, so that it runs
  in any clone) to the current one under a running job: the installed controller
  (installed.py) raises and approves its admission once, the job's execution
  keeps its identity across the upgrade, the next one's R is above it, and the upgraded
  controller admits the next job; then the uninstall leaves only Events and the ledger's
  ConfigMaps (docs/install.md);
- a reinstall on the same API server (kubernetes/kubernetes#133827): the policies refuse with
  no parameters until kube-apiserver restarts, then act.

The steps run as the installed `dispatch-steps` ServiceAccount, and the installed controller as
its Deployment's ServiceAccount with the Deployment's own arguments: cluster-wide, its Lease in
dispatch-system, gating jobs in `default`. The bundles and the chart are installed as they ship,
the path guard trusting the controllers its defaults name (pipelines/policies/controllers.yaml,
the chart's `controllerIdentities`): this plane runs them as upstream's own releases make them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import wire
from release import chart, dist
from tests.cluster import crds, kube
from tests.cluster.wait import wait_until
from tests.pipelines.conftest import FreshPlane
from tests.pipelines.installed import (
    CONTROLLER,
    account_kubeconfig,
    installed_controller,
    ledger_keys,
    logged,
    wait_for_controller_pods,
    wait_left,
)
from tests.support import tools
from tests.support.kubectl import run_kubectl
from tests.support.kueue_objects import check_state
from tests.support.lifecycle import (
    DEADLINE,
    JOBSET,
    TRAINER,
    Kubelet,
    StepRun,
    edit_trainjob,
    read_trainjob,
    run_stage,
    run_step,
    start_args,
    wait_for_drained_jobset,
)
from tests.support.policies import (
    forged_pod,
    message,
    refused_with,
    wait_acting,
)
from tests.support.replicas import Replica, admitted
from tests.support.shipped import PIPELINES, TORCH_RUNTIME, default_image, documents

# Each test starts a control plane of its own (the first one's for the module): on a new
# machine, beside the background builds, one start took 496 s, over the default 600 s with
# its installs.
pytestmark = [pytest.mark.pipelines, pytest.mark.cluster, pytest.mark.timeout(1200)]

NAMESPACE: Final = "default"  # where config/ puts the steps' identity
STEPS: Final = "dispatch-steps"
RUNTIME: Final = str(documents(TORCH_RUNTIME)[0]["metadata"]["name"])
CHECK: Final = "dispatch-admission"
# The overlays that install alone beside plain and kueue (the lifecycles' own): every one on
# this 1.36 plane, with the engines' and prometheus-operator's CRDs installed first.
ALONE: Final = ("policies-guard-only", "monitoring", "argo", "tekton")
CHART_VALUES: Final = [
    *chart.CONFIG_LAYOUT,  # the controller in dispatch-system, where installed.py looks for it
    "monitoring.enabled=true",
    "argo.enabled=true",
    "tekton.enabled=true",
]
QUEUES: Final = [
    d
    for name in ("example-queues.yaml", "example-local-queue.yaml")
    for d in documents(PIPELINES / "kueue" / name)
]
QUEUED: Final = {"queue": "training", "resources_per_node": '{"requests":{"cpu":"1"}}'}
# How long a reinstall is watched refusing with no parameters: a first install's bindings find
# theirs within a second or two.
FROZEN_SECONDS: Final = 15.0
NO_PARAMS: Final = "no params found for policy binding"
PLAIN: Final = dist.DIST / "install.yaml"
KUEUE: Final = dist.DIST / "install-kueue.yaml"
# The earlier Kueue bundle the upgrade starts from (its header says which).
EARLIER: Final = Path(__file__).parent / "earlier" / "install-kueue.yaml"


@pytest.fixture(scope="module")
def engine_crds(fresh_plane: FreshPlane) -> list[str]:
    """Argo's, Tekton's and prometheus-operator's CRDs on the module's plane."""
    return crds.install(fresh_plane.api)


def assert_installed(api: client.ApiClient, keys: set[kube.Key]) -> None:
    """Every object is stored; the controller's Deployment, where installed, has made its
    pods, admitted under its namespace's Pod Security, as its ServiceAccount, of the image."""
    missing = sorted(k for k in keys if kube.stored(api, k) is None)
    assert not missing, missing
    if CONTROLLER in keys:
        for pod in wait_for_controller_pods(api):
            spec = pod["spec"]
            assert spec["serviceAccountName"] == CONTROLLER[3]
            assert [c["image"] for c in spec["containers"]] == [default_image()]


def stored_uids(api: client.ApiClient, keys: set[kube.Key]) -> dict[kube.Key, str]:
    """By key, the uid of each object the server holds."""
    found = {}
    for k in keys:
        o = kube.stored(api, k)
        if o is not None:
            found[k] = str(o["metadata"]["uid"])
    return found


def wait_gone(api: client.ApiClient, keys: set[kube.Key]) -> None:
    wait_until(
        lambda: all(kube.stored(api, k) is None for k in keys) or None,
        what="every installed object gone",
        timeout=DEADLINE,
    )


def test_each_overlay_and_the_chart_install_from_nothing_and_uninstall_to_nothing(
    fresh_plane: FreshPlane, engine_crds: list[str], tmp_path: Path
) -> None:
    api, admin = fresh_plane.api, fresh_plane.kubeconfig
    before = kube.everything(api)
    for overlay in ALONE:
        directory = dist.CONFIG / overlay
        keys = {
            kube.key(o) for o in dist.objects(dist.build(directory, kustomize=tools.kustomize()))
        }
        assert not keys & before, f"{overlay}: from nothing"
        run_kubectl("apply", "--server-side", "-k", str(directory), kubeconfig=admin)
        assert_installed(api, keys)
        run_kubectl("delete", "-k", str(directory), kubeconfig=admin)
        wait_gone(api, keys)
        wait_left(api, before, lambda _: False)

    home = tmp_path / "helm"
    keys = set(chart.by_key(tools.template(CHART_VALUES, home=home)))
    assert {k[1] for k in keys} >= {"ServiceMonitor", "WorkflowTemplate", "Pipeline"}
    sets = [arg for value in CHART_VALUES for arg in ("--set", value)]
    where = ["--namespace", NAMESPACE]
    tools.run_helm(
        "install", "dispatch-k8s", str(chart.CHART), *sets, *where, home=home, kubeconfig=admin
    )
    assert_installed(api, keys)
    tools.run_helm("uninstall", "dispatch-k8s", *where, home=home, kubeconfig=admin)
    wait_gone(api, keys)
    wait_left(api, before, lambda _: False)


class Pipeline:
    """The steps as a pipeline runs them: the installed ServiceAccount's token."""

    def __init__(self, plane: FreshPlane, work: Path) -> None:
        self.kubeconfig = account_kubeconfig(
            plane.api, plane.kubeconfig, NAMESPACE, STEPS, work / "steps.kubeconfig"
        )

    def __call__(self, name: str, *args: str) -> StepRun:
        return run_step(name, *args, kubeconfig=self.kubeconfig)

    def start(self, job_id: str, **extra: str) -> str:
        started = self("start", *start_args(NAMESPACE, RUNTIME, job_id, **extra))
        assert started.code == 0, started.error
        return str(started.result["name"])


def gated_once(controller: Replica, name: str, *, ungranted: frozenset[str] = frozenset()) -> None:
    """The controller raised A once, to 1, for TrainJob `name` alone, approved one Workload,
    and nothing it asked was refused (the installed RBAC is enough) but the lists and watches
    of `ungranted` resources."""
    raised = logged(controller, "raised admission")
    assert [(r["trainjob"], r["admission"]) for r in raised] == [(name, 1)], raised
    assert len(logged(controller, "approved")) == 1
    refused = [r for r in controller.records() if "403 Forbidden" in json.dumps(r)]
    assert [r for r in refused if r.get("resource") not in ungranted] == []


def delete_trainjobs(custom: client.CustomObjectsApi, names: list[str]) -> None:
    """What a user deletes before uninstalling: their TrainJobs (and so their JobSets).

    In the background, as `kubectl delete` does: in the foreground Trainer makes the runtime
    snapshot and the JobSet again while the TrainJob waits for them to go, and the deletion
    ends only when the garbage collector looks between two of its copies (troubleshooting.md);
    this wait timed out so once in CI.
    """
    for name in names:
        custom.delete_namespaced_custom_object(
            *TRAINER, NAMESPACE, "trainjobs", name, propagation_policy="Background"
        )

    def gone() -> bool | None:
        listed = custom.list_namespaced_custom_object(*TRAINER, NAMESPACE, "trainjobs")
        assert isinstance(listed, dict)
        return not listed["items"] or None

    wait_until(gone, what="the TrainJobs deleted", timeout=DEADLINE)


def test_a_plain_lifecycle_runs_through_what_dist_install_yaml_installed(
    own_plane: FreshPlane, tmp_path: Path
) -> None:
    api, admin = own_plane.api, own_plane.kubeconfig
    custom, kubelet = client.CustomObjectsApi(api), Kubelet(api, NAMESPACE)
    before = kube.everything(api)
    run_kubectl("apply", "--server-side", "-f", str(PLAIN), kubeconfig=admin)
    wait_acting(api, RUNTIME)
    step = Pipeline(own_plane, tmp_path)

    name = step.start("installed-plain")
    target = ["--namespace", NAMESPACE, "--name", name]
    opened = run_stage(step, "unsuspend", *target)
    assert opened.code == 0, opened.error
    pod = kubelet.wait_for_pod(name, restart=0, admission=1)
    first = kubelet.execute(pod)
    assert (first.admission, first.restart) == (1, 0)

    # The installed guard refuses even the admin: a new JobSet would count J from 0 again.
    refused_with(
        "keep-jobset",
        lambda: custom.delete_namespaced_custom_object(*JOBSET, NAMESPACE, "jobsets", name),
    )

    kubelet.set_phase(pod, "Failed")  # JobSet restarts the execution: J = 1
    restarted = kubelet.execute(kubelet.wait_for_pod(name, restart=1, admission=1))
    assert (restarted.admission, restarted.restart) == (1, 1)

    held = run_stage(step, "hold", *target)
    assert held.code == 0, held.error
    wait_for_drained_jobset(api, NAMESPACE, name)

    # Opened by hand, not by a step: the installed MutatingAdmissionPolicy raises A.
    def open_it(job: dict[str, Any]) -> None:
        job["spec"]["suspend"] = False

    edit_trainjob(custom, NAMESPACE, name, open_it)
    annotations = read_trainjob(custom, NAMESPACE, name)["metadata"]["annotations"]
    floor = int(annotations[wire.ADMISSION_FLOOR_ANNOTATION])
    assert floor > 1
    third = kubelet.execute(kubelet.wait_for_pod(name, restart=1, admission=floor))
    epochs = [first.epoch, restarted.epoch, third.epoch]
    assert first.r < restarted.r < third.r
    assert epochs == sorted(set(epochs)), epochs

    delete_trainjobs(custom, [name])
    kept = ledger_keys(api, NAMESPACE)
    assert kept, "start keeps its ledger"
    run_kubectl("delete", "-f", str(PLAIN), kubeconfig=admin)
    wait_left(api, before, kept.__contains__)


def test_a_kueue_lifecycle_runs_through_what_the_chart_installed(
    own_plane: FreshPlane, tmp_path: Path
) -> None:
    api, admin = own_plane.api, own_plane.kubeconfig
    custom, kubelet = client.CustomObjectsApi(api), Kubelet(api, NAMESPACE)
    before = kube.everything(api)
    home, where = tmp_path / "helm", ["--namespace", NAMESPACE]
    # The default values, the controller in dispatch-system (where installed.py looks for it),
    # in check mode: the example queues name the AdmissionCheck, which the default, policy mode
    # where MutatingAdmissionPolicy is served (docs/install.md), does not install.
    layout = [arg for value in chart.CONFIG_LAYOUT for arg in ("--set", value)]
    helm = [*layout, "--set", "kueue.mode=check", *where]
    tools.run_helm("install", "dispatch-k8s", str(chart.CHART), *helm, home=home, kubeconfig=admin)
    for document in QUEUES:
        kube.apply(api, document, namespace=NAMESPACE)
    wait_acting(api, RUNTIME)
    step = Pipeline(own_plane, tmp_path)

    with installed_controller(api, admin, tmp_path) as controller:
        name = step.start("through-the-chart", **QUEUED)
        assert check_state(admitted(custom, NAMESPACE, name), CHECK) == "Ready"
        pod = kubelet.wait_for_pod(name, restart=0, admission=1)
        first = kubelet.execute(pod)
        assert (first.admission, first.restart) == (1, 0)
        gated_once(controller, name)
        # The installed guard refuses even the admin: a new JobSet would count J from 0 again.
        refused_with(
            "keep-jobset",
            lambda: custom.delete_namespaced_custom_object(*JOBSET, NAMESPACE, "jobsets", name),
        )
        # ...and lets JobSet, named in the values, restart the execution: J = 1.
        kubelet.set_phase(pod, "Failed")
        restarted = kubelet.execute(kubelet.wait_for_pod(name, restart=1, admission=1))
        assert restarted.r == first.r + 1
        assert restarted.epoch > first.epoch
        assert controller.stop() == 0

    delete_trainjobs(custom, [name])
    kept = ledger_keys(api, NAMESPACE)
    for document in reversed(QUEUES):
        kube.delete(api, document, namespace=NAMESPACE)
    tools.run_helm("uninstall", "dispatch-k8s", *where, home=home, kubeconfig=admin)
    wait_left(api, before, kept.__contains__)


def test_an_upgrade_from_the_previous_bundle_keeps_a_running_job_identity(
    own_plane: FreshPlane, tmp_path: Path
) -> None:
    previous = EARLIER.read_text()  # in the tree: the upgrade never depends on git history
    api, admin = own_plane.api, own_plane.kubeconfig
    custom, kubelet = client.CustomObjectsApi(api), Kubelet(api, NAMESPACE)
    before = kube.everything(api)
    run_kubectl("apply", "--server-side", "-f", str(EARLIER), kubeconfig=admin)
    for document in QUEUES:
        kube.apply(api, document, namespace=NAMESPACE)
    wait_acting(api, RUNTIME)
    step = Pipeline(own_plane, tmp_path)

    with installed_controller(api, admin, tmp_path) as controller:
        running = step.start("before-upgrade", **QUEUED)
        workload = admitted(custom, NAMESPACE, running)
        assert check_state(workload, CHECK) == "Ready"
        pod = kubelet.wait_for_pod(running, restart=0, admission=1)
        first = kubelet.execute(pod)
        assert (first.admission, first.restart) == (1, 0)
        # This tree's controller under the earlier bundle's ClusterRole, which grants no list
        # or watch of ConfigMaps (614c5a8 added them, for the auditor's snapshots and records):
        # those two watches of its auditor are refused; the gate is not.
        gated_once(controller, running, ungranted=frozenset({"configmaps"}))
        assert controller.stop() == 0  # the rollout stops the old template's pods

    uids = stored_uids(api, {kube.key(o) for o in dist.objects(previous)})
    current = KUEUE.read_text()
    run_kubectl("apply", "--server-side", "-f", str(KUEUE), kubeconfig=admin)
    keys = {kube.key(o) for o in dist.objects(current)}
    assert_installed(api, keys)
    assert stored_uids(api, keys & set(uids)) == {k: uids[k] for k in keys & set(uids)}
    (deployment,) = [o for o in dist.objects(current) if kube.key(o) == CONTROLLER]
    stored = kube.stored(api, CONTROLLER)
    assert stored is not None
    (want,) = deployment["spec"]["template"]["spec"]["containers"]
    (got,) = stored["spec"]["template"]["spec"]["containers"]
    assert got["args"] == want["args"]

    # The running execution is untouched: the same pod, the same A and J, the same identity.
    (same,) = [p for p in kubelet.pods(running) if p["metadata"]["uid"] == pod["metadata"]["uid"]]
    assert kubelet.execute(same) == first
    annotations = read_trainjob(custom, NAMESPACE, running)["metadata"]["annotations"]
    assert annotations[wire.ADMISSION_FLOOR_ANNOTATION] == "1"

    with installed_controller(api, admin, tmp_path) as controller:
        kubelet.set_phase(same, "Failed")  # JobSet restarts it under the upgraded guard
        restarted = kubelet.execute(kubelet.wait_for_pod(running, restart=1, admission=1))
        assert restarted.r == first.r + 1
        assert restarted.epoch > first.epoch
        # The next job goes through the upgraded controller alone.
        after = step.start("after-upgrade", **QUEUED)
        assert check_state(admitted(custom, NAMESPACE, after), CHECK) == "Ready"
        later = kubelet.execute(kubelet.wait_for_pod(after, restart=0, admission=1))
        assert later.r == 1
        gated_once(controller, after)  # the restarted job needed no raise
        assert controller.stop() == 0

    # Deleted in the background, not waited for: Trainer makes the runtime snapshot and the JobSet
    # of a TrainJob being deleted again at each reconcile (it does not look at the deletion), so a
    # foreground deletion ends only when the garbage collector's check falls between a deletion
    # and the next copy: not within the deadline here (docs/troubleshooting.md, issue 44). The
    # upgrade's assertions above do not need it.
    for name in (running, after):
        custom.delete_namespaced_custom_object(
            *TRAINER, NAMESPACE, "trainjobs", name, propagation_policy="Background"
        )
    kept = ledger_keys(api, NAMESPACE)
    # docs/install.md: the check off the ClusterQueues (here, the queues gone) before deleting.
    for document in reversed(QUEUES):
        kube.delete(api, document, namespace=NAMESPACE)
    run_kubectl("delete", "-f", str(KUEUE), kubeconfig=admin)
    wait_left(api, before, kept.__contains__)


def pod_guard_answer(api: client.ApiClient) -> str:
    """What the pod guard answers a forged pod (dry run): its refusal's message."""
    try:
        client.CoreV1Api(api).create_namespaced_pod(NAMESPACE, forged_pod(), dry_run="All")
    except ApiException as e:
        return message(e)
    return "admitted"


def test_a_reinstall_acts_once_kube_apiserver_has_restarted(
    own_plane: FreshPlane, tmp_path: Path
) -> None:
    """kubernetes/kubernetes#133827: once no binding names ConfigMap parameters, kube-apiserver
    stops watching ConfigMaps for policies for good (kubernetes/kubernetes#130887; the fix,
    kubernetes/kubernetes#141015, is open). docs/install.md tells the admin to restart it."""
    api, admin = own_plane.api, own_plane.kubeconfig
    before = kube.everything(api)
    keys = {kube.key(o) for o in dist.objects(PLAIN.read_text())}
    run_kubectl("apply", "--server-side", "-f", str(PLAIN), kubeconfig=admin)
    wait_acting(api, RUNTIME)
    run_kubectl("delete", "-f", str(PLAIN), kubeconfig=admin)
    wait_gone(api, keys)

    run_kubectl("apply", "--server-side", "-f", str(PLAIN), kubeconfig=admin)
    wait_until(
        lambda: pod_guard_answer(api) != "admitted" or None,
        what="the pod guard's binding in force",
        timeout=DEADLINE,
    )
    answers: list[str] = []
    deadline = time.monotonic() + FROZEN_SECONDS

    def watched_long_enough() -> bool | None:
        answers.append(pod_guard_answer(api))
        return time.monotonic() > deadline or None

    wait_until(watched_long_enough, what="the reinstall watched", timeout=2 * FROZEN_SECONDS)
    assert all(NO_PARAMS in answer for answer in answers), sorted(set(answers))

    with own_plane.plane.stopped("kube-apiserver"):
        pass
    wait_acting(api, RUNTIME)
    assert "dispatch-k8s guard pod-create:" in pod_guard_answer(api)
    run_kubectl("delete", "-f", str(PLAIN), kubeconfig=admin)
    wait_left(api, before, lambda _: False)
