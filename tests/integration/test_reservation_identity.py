"""The reservation A is raised for, with the real Kueue: two reservations of one second each get
their own raise, and a TrainJob made again under an old name is not raised for the old Workload.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client

from dispatch_k8s.controller.reconcile import Gatekeeper
from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.shell.gateway import Gateway
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.kueue_objects import (
    KueueSetup,
    check_state,
    condition,
    next_version,
    reserved_at,
    workload_versions,
)
from tests.support.lifecycle import DEADLINE, TRAINER, Step, read_trainjob, start_queued
from tests.support.replicas import replicas

pytestmark = pytest.mark.integration

CYCLES: Final = 12  # evictions tried until one re-reservation falls in the second of the last


def test_an_eviction_and_re_reservation_within_one_second_gets_its_own_raise(
    control_plane: Cluster,
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
    tmp_path: Path,
) -> None:
    """The controller raises for a reservation and approves it; a second check that never
    passes keeps the Workload from being admitted, so it is deactivated and reactivated at
    once, as fast as Kueue goes, until one re-reservation falls in the same second as the one
    before (QuotaReserved's time alone could not tell them apart). Each reservation is raised
    for once: the records differ, A rises by one each time."""
    kueue.install(cpu="1", holding=True)
    started = start_queued(step, namespace, torch_runtime, kueue, "fast")
    name, uid = started.result["name"], started.result["uid"]
    workload = wait_until(lambda: kueue.workload_of(uid), what="the Workload", timeout=DEADLINE)
    versions = workload_versions(
        custom, namespace, workload["metadata"]["name"], timeout=DEADLINE * 3
    )
    seen: list[tuple[str, str, str]] = []  # (QuotaReserved time, raised-for, A) per reservation

    def approved(version: dict[str, Any]) -> bool:
        return (
            condition(version, "Evicted") != "True"
            and reserved_at(version) is not None
            and check_state(version, kueue.check) == "Ready"
        )

    with replicas(control_plane.kubeconfig, namespace, tmp_path, "only") as (only,):
        for _ in range(CYCLES):
            reservation = next_version(versions, approved, "the controller approved a reservation")
            annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
            seen.append(
                (
                    str(reserved_at(reservation)),
                    annotations[wire.RAISED_FOR_ANNOTATION],
                    annotations[wire.ADMISSION_FLOOR_ANNOTATION],
                )
            )
            if len(seen) > 1 and seen[-1][0] == seen[-2][0]:
                break
            kueue.set_active(uid, active=False)
            next_version(versions, lambda v: reserved_at(v) is None, "Kueue released the quota")
            kueue.set_active(uid, active=True)
        raises = only.metric("dispatch_admission_raises_total")
    times = [at for at, _, _ in seen]
    assert any(a == b for a, b in pairwise(times)), (
        f"no re-reservation fell in the second of the one before in {CYCLES} cycles: {times}"
    )
    records = [record for _, record, _ in seen]
    assert len(set(records)) == len(records), f"two reservations shared a record: {records}"
    assert [a for _, _, a in seen] == [str(n) for n in range(1, len(seen) + 1)], seen
    assert raises == len(seen)
    uid_of_workload = workload["metadata"]["uid"]
    assert [record.split(" ")[:2] for record in records] == [
        [uid_of_workload, str(n)] for n in range(len(seen))
    ], "each record counts the evictions before its reservation"


class _MadeAgainBetweenReads(Gateway):
    """The real gateway, but `replace` runs once just before the first TrainJob read: the
    TrainJob is deleted and made again between the controller's two reads."""

    replace: Callable[[], None] | None = None

    def read_trainjob(self, namespace: str, name: str) -> dict[str, Any]:
        replace, self.replace = self.replace, None
        if replace is not None:
            replace()
        return super().read_trainjob(namespace, name)


# Where the policies are installed the ledger refuses this identity made again (ledger-spent,
# test_policies_create.py): the gate's own check is what holds on a cluster without them.
@pytest.mark.policies("none")
def test_a_trainjob_made_again_under_its_name_is_not_raised_for_the_old_workload(
    control_plane: Cluster,
    step: Step,
    namespace: str,
    torch_runtime: str,
    kueue: KueueSetup,
    custom: client.CustomObjectsApi,
) -> None:
    """The controller's pass reads the old TrainJob's Workload (quota reserved, check Pending),
    then the TrainJob by its owner's name; in between, the TrainJob is deleted and made again
    under that name. Kueue v0.19 finishes an orphaned Workload (OwnerNotFound) within moments,
    so the pass is run in-process with the replacement made exactly in that gap: the new
    TrainJob has another UID, and the pass writes nothing, neither a raise for a reservation
    the new job never has nor an approval."""
    kueue.install(cpu="1")
    old = start_queued(step, namespace, torch_runtime, kueue, "again")
    name = old.result["name"]

    def reserved() -> dict[str, Any] | None:
        found = kueue.workload_of(old.result["uid"])
        if found is None or check_state(found, kueue.check) != "Pending":
            return None
        return found if reserved_at(found) is not None else None

    old_workload = wait_until(reserved, what="the old Workload's reservation", timeout=DEADLINE)
    made_again: list[dict[str, Any]] = []

    def replace() -> None:
        # By hand, from the old job's own body: start's ledger refuses to make a spent
        # identity again, but the name is anyone's to reuse.
        body = read_trainjob(custom, namespace, name)
        custom.delete_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
        fresh = {
            "apiVersion": body["apiVersion"],
            "kind": body["kind"],
            "metadata": {
                key: body["metadata"][key] for key in ("name", "namespace", "labels", "annotations")
            },
            # Kueue's webhook adds its own runtime-patch entry to a new job: only ours is copied.
            "spec": {
                **body["spec"],
                "runtimePatches": [
                    patch
                    for patch in body["spec"]["runtimePatches"]
                    if patch["manager"] == wire.PATCH_MANAGER
                ],
            },
        }
        created = custom.create_namespaced_custom_object(*TRAINER, namespace, "trainjobs", fresh)
        assert isinstance(created, dict)
        made_again.append(created)

    gateway = _MadeAgainBetweenReads.connect(kubeconfig=control_plane.kubeconfig, context=None)
    assert isinstance(gateway, _MadeAgainBetweenReads)
    gateway.replace = replace
    keeper = Gatekeeper(gateway, checks=lambda: frozenset({kueue.check}), other_workloads="approve")
    try:
        keeper.gate(old_workload)
    finally:
        keeper.close()
    (new,) = made_again
    new_uid = new["metadata"]["uid"]
    assert (new["metadata"]["name"], new_uid != old.result["uid"]) == (name, True)
    annotations = read_trainjob(custom, namespace, name)["metadata"]["annotations"]
    assert wire.RAISED_FOR_ANNOTATION not in annotations, "raised for the old Workload"
    assert annotations[wire.ADMISSION_FLOOR_ANNOTATION] == "0"
    still = kueue.workload_of(old.result["uid"])  # Kueue deletes it once the new job is queued
    assert still is None or check_state(still, kueue.check) == "Pending", "approved"
