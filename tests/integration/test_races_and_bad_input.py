"""The second writer, and input that must be refused with the documented code."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import trainjob, wire
from dispatch_k8s.core.rules.errors import PreconditionFailed
from dispatch_k8s.core.shell.gateway import Gateway
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.lifecycle import TRAINER, Step, content, read_trainjob, settled, start_args

pytestmark = pytest.mark.integration
RAISERS = 8


def test_concurrent_raisers_on_one_read_never_share_an_a(
    step: Step,
    namespace: str,
    torch_runtime: str,
    control_plane: Cluster,
    custom: client.CustomObjectsApi,
) -> None:
    name = step("start", *start_args(namespace, torch_runtime, "race")).result["name"]
    settled(custom, namespace, name)  # else Trainer's status write may beat every raiser
    gateway = Gateway.connect(kubeconfig=control_plane.kubeconfig, context=None)
    everyone_has_read = threading.Barrier(RAISERS)

    def raiser(_: int) -> int | str:
        # Each raiser reads, decides, then all write at once: the worst interleaving.
        job = gateway.read_trainjob(namespace, name)
        decision = trainjob.decide_raise(job, gateway.read_jobset(namespace, name))
        assert isinstance(decision, trainjob.Raise)
        everyone_has_read.wait(timeout=60)
        try:
            gateway.update_trainjob(
                trainjob.with_admission(job, decision), decision.resource_version
            )
        except PreconditionFailed:
            return "lost"
        return decision.admission

    with ThreadPoolExecutor(RAISERS) as pool:
        outcomes = list(pool.map(raiser, range(RAISERS)))
    assert sorted(outcomes, key=str) == [1] + ["lost"] * (RAISERS - 1)
    annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
    assert annotations[wire.ADMISSION_FLOOR_ANNOTATION] == "1"


def test_concurrent_unsuspend_processes_raise_once(
    step: Step, namespace: str, torch_runtime: str, custom: client.CustomObjectsApi
) -> None:
    name = step("start", *start_args(namespace, torch_runtime, "race-cli")).result["name"]
    with ThreadPoolExecutor(RAISERS) as pool:
        runs = list(
            pool.map(
                lambda _: step("unsuspend", "--namespace", namespace, "--name", name),
                range(RAISERS),
            )
        )
    writers = [run for run in runs if "raised admission and unsuspended" in run.stderr]
    assert len(writers) == 1, [run.error for run in runs]
    # A loser that read before the winner wrote gets 409 (exit 3); one that read after finds
    # the job open on that very raise (exit 0, nothing written). A is the winner's.
    assert all(run.code in (0, 3) for run in runs), [run.error for run in runs]
    assert {run.result["admission"] for run in runs if run.code == 0} == {1}
    job = read_trainjob(custom, namespace, name)
    assert trainjob.admission_in_patch(job) == 1
    assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "1"


def test_missing_trainjob_is_exit_4(step: Step, namespace: str) -> None:
    for name in ("unsuspend", "hold", "audit", "admit"):
        run = step(name, "--namespace", namespace, "--name", "no-such-job")
        assert run.code == 4, (name, run.error)
        assert "no-such-job" in run.error


@pytest.mark.policies("none")  # the guard would refuse the opening by hand below
def test_unsuspend_of_a_job_open_on_its_raise_is_a_no_op_and_of_another_is_exit_6(
    step: Step, namespace: str, torch_runtime: str, custom: client.CustomObjectsApi
) -> None:
    name = step("start", *start_args(namespace, torch_runtime, "running")).result["name"]
    assert step("unsuspend", "--namespace", namespace, "--name", name).code == 0
    before = content(read_trainjob(custom, namespace, name))
    # A rerun, as after a lost answer: the job is open on that very raise, nothing to do.
    again = step("unsuspend", "--namespace", namespace, "--name", name)
    assert (again.code, again.result.get("admission")) == (0, 1), again.error
    assert content(read_trainjob(custom, namespace, name)) == before

    other = step("start", *start_args(namespace, torch_runtime, "by-hand")).result["name"]

    def open_by_hand() -> bool | None:
        job = read_trainjob(custom, namespace, other)
        job["spec"]["suspend"] = False  # opened by hand, without a raise
        try:
            custom.replace_namespaced_custom_object(*TRAINER, namespace, "trainjobs", other, job)
        except ApiException as e:
            if e.status == 409:  # Trainer wrote its first status in between: read again
                return None
            raise
        return True

    wait_until(open_by_hand, what=f"TrainJob {other} opened by hand")
    before = content(read_trainjob(custom, namespace, other))
    refused = step("unsuspend", "--namespace", namespace, "--name", other)
    assert refused.code == 6
    assert "spec.suspend is not true" in refused.error
    assert content(read_trainjob(custom, namespace, other)) == before


@pytest.mark.parametrize(
    ("annotation", "value", "says"),
    [
        (wire.ADMISSION_FLOOR_ANNOTATION, "1e3", "not a canonical decimal"),
        (wire.ADMISSION_FLOOR_ANNOTATION, None, "is missing"),
        (wire.ADMISSION_FLOOR_ANNOTATION, "999999", "bound is reached"),
    ],
    ids=["garbage-floor", "missing-floor", "floor-at-bound"],
)
@pytest.mark.policies("none")  # the guard refuses the garbage itself (test_policies.py)
def test_garbage_in_annotations_is_refused_and_nothing_written(
    step: Step,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    annotation: str,
    value: str | None,
    says: str,
) -> None:
    name = step("start", *start_args(namespace, torch_runtime, "garbage")).result["name"]
    custom.patch_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", name, {"metadata": {"annotations": {annotation: value}}}
    )
    before = read_trainjob(custom, namespace, name)
    refused = step("unsuspend", "--namespace", namespace, "--name", name)
    assert refused.code == 6
    assert says in refused.error
    after = read_trainjob(custom, namespace, name)
    assert content(after) == content(before)
    assert after["spec"]["suspend"] is True


def test_workload_of_another_controller_is_refused(
    step: Step, namespace: str, torch_runtime: str, custom: client.CustomObjectsApi
) -> None:
    started = step("start", *start_args(namespace, torch_runtime, "foreign-wl"))
    body = {
        "apiVersion": f"{wire.KUEUE_GROUP}/{wire.KUEUE_VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": "not-ours",
            "namespace": namespace,
            "labels": {wire.KUEUE_JOB_UID_LABEL: started.result["uid"]},
        },
        "spec": {
            "queueName": "nowhere",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
                }
            ],
        },
    }
    custom.create_namespaced_custom_object(
        wire.KUEUE_GROUP, wire.KUEUE_VERSION, namespace, "workloads", body
    )
    before = content(read_trainjob(custom, namespace, started.result["name"]))
    refused = step("admit", "--namespace", namespace, "--name", started.result["name"])
    assert refused.code == 6
    assert "controlled by no TrainJob" in refused.error
    after = content(read_trainjob(custom, namespace, started.result["name"]))
    assert after == before


def test_bad_flags_are_exit_2(step: Step) -> None:
    missing = step("unsuspend")
    assert missing.code == 2
    assert "name" in missing.error
    bad = step("approve", "--workload", "w", "--workload-resource-version", "1", "--admission", "x")
    assert bad.code == 2
    assert "admission" in bad.error


def test_plain_steps_refuse_a_kueue_managed_trainjob(
    step: Step, namespace: str, torch_runtime: str, custom: client.CustomObjectsApi
) -> None:
    queued = {"queue": "some-queue", "resources_per_node": '{"requests":{"cpu":"1"}}'}
    started = step("start", *start_args(namespace, torch_runtime, "queued", **queued))
    assert started.code == 0, started.error
    name = started.result["name"]
    for plain_step, says in (("unsuspend", "Kueue owns its suspension"), ("hold", "Workload")):
        refused = step(plain_step, "--namespace", namespace, "--name", name)
        assert refused.code == 6, refused.error
        assert says in refused.error
    job = read_trainjob(custom, namespace, name)
    # Trainer and Kueue write this TrainJob's status too, so its resourceVersion moves on
    # its own; what the steps would have written is A and the floor.
    assert trainjob.admission_in_patch(job) == 0
    assert job["metadata"]["annotations"][wire.ADMISSION_FLOOR_ANNOTATION] == "0"
    assert job["spec"]["suspend"] is True
