"""The store's packing: what is kept is what was put, in a fraction of the bytes."""

from __future__ import annotations

import json
import zlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dispatch_k8s.controller import packing
from dispatch_k8s.controller.store import PODS, Store
from dispatch_k8s.core.rules import audit
from tests.unit.audit_factories import pod_dict

JSON: Any = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), JSON, max_size=6))
def test_what_is_unpacked_is_what_was_packed(obj: dict[str, Any]) -> None:
    assert packing.unpack(packing.pack(obj)) == obj


def test_each_read_is_a_new_object() -> None:
    packed = packing.pack({"metadata": {"labels": {"a": "1"}}})
    first = packing.unpack(packed)
    first["metadata"]["labels"]["a"] = "changed"
    assert packing.unpack(packed) == {"metadata": {"labels": {"a": "1"}}}


def test_a_pod_packs_to_a_fraction_of_its_json() -> None:
    """The preset holds the words every pod repeats: without it the pod would not shrink so."""
    pod = audit.pod_as_audited(pod_dict("train-node-0-0-abcde"))
    compact = json.dumps(pod, separators=(",", ":")).encode()
    packed = packing.pack(pod)
    assert len(packed) * 3 < len(compact)
    assert len(packed) * 3 < len(zlib.compress(compact, 9)) * 2


def test_the_store_gives_back_the_trimmed_pod() -> None:
    pod = pod_dict("train-node-0-0-abcde")
    store = Store()
    store.put(PODS, pod)
    assert store.put(PODS, pod) == audit.pod_as_audited(pod)
