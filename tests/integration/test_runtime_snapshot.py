"""The runtime a job is actually built from: from Trainer v2.3.0, Trainer's copy of the runtime
(the ConfigMap <trainjob>-runtime-snapshot), found on the cluster, not configured. `start`
refuses a new job whose copy is already there, and the audit compares the copy with what
`start` checked. Tried without the policies, where nothing refuses the edits
(guard-snapshot.yaml refuses them where it is installed: test_policies_path.py); on a Trainer
that takes no copy (v2.2.1) the tests that need one are skipped, as the cluster says."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import events, wire
from dispatch_k8s.core.rules.errors import NotHeld, NotOpened
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.lifecycle import (
    DEADLINE,
    JOBSET,
    TRAINER,
    Step,
    as_dict,
    read_jobset,
    read_trainjob,
    run_stage,
    start_args,
)
from tests.support.replicas import replicas
from tests.support.shipped import TORCH_RUNTIME, documents

pytestmark = [pytest.mark.integration, pytest.mark.policies("none")]
# Trainer's words, from its Event, when JobSet refuses the JobSet it rebuilt (Trainer's source).
TRAINER_REFUSED: Final = "TrainJob resources reconciliation failed"


def snapshot_of(name: str) -> str:
    """The name of the ConfigMap Trainer keeps TrainJob `name`'s runtime snapshot in."""
    return f"{name}{wire.RUNTIME_SNAPSHOT_SUFFIX}"


def taken(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    """TrainJob `name`'s runtime snapshot once Trainer has built its JobSet; None when this
    Trainer takes none (v2.2.1)."""
    custom = client.CustomObjectsApi(api)

    def built() -> bool | None:
        try:
            return read_jobset(custom, namespace, name) is not None
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    # Trainer takes the copy before it builds the JobSet from it.
    wait_until(built, what=f"Trainer to build JobSet {name}", timeout=DEADLINE)
    try:
        config_map = client.CoreV1Api(api).read_namespaced_config_map(snapshot_of(name), namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return as_dict(config_map)


def give_retries(
    api: client.ApiClient, namespace: str, name: str, snapshot: dict[str, Any]
) -> None:
    """TrainJob `name`'s snapshot edited, as nothing refuses here: the trainer Job given
    retries, so that a failed rank would be replaced with the same A and J."""
    original = snapshot["data"][wire.RUNTIME_SNAPSHOT_KEY]
    retried = original.replace("backoffLimit: 0", "backoffLimit: 6")
    assert retried != original, original
    client.CoreV1Api(api).patch_namespaced_config_map(
        snapshot_of(name), namespace, {"data": {wire.RUNTIME_SNAPSHOT_KEY: retried}}
    )


def rebuilt_from_the_copy(
    custom: client.CustomObjectsApi, namespace: str, name: str, uid: str
) -> dict[str, Any]:
    """JobSet `name` (uid `uid`) deleted until Trainer builds one carrying the edited copy's
    podFailurePolicy. Trainer reads the copy from its informer cache, which may not hold the
    edit yet when the deletion reaches it (seen once in CI): it then builds from the copy as it
    was, and a later deletion finds the edit. Three tries, or the test fails."""
    for _ in range(3):
        custom.delete_namespaced_custom_object(
            *JOBSET, namespace, "jobsets", name, propagation_policy="Background"
        )

        def rebuilt(gone: str = uid) -> dict[str, Any] | None:
            try:
                jobset = read_jobset(custom, namespace, name)
            except ApiException as e:
                if e.status == 404:
                    return None
                raise
            return None if jobset["metadata"]["uid"] == gone else jobset

        jobset = wait_until(rebuilt, what=f"Trainer to build JobSet {name} again", timeout=DEADLINE)
        if "podFailurePolicy" in jobset["spec"]["replicatedJobs"][0]["template"]["spec"]:
            return jobset
        uid = jobset["metadata"]["uid"]
    raise AssertionError(f"Trainer built JobSet {name} three times without the edited copy")


def test_start_refuses_a_new_job_whose_snapshot_is_already_there(
    step: Step, namespace: str, torch_runtime: str, api_client: client.ApiClient
) -> None:
    made = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=snapshot_of("early")),
        data={wire.RUNTIME_SNAPSHOT_KEY: "kind: ClusterTrainingRuntime\n"},
    )
    client.CoreV1Api(api_client).create_namespaced_config_map(namespace, made)
    refused = step("start", *start_args(namespace, torch_runtime, "early", name="early"))
    assert refused.code == 6, refused.error
    assert (
        f"ConfigMap {namespace}/{snapshot_of('early')} exists before its TrainJob" in refused.error
    )
    custom = client.CustomObjectsApi(api_client)
    with pytest.raises(ApiException) as missing:
        custom.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", "early")
    assert missing.value.status == 404

    # The copy deleted, the same request starts; a repeated start finds Trainer's own copy.
    client.CoreV1Api(api_client).delete_namespaced_config_map(snapshot_of("early"), namespace)
    args = start_args(namespace, torch_runtime, "early", name="early")
    assert step("start", *args).code == 0
    taken(api_client, namespace, "early")
    again = step("start", *args)
    assert (again.code, again.result.get("outcome")) == (0, "exists"), again.error


def test_a_snapshot_edited_after_start_is_flagged(
    step: Step, namespace: str, torch_runtime: str, api_client: client.ApiClient
) -> None:
    started = step("start", *start_args(namespace, torch_runtime, "copy"))
    assert started.code == 0, started.error
    name = started.result["name"]
    target = ["--namespace", namespace, "--name", name]
    snapshot = taken(api_client, namespace, name)
    if snapshot is None:
        pytest.skip("this Trainer builds from the runtime itself and takes no snapshot")
    assert run_stage(step, "audit", *target).code == 0, "the copy is what start checked"

    give_retries(api_client, namespace, name, snapshot)
    audited = run_stage(step, "audit", *target)
    assert audited.code == 7, audited.error
    assert (
        f"runtime snapshot ConfigMap {snapshot_of(name)}, the copy of ClusterTrainingRuntime "
        f"{torch_runtime} Trainer builds the job from, changed since start checked it"
    ) in audited.error


def test_the_auditor_flags_a_suspended_job_s_snapshot_edit_as_it_is_made(
    step: Step,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
    control_plane: Cluster,
    tmp_path: Path,
) -> None:
    """An edit of a suspended job's snapshot changes nothing else the auditor watches: it
    watches the snapshots as well, so it flags the edit at once, not at its next resync (an
    hour away here)."""
    started = step("start", *start_args(namespace, torch_runtime, "watched"))
    assert started.code == 0, started.error
    name = started.result["name"]
    snapshot = taken(api_client, namespace, name)
    if snapshot is None:
        pytest.skip("this Trainer builds from the runtime itself and takes no snapshot")
    hour = ("--resync-seconds", "3600")
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "auditor", extra=hour) as (
        auditor,
    ):
        # The snapshot kept (its list), and no other ConfigMap of the namespace, before the
        # edit: the edit is a change its watch tells.
        wait_until(
            lambda: (
                auditor.metric("dispatch_admission_watched_objects", 'kind="snapshots"') == 1
                or None
            ),
            what="the auditor to keep the job's snapshot",
            timeout=30,
        )
        give_retries(api_client, namespace, name, snapshot)

        (message,) = wait_until(
            lambda: told(api_client, (namespace, name), events.FLAGGED),
            what=f"the auditor's flag on {name}",
            timeout=30,
        )
        assert auditor.stop() == 0
    assert f"runtime snapshot ConfigMap {snapshot_of(name)}" in message, message
    assert read_trainjob(client.CustomObjectsApi(api_client), namespace, name)["spec"]["suspend"]


def test_a_runtime_edited_after_start_is_flagged_where_the_job_is_built_from_it(
    step: Step, namespace: str, custom: client.CustomObjectsApi, api_client: client.ApiClient
) -> None:
    """Trainer v2.2.1 builds from the runtime as it is: its edit is a finding. Trainer v2.3.0
    builds from the copy taken before the edit: the edit decides nothing, and is none."""
    runtime = copy.deepcopy(documents(TORCH_RUNTIME)[0])
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": "edited", "namespace": namespace}
    custom.create_namespaced_custom_object(*TRAINER, namespace, "trainingruntimes", runtime)
    flags = [*start_args(namespace, "edited", "edited"), "--runtime-kind", "TrainingRuntime"]
    started = step("start", *flags)
    assert started.code == 0, started.error
    name = started.result["name"]
    target = ["--namespace", namespace, "--name", name]
    snapshot = taken(api_client, namespace, name)
    assert run_stage(step, "audit", *target).code == 0

    trainer = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    trainer["template"]["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    custom.patch_namespaced_custom_object(
        *TRAINER, namespace, "trainingruntimes", "edited", {"spec": runtime["spec"]}
    )
    audited = run_stage(step, "audit", *target)
    if snapshot is not None:
        assert audited.code == 0, audited.error
        return
    assert audited.code == 7
    assert "TrainingRuntime edited changed since start checked it" in audited.error


def test_an_ignore_the_runtime_never_allowed_reaching_the_jobset_is_flagged(
    step: Step, namespace: str, torch_runtime: str, api_client: client.ApiClient
) -> None:
    """The p-blind case of issue 44 without a snapshot made before start (start refuses that):
    the copy edited to ignore exit 42, the JobSet deleted so that Trainer builds it again from
    the copy, the copy put back. The copy is then what start checked, but the JobSet ignores
    a failure the runtime never allowed to be ignored (start recorded that it allows none)."""
    started = step("start", *start_args(namespace, torch_runtime, "blind"))
    assert started.code == 0, started.error
    name = started.result["name"]
    target = ["--namespace", namespace, "--name", name]
    custom = client.CustomObjectsApi(api_client)
    trainjob = as_dict(custom.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name))
    assert trainjob["metadata"]["annotations"][wire.RUNTIME_ALLOWS_ANNOTATION] == ""
    snapshot = taken(api_client, namespace, name)
    if snapshot is None:
        pytest.skip("this Trainer builds from the runtime itself and takes no snapshot")
    first = read_jobset(custom, namespace, name)["metadata"]["uid"]

    original = snapshot["data"][wire.RUNTIME_SNAPSHOT_KEY]
    edited = yaml.safe_load(original)
    trainer = edited["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    ignore = {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}}
    trainer["podFailurePolicy"] = {"rules": [ignore]}
    core = client.CoreV1Api(api_client)
    body = {"data": {wire.RUNTIME_SNAPSHOT_KEY: yaml.safe_dump(edited)}}
    core.patch_namespaced_config_map(snapshot_of(name), namespace, body)
    jobset = rebuilt_from_the_copy(custom, namespace, name, first)
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["podFailurePolicy"]["rules"][0]["action"] == "Ignore", job
    body = {"data": {wire.RUNTIME_SNAPSHOT_KEY: original}}
    core.patch_namespaced_config_map(snapshot_of(name), namespace, body)

    audited = run_stage(step, "audit", *target)
    assert audited.code == 7, audited.error
    assert (
        f"JobSet {name} spec.replicatedJobs[0].template.spec.podFailurePolicy.rules[0].action: "
        "must not be Ignore"
    ) in audited.error
    assert "changed since start checked it" not in audited.error, "the copy is as start saw it"


UNCARRIED_GAUGES: Final = (
    "dispatch_admission_unopened_trainjobs",
    "dispatch_admission_unheld_trainjobs",
)


def told(api_client: client.ApiClient, job: tuple[str, str], reason: str) -> list[str] | None:
    """The messages of the Events `reason` on the TrainJob `job` (namespace, name); None if none."""
    namespace, name = job
    listed = client.CoreV1Api(api_client).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason={reason}"
    )
    return [str(event.message) for event in listed.items] or None


def told_by_the_auditor(
    control_plane: Cluster,
    api_client: client.ApiClient,
    tmp_path: Path,
    job: tuple[str, str],
    reason: str,
) -> tuple[str, dict[str, float]]:
    """An auditor replica's one Event `reason` on the TrainJob `job` (namespace, name), and its
    gauges of jobs not opened and not held, read before it stops (exit 0)."""
    namespace, name = job
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "auditor") as (auditor,):
        messages = wait_until(
            lambda: told(api_client, job, reason),
            what=f"the auditor's {reason} Event on {name}",
            timeout=30,
        )
        gauges = {gauge: auditor.metric(gauge) for gauge in UNCARRIED_GAUGES}
        assert auditor.stop() == 0
    assert len(messages) == 1, messages
    return messages[0], gauges


def test_a_job_trainer_cannot_open_is_told_not_opened_by_unsuspend_status_and_the_auditor(
    step: Step,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
    control_plane: Cluster,
    tmp_path: Path,
) -> None:
    """The snapshot of a suspended job edited (no policy refuses it here): Trainer rebuilds the
    JobSet from the edited copy at the opening, and JobSet refuses the changed template as
    immutable. The job is open, nothing runs: each of them says so, with Trainer's reason."""
    started = step("start", *start_args(namespace, torch_runtime, "stuck"))
    assert started.code == 0, started.error
    name = started.result["name"]
    target = ["--namespace", namespace, "--name", name]
    snapshot = taken(api_client, namespace, name)
    if snapshot is None:
        pytest.skip("this Trainer builds from the runtime itself and takes no snapshot")
    give_retries(api_client, namespace, name, snapshot)

    opened = run_stage(step, "unsuspend", *target)
    assert opened.code == NotOpened.exit_code, opened.error
    assert opened.error.startswith(
        f"TrainJob {name} is not opened: Trainer reconciled it open but its JobSet {name} "
        "is still suspended, so nothing runs: "
    ), opened.error
    assert TRAINER_REFUSED in opened.error
    assert read_jobset(client.CustomObjectsApi(api_client), namespace, name)["spec"]["suspend"]
    # Run again, the raise already applied: told again, not taken for done.
    again = run_stage(step, "unsuspend", *target)
    assert again.code == NotOpened.exit_code, again.error
    assert TRAINER_REFUSED in again.error

    shown = step("status", *target, "-o", "json")
    assert shown.code == 0, shown.stderr
    assert shown.result["state"] == "NotOpened"
    assert TRAINER_REFUSED in shown.result["notOpened"]
    assert shown.result["execution"]["which"] == "opening"
    assert shown.result["execution"]["admission"] == 1

    # The auditor tells it too (and flags the snapshot's change, a finding of its own).
    message, gauges = told_by_the_auditor(
        control_plane, api_client, tmp_path, (namespace, name), events.NOT_OPENED
    )
    assert message.startswith(f"TrainJob {name} is not opened: ")
    assert TRAINER_REFUSED in message
    assert gauges["dispatch_admission_unopened_trainjobs"] == 1


def test_a_running_job_trainer_cannot_hold_is_told_not_held_by_hold_status_and_the_auditor(
    step: Step,
    namespace: str,
    torch_runtime: str,
    api_client: client.ApiClient,
    control_plane: Cluster,
    tmp_path: Path,
) -> None:
    """The snapshot of a running job edited (no policy refuses it here): Trainer rebuilds the
    JobSet from the edited copy at the hold, and JobSet refuses the changed template as
    immutable, the suspension with it. The job is held, its JobSet runs on: each of them says
    so, with Trainer's reason."""
    started = step("start", *start_args(namespace, torch_runtime, "runs-on"))
    assert started.code == 0, started.error
    name = started.result["name"]
    target = ["--namespace", namespace, "--name", name]
    snapshot = taken(api_client, namespace, name)
    if snapshot is None:
        pytest.skip("this Trainer builds from the runtime itself and takes no snapshot")
    assert run_stage(step, "unsuspend", *target).code == 0
    give_retries(api_client, namespace, name, snapshot)

    held = run_stage(step, "hold", *target)
    assert held.code == NotHeld.exit_code, held.error
    assert held.error.startswith(
        f"TrainJob {name} is not held: Trainer reconciled the hold but its JobSet {name} "
        "is not suspended, so what it runs goes on: "
    ), held.error
    assert TRAINER_REFUSED in held.error
    custom = client.CustomObjectsApi(api_client)
    assert read_trainjob(custom, namespace, name)["spec"]["suspend"] is True
    assert read_jobset(custom, namespace, name)["spec"].get("suspend") is not True
    # Run again, the job already suspended: told again, not taken for held.
    again = run_stage(step, "hold", *target)
    assert again.code == NotHeld.exit_code, again.error
    assert TRAINER_REFUSED in again.error

    shown = step("status", *target, "-o", "json")
    assert shown.code == 0, shown.stderr
    assert shown.result["state"] == "NotHeld"
    assert TRAINER_REFUSED in shown.result["notHeld"]
    assert shown.result["notOpened"] is None
    assert shown.result["execution"]["which"] == "running"
    assert shown.result["execution"]["admission"] == 1

    message, gauges = told_by_the_auditor(
        control_plane, api_client, tmp_path, (namespace, name), events.NOT_HELD
    )
    assert message.startswith(f"TrainJob {name} is not held: ")
    assert TRAINER_REFUSED in message
    assert gauges["dispatch_admission_unheld_trainjobs"] == 1
    assert gauges["dispatch_admission_unopened_trainjobs"] == 0
