"""core/rules/snapshot.py: the runtime snapshot a new job must not find, and the digest that
is the same for a runtime and for Trainer's copy of it."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch_k8s.core.rules import snapshot

WANTED: dict[str, Any] = {
    "metadata": {"name": "train-1", "namespace": "team"},
    "spec": {"runtimeRef": {"kind": "ClusterTrainingRuntime", "name": "torch"}},
}


def test_a_new_job_must_find_no_snapshot() -> None:
    assert snapshot.decide_none_before_start(WANTED, None) is None
    refusal = snapshot.decide_none_before_start(WANTED, {"metadata": {"name": "x"}})
    assert refusal is not None
    assert refusal.reason.startswith(
        "ConfigMap team/train-1-runtime-snapshot exists before its TrainJob: Trainer v2.3.0 and "
        "later would build the new job from that copy, not from ClusterTrainingRuntime torch"
    )


def test_the_digest_reads_past_how_go_spells_the_same_runtime() -> None:
    limits = {"cpu": 1, "memory": "1Gi"}
    served = {
        "spec": {
            "template": {
                "spec": {
                    "replicas": 1,
                    "suspend": False,
                    "jobs": [{"resources": {"limits": limits}, "emptyDir": {"sizeLimit": 2}}],
                }
            }
        }
    }
    as_go_writes = {
        "metadata": {"name": "torch"},
        "spec": {
            "template": {
                "metadata": {"creationTimestamp": None},
                "spec": {
                    "replicas": 1.0,
                    "suspend": False,
                    "jobs": [
                        {
                            "labels": {},
                            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                            "emptyDir": {"sizeLimit": "2"},
                        }
                    ],
                },
            }
        },
    }
    assert snapshot.runtime_digest(served) == snapshot.runtime_digest(as_go_writes)


@pytest.mark.parametrize(
    ("story", "changed"),
    [
        ("a count made text", {"replicas": "1", "suspend": False}),
        ("a flag made text", {"replicas": 1, "suspend": "false"}),
        ("a count changed", {"replicas": 2, "suspend": False}),
    ],
)
def test_the_digest_tells_a_scalar_whose_type_or_value_changed(
    story: str, changed: dict[str, Any]
) -> None:
    served = {"spec": {"template": {"spec": {"replicas": 1, "suspend": False}}}}
    edited = {"spec": {"template": {"spec": changed}}}
    assert snapshot.runtime_digest(served) != snapshot.runtime_digest(edited), story


def test_the_controller_owner_is_found_among_the_owners() -> None:
    owners = [{"uid": "a"}, {"uid": "b", "controller": True}]
    assert snapshot.controller_uid({"metadata": {"ownerReferences": owners}}) == "b"
    assert snapshot.controller_uid({"metadata": {}}) is None
