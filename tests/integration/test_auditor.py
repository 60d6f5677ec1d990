"""The admission controller's auditor on the real cluster, without the policies and with no
audit step run: it records J as soon as it rises, flags an opening no raise covers and a
replaced JobSet, a controller restarted mid-way loses nothing (it lists everything again),
and once a person follows docs/operations.md's runbook for a job flagged foreign, its blocks run
as written with the controller on, the next R is above every R the pods carried
(docs/operations.md: A job flagged foreign, The auditor).

Pods are moved by playing the kubelet (tests/support/lifecycle.py): a pod failed by hand
is what makes the real JobSet controller restart the job (J + 1) at a moment the test picks.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import events, wire
from tests.cluster.wait import wait_until
from tests.integration.history import Execution, History
from tests.support import snippets
from tests.support.cluster_under_test import Cluster
from tests.support.kubectl import HOW_TO_BUILD, find_kubectl, run_kubectl
from tests.support.lifecycle import (
    TRAINER,
    Kubelet,
    Step,
    copy_of,
    rank_made_again,
    read_jobset,
    read_trainjob,
    reset_jobset,
    run_stage,
    start_args,
    wait_for_drained_jobset,
)
from tests.support.replicas import replicas

pytestmark = [pytest.mark.integration, pytest.mark.policies("none")]
# Long enough that only a watch event, not a resync, can make the auditor look in time.
NO_RESYNC: Final = ("--resync-seconds", "600")
DETECTED: Final = 30.0  # seconds: a watch event to the flag, on two shared cores
UNRAISED: Final = "is open (spec.suspend is not true) at metadata.generation"
RESET: Final = "J may have been reset"  # a JobSet UID other than the recorded one
REPEATED: Final = "which the execution of pod UID"  # a live pod repeating the recorded R
ERASED: Final = "record-erased: "  # a record moved back, as the Warning Event tells it


@pytest.fixture
def member(member: client.ApiClient) -> client.CustomObjectsApi:
    """The team member's view of the TrainJobs (the shared member's client)."""
    return client.CustomObjectsApi(member)


@dataclass(frozen=True, slots=True)
class Runbook:
    """docs/operations.md's blocks for a job flagged foreign (`run: runbook`), as a person
    runs them: the pinned kubectl first on PATH, the admin's kubeconfig with the test's
    namespace as its context's, and NAME the TrainJob's name."""

    kubeconfig: Path
    kubectl: Path
    read: snippets.Snippet  # step 1: the cause and the Events
    clear: snippets.Snippet  # step 4: the flag cleared, the JobSet recorded
    clear_bounded: snippets.Snippet  # step 4 where J may have risen unseen: its bound too

    def run(self, block: snippets.Snippet, name: str) -> str:
        """Run one block for the TrainJob `name`; its output."""
        done = snippets.execute(
            block,
            replace={"NAME": name},
            env={"KUBECONFIG": str(self.kubeconfig)},
            first=[self.kubectl.parent],
        )
        assert done.returncode == 0, f"{block.where}\n{block.body}\n{done.stdout}\n{done.stderr}"
        return done.stdout


@pytest.fixture
def runbook(control_plane: Cluster, namespace: str, tmp_path: Path) -> Runbook:
    """The runbook's blocks, in the order docs/operations.md gives them."""
    kubectl = find_kubectl()
    assert kubectl is not None, f"scripts/setup builds kubectl: {HOW_TO_BUILD}"
    kubeconfig = tmp_path / "person.kubeconfig"
    shutil.copyfile(control_plane.kubeconfig, kubeconfig)
    run_kubectl(
        "config", "set-context", "--current", f"--namespace={namespace}", kubeconfig=kubeconfig
    )
    read, clear, clear_bounded = snippets.run_by("runbook")
    return Runbook(kubeconfig, kubectl, read, clear, clear_bounded)


def annotations_on(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, str]:
    return dict(read_trainjob(custom, namespace, name)["metadata"].get("annotations") or {})


def opened(step: Step, kubelet: Kubelet, namespace: str, runtime: str, job_id: str) -> str:
    """Start and open (A = 1) a TrainJob; its first pod exists."""
    started = step("start", *start_args(namespace, runtime, job_id))
    assert started.code == 0, started.error
    name: str = started.result["name"]
    # run_stage: the auditor's records are writes too; a step that read before one reruns.
    done = run_stage(step, "unsuspend", "--namespace", namespace, "--name", name)
    assert (done.code, done.result.get("admission")) == (0, 1), done.error
    kubelet.wait_for_pod(name, restart=0, admission=1)
    return name


def held_and_released_by_hand(
    step: Step, member: client.CustomObjectsApi, namespace: str, name: str
) -> None:
    """Hold with dispatch-hold, then open again by hand: the opening raises nothing."""
    held = run_stage(step, "hold", "--namespace", namespace, "--name", name)
    assert held.code == 0, held.error
    member.patch_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", name, {"spec": {"suspend": False}}
    )


def flagged(custom: client.CustomObjectsApi, namespace: str, name: str, *, what: str) -> str:
    """The foreign cause, once the controller has flagged the TrainJob with `what` in it."""

    def found() -> str | None:
        current = annotations_on(custom, namespace, name)
        cause = current.get(wire.FOREIGN_CAUSE_ANNOTATION, "")
        return cause if current.get(wire.FOREIGN_ANNOTATION) == "true" and what in cause else None

    return wait_until(found, what=f"the controller to flag {name} ({what})", timeout=DETECTED)


def warning_events(api_client: client.ApiClient, namespace: str, name: str) -> list[str]:
    listed = client.CoreV1Api(api_client).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    )
    return [
        str(event.message)
        for event in listed.items
        if event.type == "Warning" and event.reason == events.FLAGGED
    ]


def cleared_and_released(
    step: Step,
    kubelet: Kubelet,
    history: History,
    runbook: Runbook,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
    namespace: str,
    name: str,
    *,
    admission: int,
    restarts_lost: bool = False,
) -> Execution:
    """What docs/operations.md tells a person (A job flagged foreign): hold, drain, read the
    cause, clear, release; its blocks as written (`restarts_lost`: step 4's second block).

    The released execution's R, read from its pod, is above every R any pod of the job
    carried, as the history watched them; the controller, running throughout, flags nothing
    again and records the new execution.
    """
    target = ("--namespace", namespace, "--name", name)
    assert run_stage(step, "hold", *target).code == 0
    wait_for_drained_jobset(api_client, namespace, name)
    refused = run_stage(step, "unsuspend", *target)
    assert (refused.code, "is flagged foreign" in refused.error) == (7, True), refused.error
    cause = annotations_on(custom, namespace, name)[wire.FOREIGN_CAUSE_ANNOTATION]
    told = runbook.run(runbook.read, name)
    assert told.startswith(cause), told
    assert events.FLAGGED in told, told
    earlier = history.of(name)
    runbook.run(runbook.clear_bounded if restarts_lost else runbook.clear, name)
    records = annotations_on(custom, namespace, name)
    assert (
        records[wire.JOBSET_UID_ANNOTATION]
        == read_jobset(custom, namespace, name)["metadata"]["uid"]
    )
    released = run_stage(step, "unsuspend", *target)
    assert (released.code, released.result.get("admission")) == (0, admission), released.error
    pod = kubelet.wait_for_pod(name, restart=0, admission=admission)
    now = Execution(name, admission, int(pod["metadata"]["labels"][wire.RESTART_ATTEMPT_KEY]))
    wait_until(
        lambda: now in history.of(name) or None,
        what=f"the history to see {name}'s execution at A = {admission}",
        timeout=DETECTED,
    )
    assert now.r > max(e.r for e in earlier), (now, earlier)
    recorded_execution(custom, namespace, name, now.r)
    assert wire.FOREIGN_ANNOTATION not in annotations_on(custom, namespace, name)
    return now


def test_a_release_by_hand_after_a_hold_is_flagged_as_an_opening_no_raise_covers(
    control_plane: Cluster,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    member: client.CustomObjectsApi,
    api_client: client.ApiClient,
    runbook: Runbook,
    tmp_path: Path,
) -> None:
    with (
        replicas(control_plane.kubeconfig, namespace, tmp_path, "auditor", extra=NO_RESYNC) as (
            auditor,
        ),
        History(api_client, namespace) as history,
    ):
        name = opened(step, kubelet, namespace, torch_runtime, "by-hand")
        held_and_released_by_hand(step, member, namespace, name)
        cause = flagged(custom, namespace, name, what=UNRAISED)
        job = read_trainjob(custom, namespace, name)
        assert f"at metadata.generation {job['metadata']['generation']}" in cause
        assert job["spec"]["suspend"] is False, "the auditor never stops a job"
        labels = f'kind="unraised-opening",namespace="{namespace}"'
        assert auditor.metric("dispatch_admission_findings_total", labels) >= 1
        assert auditor.metric("dispatch_admission_detection_latency_seconds_count") >= 1
        wait_until(
            lambda: any(UNRAISED in m for m in warning_events(api_client, namespace, name)) or None,
            what=f"a {events.FLAGGED} Warning Event on {name}",
            timeout=DETECTED,
        )
        # The hand release ran R = 1 again; the raise after the flag is cleared gives A = 2.
        kubelet.wait_for_pod(name, restart=0, admission=1)
        assert {e.r for e in history.of(name)} == {1}
        cleared_and_released(
            step, kubelet, history, runbook, custom, api_client, namespace, name, admission=2
        )
        assert auditor.stop() == 0
    # No audit step ran: the flag is the controller's.
    assert any(r["message"] == "flagged foreign" for r in auditor.records())


def test_a_jobset_replaced_after_a_restart_and_a_hold_is_flagged_and_the_next_r_repeats_none(
    control_plane: Cluster,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
    runbook: Runbook,
    tmp_path: Path,
) -> None:
    """Issue 24's first path: without the controller nothing recorded J = 1 and the release
    after the flag was cleared ran R = 2 again; the controller records J as it rises."""
    with (
        replicas(control_plane.kubeconfig, namespace, tmp_path, "auditor", extra=NO_RESYNC),
        History(api_client, namespace) as history,
    ):
        name = opened(step, kubelet, namespace, torch_runtime, "replaced")
        kubelet.set_phase(kubelet.wait_for_pod(name, restart=0, admission=1), "Failed")
        kubelet.wait_for_pod(name, restart=1, admission=1)
        recorded_restart(custom, namespace, name, 1)
        assert run_stage(step, "hold", "--namespace", namespace, "--name", name).code == 0
        wait_for_drained_jobset(api_client, namespace, name)
        reset_jobset(custom, namespace, name)
        flagged(custom, namespace, name, what=RESET)
        assert {e.r for e in history.of(name)} == {1, 2}
        # max(A, floor) + highest J (1) - J of the new JobSet (0) + 1
        cleared_and_released(
            step, kubelet, history, runbook, custom, api_client, namespace, name, admission=3
        )


def test_an_opening_by_hand_is_flagged_even_if_the_first_execution_was_never_seen(
    control_plane: Cluster,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    member: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    name = opened(step, kubelet, namespace, torch_runtime, "unseen")
    assert run_stage(step, "hold", "--namespace", namespace, "--name", name).code == 0
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "late", extra=NO_RESYNC):
        member.patch_namespaced_custom_object(
            *TRAINER, namespace, "trainjobs", name, {"spec": {"suspend": False}}
        )
        cause = flagged(custom, namespace, name, what=UNRAISED)
    # Nothing recorded the first execution, so only the opening itself could tell it.
    assert "already had" in cause
    assert "which the execution of pod UID" not in cause


def test_a_record_erased_then_a_rerun_is_flagged_and_the_record_put_back(
    control_plane: Cluster,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    member: client.CustomObjectsApi,
    api_client: client.ApiClient,
    tmp_path: Path,
) -> None:
    """The erasure dispatch-audit alone cannot see (it has nothing to compare with once the
    record is gone; the adversarial matrix tries it on the node): a member removes
    last-execution and deletes the trainer Job, and JobSet reruns it under the same A and J.
    The auditor saw the record go: it flags that, puts the record back, and then flags the
    rerun against it."""
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "auditor", extra=NO_RESYNC):
        name = opened(step, kubelet, namespace, torch_runtime, "erased")
        first = kubelet.wait_for_pod(name, restart=0, admission=1)
        recorded_execution(custom, namespace, name, 1)
        record = annotations_on(custom, namespace, name)[wire.LAST_EXECUTION_ANNOTATION]
        member.patch_namespaced_custom_object(
            *TRAINER,
            namespace,
            "trainjobs",
            name,
            {"metadata": {"annotations": {wire.LAST_EXECUTION_ANNOTATION: None}}},
        )
        client.BatchV1Api(member.api_client).delete_namespaced_job(
            f"{name}-node-0", namespace, propagation_policy="Background"
        )

        def rerun() -> dict[str, Any] | None:
            again = [
                p
                for p in kubelet.pods(name, restart=0)
                if p["metadata"]["uid"] != first["metadata"]["uid"]
            ]
            return again[0] if again else None

        again = wait_until(rerun, what=f"JobSet to rerun {name}'s trainer Job", timeout=DETECTED)
        assert again["metadata"]["annotations"][wire.ADMISSION_ANNOTATION] == "1"  # R = 1 again
        cause = flagged(custom, namespace, name, what=REPEATED)
        assert first["metadata"]["uid"] in cause
    annotations = annotations_on(custom, namespace, name)
    assert annotations[wire.LAST_EXECUTION_ANNOTATION] == record, "put back, not the rerun's"
    told = warning_events(api_client, namespace, name)
    assert any(ERASED in message for message in told), told


def test_a_jobset_restart_is_recorded_at_once_without_an_audit_run(
    control_plane: Cluster,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "auditor", extra=NO_RESYNC) as (
        auditor,
    ):
        name = opened(step, kubelet, namespace, torch_runtime, "restart")
        assert annotations_on(custom, namespace, name)[wire.HIGHEST_RESTART_ANNOTATION] == "0"
        kubelet.set_phase(kubelet.wait_for_pod(name, restart=0, admission=1), "Failed")
        recorded_restart(custom, namespace, name, 1)
        assert read_jobset(custom, namespace, name)["status"].get("restarts") == 1
        recorded_execution(custom, namespace, name, 2)
        assert auditor.metric("dispatch_admission_watched_objects", 'kind="trainjobs"') == 1
        assert auditor.metric("dispatch_admission_watched_objects", 'kind="pods"') >= 1
    assert wire.FOREIGN_ANNOTATION not in annotations_on(custom, namespace, name), (
        "a clean restart is no finding"
    )


def recorded_execution(custom: client.CustomObjectsApi, namespace: str, name: str, r: int) -> None:
    def recorded() -> bool | None:
        execution = annotations_on(custom, namespace, name).get(wire.LAST_EXECUTION_ANNOTATION)
        return f'"r":{r}' in (execution or "") or None

    wait_until(recorded, what=f"the controller to record {name}'s R = {r}", timeout=DETECTED)


def recorded_restart(custom: client.CustomObjectsApi, namespace: str, name: str, j: int) -> None:
    def recorded() -> bool | None:
        highest = annotations_on(custom, namespace, name).get(wire.HIGHEST_RESTART_ANNOTATION)
        return highest == str(j) or None

    wait_until(recorded, what=f"the controller to record {name}'s J = {j}", timeout=DETECTED)


def test_a_controller_restarted_mid_way_records_the_j_that_rose_while_it_was_down(
    control_plane: Cluster,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "first") as (first,):
        name = opened(step, kubelet, namespace, torch_runtime, "restarted")
        recorded_execution(custom, namespace, name, 1)
        first.kill()  # no pass finished, nothing handed over
    # While no controller runs: J rises, and nothing records it (no audit, no hold: a hold
    # would record it in its own update).
    kubelet.set_phase(kubelet.wait_for_pod(name, restart=0, admission=1), "Failed")
    kubelet.wait_for_pod(name, restart=1, admission=1)
    assert annotations_on(custom, namespace, name)[wire.HIGHEST_RESTART_ANNOTATION] == "0"
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "second", extra=NO_RESYNC):
        # Its first list, not a watch event, shows the new replica what happened.
        recorded_restart(custom, namespace, name, 1)
    assert wire.FOREIGN_ANNOTATION not in annotations_on(custom, namespace, name)


def test_a_controller_restarted_mid_way_flags_a_release_by_hand_made_while_it_was_down(
    control_plane: Cluster,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    member: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "first") as (first,):
        name = opened(step, kubelet, namespace, torch_runtime, "down")
        recorded_execution(custom, namespace, name, 1)
        first.kill()
    held_and_released_by_hand(step, member, namespace, name)
    assert wire.FOREIGN_ANNOTATION not in annotations_on(custom, namespace, name)
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "second", extra=NO_RESYNC):
        flagged(custom, namespace, name, what=UNRAISED)


def spec_changes(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every other spec field an edit role can try on a running TrainJob, as merge patches."""
    patches = job["spec"]["runtimePatches"]
    ours = next(p for p in patches if p["manager"] == wire.PATCH_MANAGER)
    retouched = {**ours, "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"x": "y"}}}}}
    return {
        "runtimePatches": {"runtimePatches": [*patches, {"manager": "example.com/other"}]},
        "runtimePatches entry": {
            "runtimePatches": [p if p is not ours else retouched for p in patches]
        },
        "trainer": {"trainer": {"args": ["--changed"]}},
        "runtimeRef": {"runtimeRef": {"name": "other"}},
        "managedBy": {"managedBy": "kueue.x-k8s.io/multikueue"},
        "initializer": {"initializer": {"dataset": {"storageUri": "hf://x/y"}}},
    }


def test_a_running_trainjob_takes_no_spec_change_but_its_deadline(
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    member: client.CustomObjectsApi,
) -> None:
    """What core/rules/opening.py rests on: on a running TrainJob only an opening moves the
    generation, and setting or removing activeDeadlineSeconds, which the rule cannot tell
    from one (it flags it: on expiry Trainer deletes the JobSet, and J begins again)."""
    name = opened(step, kubelet, namespace, torch_runtime, "frozen")
    before = read_trainjob(custom, namespace, name)
    generation = before["metadata"]["generation"]

    def edit(spec: dict[str, Any]) -> int:
        """The edit's HTTP status (200 taken); whether it moved the generation is checked."""
        try:
            member.patch_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", name, {"spec": spec}
            )
        except client.ApiException as e:
            return int(e.status)
        return 200

    refused = {field: edit(patch) for field, patch in spec_changes(before).items()}
    assert all(status in (403, 422) for status in refused.values()), refused
    # What does not move it: suspend rewritten as it is, and metadata (the records).
    assert edit({"suspend": False}) == 200
    member.patch_namespaced_custom_object(
        *TRAINER, namespace, "trainjobs", name, {"metadata": {"annotations": {"x": "y"}}}
    )
    after = read_trainjob(custom, namespace, name)
    assert after["metadata"]["generation"] == generation
    assert after["spec"] == before["spec"]
    # activeDeadlineSeconds (start never sets it) can be set, not changed (CEL self == oldSelf
    # binds only while it is set), and removed, each a generation more, over and over.
    assert edit({"activeDeadlineSeconds": 3600}) == 200
    assert read_trainjob(custom, namespace, name)["metadata"]["generation"] == generation + 1
    assert edit({"activeDeadlineSeconds": 7200}) == 422
    assert edit({"activeDeadlineSeconds": None}) == 200
    assert edit({"activeDeadlineSeconds": 60}) == 200
    assert read_trainjob(custom, namespace, name)["metadata"]["generation"] == generation + 3


def test_a_controller_down_while_j_rose_and_the_jobset_was_replaced_flags_it_on_return(
    control_plane: Cluster,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
    runbook: Runbook,
    tmp_path: Path,
) -> None:
    """What no one watched is gone with the JobSet: the J it reached (its pods went with it).
    The controller on return sees the new UID and the recorded R run again, not the lost J;
    the person records the bound the JobSet's failure policy sets (docs/kueue.md: The auditor)."""
    with History(api_client, namespace) as history:
        with replicas(control_plane.kubeconfig, namespace, tmp_path, "first") as (first,):
            name = opened(step, kubelet, namespace, torch_runtime, "lost")
            recorded_execution(custom, namespace, name, 1)
            first.kill()
        kubelet.set_phase(kubelet.wait_for_pod(name, restart=0, admission=1), "Failed")
        kubelet.wait_for_pod(name, restart=1, admission=1)  # R = 2, which nothing records
        reset_jobset(custom, namespace, name)
        kubelet.wait_for_pod(name, restart=0, admission=1)  # R = 1 again, on the new JobSet
        before = annotations_on(custom, namespace, name)
        assert before[wire.HIGHEST_RESTART_ANNOTATION] == "0"
        assert wire.FOREIGN_ANNOTATION not in before
        with replicas(control_plane.kubeconfig, namespace, tmp_path, "second", extra=NO_RESYNC):
            cause = flagged(custom, namespace, name, what=REPEATED)
            assert RESET in cause, cause
            assert annotations_on(custom, namespace, name)[wire.HIGHEST_RESTART_ANNOTATION] == "0"
            assert {e.r for e in history.of(name)} == {1, 2}
            # The raise rule alone (docs/concepts.md) would give A = 1 + (0 - 0) + 1 = 2: the lost
            # R. J of a JobSet never exceeds its maxRestarts (no rule ignores it in this runtime).
            jobset = read_jobset(custom, namespace, name)
            bound = int(jobset["spec"]["failurePolicy"]["maxRestarts"])
            assert bound == 3
            cleared_and_released(
                step,
                kubelet,
                history,
                runbook,
                custom,
                api_client,
                namespace,
                name,
                admission=1 + bound + 1,
                restarts_lost=True,
            )
            highest = annotations_on(custom, namespace, name)[wire.HIGHEST_RESTART_ANNOTATION]
            assert highest == str(bound)


def test_a_rank_scaled_away_and_back_is_flagged_by_the_auditor(
    control_plane: Cluster,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    api_client: client.ApiClient,
    tmp_path: Path,
) -> None:
    """Issue 43, part 2: the auditor records the pod of every slot as it sees them (the first
    pod alone at first, the second appended), so rank 1 made again by a scale of its Job to
    one rank and back, under the same A and J, is flagged."""
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "auditor", extra=NO_RESYNC):
        started = step("start", *start_args(namespace, torch_runtime, "scaled", num_nodes="2"))
        assert started.code == 0, started.error
        name: str = started.result["name"]
        done = run_stage(step, "unsuspend", "--namespace", namespace, "--name", name)
        assert done.code == 0, done.error

        def both_recorded() -> bool | None:
            text = annotations_on(custom, namespace, name).get(wire.LAST_EXECUTION_ANNOTATION, "")
            return ('"node/0/0":' in text and '"node/0/1":' in text) or None

        wait_until(
            both_recorded, what=f"the auditor to record both ranks of {name}", timeout=DETECTED
        )
        first, again = rank_made_again(api_client, kubelet, name)
        cause = flagged(custom, namespace, name, what=REPEATED)
        assert (
            f"pod {again['metadata']['name']} began an execution with R = 1 in slot node/0/1"
            in cause
        )
        assert first["metadata"]["uid"] in cause


def test_a_copy_under_another_name_is_flagged_on_the_original_by_the_auditor(
    control_plane: Cluster,
    step: Step,
    kubelet: Kubelet,
    namespace: str,
    torch_runtime: str,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """Issue 43, part 4: a running job copied under another name runs the original's trainer
    token; the auditor audits the original too when the copy's pods change, and compares them
    with the original's records (the copy's JobSet is not the one recorded)."""
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "auditor", extra=NO_RESYNC):
        original = opened(step, kubelet, namespace, torch_runtime, "copied")
        recorded_execution(custom, namespace, original, 1)
        copy_name = f"zz-{original}"
        live = read_trainjob(custom, namespace, original)
        custom.create_namespaced_custom_object(
            *TRAINER, namespace, "trainjobs", copy_of(live, copy_name)
        )
        kubelet.wait_for_pod(copy_name, restart=0, admission=1)
        copy_uid = read_jobset(custom, namespace, copy_name)["metadata"]["uid"]
        flagged(custom, namespace, original, what=f"JobSet UID {copy_uid} is not the recorded")
