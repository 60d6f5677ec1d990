"""The runtime a TrainJob is built from: the runtime itself, or Trainer's snapshot of it.

Trainer v2.2.1 builds from the runtime itself; v2.3.0 and later from a copy taken at the first
reconcile, the runtime snapshot.

Which one holds is found from the cluster, never configured: a job with a snapshot ConfigMap
is built from it (a Trainer that takes copies made it, or someone did); a job without one is
built from the runtime as it is then (v2.2.1 never takes a copy; v2.3.0 takes one from the
runtime as it is when the copy is missing).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from dispatch_k8s.core.rules import shapes, wire
from dispatch_k8s.core.rules.decisions import Refusal


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """A TrainJob's runtime snapshot ConfigMap as read, and the runtime it holds."""

    name: str
    owner_uid: str | None  # the UID of its controller owner, if it has one
    runtime: Mapping[str, Any] | None  # None when it holds no runtime that parses


def snapshot_name(trainjob_name: str) -> str:
    """The name of the ConfigMap Trainer keeps a TrainJob's runtime snapshot in."""
    return f"{trainjob_name}{wire.RUNTIME_SNAPSHOT_SUFFIX}"


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The UID of an object's controller owner, if it has one."""
    owners = shapes.mapping(obj.get("metadata")).get("ownerReferences")
    for owner in owners if isinstance(owners, list) else []:
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            uid = owner.get("uid")
            return uid if isinstance(uid, str) else None
    return None


def decide_none_before_start(
    wanted: Mapping[str, Any], snapshot: Mapping[str, Any] | None
) -> Refusal | None:
    """A new TrainJob must find no snapshot; None when there is none.

    Trainer would build the job from that copy (made by whoever made it), not from the runtime
    start checks.
    """
    if snapshot is None:
        return None
    meta = shapes.mapping(wanted.get("metadata"))
    ref = shapes.at(wanted, "spec", "runtimeRef")
    return Refusal(
        f"ConfigMap {meta.get('namespace')}/{snapshot_name(str(meta.get('name')))} exists before "
        f"its TrainJob: Trainer v2.3.0 and later would build the new job from that copy, not "
        f"from {shapes.word(ref.get('kind'))} {shapes.word(ref.get('name'))} as start checks it; "
        "have it deleted (it is no start's) or start the job under another name"
    )


def runtime_digest(runtime: Mapping[str, Any]) -> str:
    """A digest of a runtime's spec, the same for the runtime and for Trainer's copy of it.

    The API server serves the runtime as JSON; Trainer's copy is Go's YAML of the same object
    decoded into its types (read in upstream sigs.k8s.io/yaml: JSON marshalled, then YAML), which
    leaves out empty values, writes a whole float as an integer and a resource quantity as a
    string. Those are read past; every other scalar keeps its type, so a `1` made `"1"` (an
    int-or-string field: a count made a name or a percentage) is a change.
    """
    canonical = json.dumps(_canonical(runtime.get("spec")), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


# The fields that hold resource quantities (`resources.limits` and `requests`, a pod's
# `overhead`: maps of them; `emptyDir.sizeLimit`): Go writes a quantity as a string, however
# the runtime spelled it.
_QUANTITIES: Final = frozenset({"limits", "requests", "overhead", "sizeLimit"})


def _canonical(value: Any, *, quantity: bool = False) -> Any:
    if isinstance(value, Mapping):
        kept = {
            str(key): _canonical(item, quantity=quantity or key in _QUANTITIES)
            for key, item in value.items()
        }
        return {key: item for key, item in kept.items() if item not in (None, "", {}, [])}
    if isinstance(value, list):
        return [_canonical(item, quantity=quantity) for item in value]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    number = int(value) if isinstance(value, float) and value.is_integer() else value
    return str(number) if quantity else number
