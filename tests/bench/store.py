"""`python -m tests.bench.store`: what one pod costs the controller's auditor to keep.

The auditor's store (controller/store.py) keeps every managed pod, as client-go's informers
keep a cache; this is the part of the controller's memory that grows with the pod count.
For each count, pods of 10-pod jobs as JobSet and the Job controller label them (every label
and annotation they set, the trainer's env) are put into a new store; tracemalloc tells the
bytes the store holds a pod, and the clock the time of one put and of one job's view (what an
audit pass reads). No cluster is needed.

    python -m tests.bench.store                      # 1,000, 10,000 and 100,000 pods
    python -m tests.bench.store --pods 5000

This is a benchmark, not a test: nothing here fails on a figure.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import tracemalloc
import uuid
from typing import Any, Final

from dispatch_k8s.controller.store import JOBSETS, PODS, TRAINJOBS, Store
from dispatch_k8s.core.rules import ownership, wire
from tests.bench.steps import say
from tests.support.machine import machine_line

PODS_A_JOB: Final = 10
NAMESPACE: Final = "dispatch-bench-store"


def job_name(job: int) -> str:
    return f"train-{job:05d}-3f9c1a2b"


def pod(index: int) -> dict[str, Any]:
    """Pod `index` as the API server lists it: JobSet's and the Job controller's every mark."""
    job, slot = divmod(index, PODS_A_JOB)
    name, job_uid = job_name(job), str(uuid.uuid4())
    jobset_uid = str(uuid.uuid5(uuid.NAMESPACE_OID, name))
    labels = {
        ownership.BATCH_CONTROLLER_UID_KEY: job_uid,
        "batch.kubernetes.io/job-name": f"{name}-node-0",
        wire.COMPLETION_INDEX_KEY: str(slot),
        "controller-uid": job_uid,
        "job-name": f"{name}-node-0",
        wire.JOBSET_NAME_KEY: name,
        wire.JOBSET_UID_KEY: jobset_uid,
        wire.REPLICATED_JOB_NAME_KEY: "node",
        wire.JOB_INDEX_KEY: "0",
        "jobset.sigs.k8s.io/job-key": uuid.uuid5(uuid.NAMESPACE_URL, name).hex,
        "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
        wire.RESTART_ATTEMPT_KEY: "0",
        "jobset.sigs.k8s.io/global-replicas": "1",
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer",
    }
    env = [
        {"name": "DISPATCH_EPOCH", "value": "1000001"},
        {"name": "DISPATCH_ATTEMPT", "value": f"{jobset_uid}-1"},
        {"name": wire.ENV_TOKEN_PREFIX, "value": f"{name}-g1-n1"},
    ]
    return {
        "metadata": {
            "name": f"{name}-node-0-{slot}-x7k2p",
            "namespace": NAMESPACE,
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(100_000 + index),
            "creationTimestamp": "2026-12-03T10:00:00Z",
            "labels": labels,
            "annotations": {
                wire.ADMISSION_ANNOTATION: "1",
                wire.COMPLETION_INDEX_KEY: str(slot),
                wire.JOBSET_NAME_KEY: name,
                wire.REPLICATED_JOB_NAME_KEY: "node",
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": f"{name}-node-0",
                    "uid": job_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"containers": [{"name": wire.TRAINER_CONTAINER, "image": "train:1", "env": env}]},
        "status": {
            "phase": "Running",
            "startTime": "2026-12-03T10:00:01Z",
            "containerStatuses": [{"name": wire.TRAINER_CONTAINER, "restartCount": 0}],
        },
    }


def measure(count: int) -> str:
    # As told by a watch: each pod parsed from its own JSON, no string shared by accident.
    pods = [json.loads(json.dumps(pod(index))) for index in range(count)]
    store = Store()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for one in pods:
        store.put(PODS, one)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    kept = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    store = Store()  # timed again without tracemalloc, which slows every allocation
    started = time.perf_counter()
    for one in pods:
        store.put(PODS, one)
    put_us = (time.perf_counter() - started) / count * 1e6
    name = job_name(0)
    store.put(TRAINJOBS, {"metadata": {"name": name, "namespace": NAMESPACE}})
    store.put(JOBSETS, {"metadata": {"name": name, "namespace": NAMESPACE}})
    started = time.perf_counter()
    rounds = 200
    for _ in range(rounds):
        view = store.view((NAMESPACE, name))
    view_ms = (time.perf_counter() - started) / rounds * 1e3
    assert len(view.pods) == min(count, PODS_A_JOB)
    return (
        f"{count:>7,} pods: {kept / count:,.0f} bytes a pod kept ({kept / 2**20:.1f} MiB), "
        f"put {put_us:.0f} us, a job's view ({PODS_A_JOB} pods) {view_ms:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, action="append", help="repeat for more counts")
    counts = parser.parse_args().pods or [1_000, 10_000, 100_000]
    say(machine_line())
    for count in counts:
        say(measure(count))


if __name__ == "__main__":
    main()
