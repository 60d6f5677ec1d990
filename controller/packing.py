"""The store's objects as deflated JSON, so a kept pod costs bytes, not kilobytes.

As dicts, a trimmed pod cost about 2.6 KiB in the store (tracemalloc, with its index entries):
a dict or list per label set, owner reference, container and status, most of it the same
words in every pod. Deflated against a preset dictionary of those words, it costs under
0.1 KiB, little more than its name and UIDs, so the store no longer grows with the pod count
by what the pods repeat. Reading one back (a few microseconds) is paid only for the Jobs and
pods of the TrainJob a pass audits, and each read gives a fresh object that no other thread
holds.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any, Final

from dispatch_k8s.core.rules import audit, wire

_WBITS: Final = -zlib.MAX_WBITS  # raw deflate: no header or checksum, the store's own bytes
_LEVEL: Final = 6


def _compact(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _preset() -> bytes:
    """What every kept pod repeats: a trimmed pod labelled, annotated and owned as JobSet's are.

    Built from the audit's own trimming, so a label it starts to read is in the dictionary too.
    """
    labels = dict.fromkeys(sorted(audit.POD_LABELS_READ), "0")
    labels[wire.JOBSET_NAME_KEY] = labels[wire.JOBSET_UID_KEY] = ""
    pod = {
        "metadata": {
            "name": "",
            "namespace": "",
            "uid": "",
            "resourceVersion": "",
            "labels": labels,
            "annotations": dict.fromkeys(sorted(audit.POD_ANNOTATIONS_READ), "1"),
            "ownerReferences": [{"uid": "", "kind": "Job", "controller": True}],
        },
        "spec": {"containers": [{"name": "node", "env": [{"name": wire.ENV_TOKEN_PREFIX}]}]},
        "status": {"phase": "Pending", "containerStatuses": [{"name": "node", "restartCount": 0}]},
    }
    return _compact(audit.pod_as_audited(pod))


PRESET: Final = _preset()


def pack(obj: Mapping[str, Any]) -> bytes:
    """`obj` as the store keeps it."""
    deflate = zlib.compressobj(_LEVEL, zlib.DEFLATED, _WBITS, zdict=PRESET)
    return deflate.compress(_compact(obj)) + deflate.flush()


def unpack(packed: bytes) -> dict[str, Any]:
    """The object `pack` kept, as a new dict."""
    inflate = zlib.decompressobj(_WBITS, zdict=PRESET)
    obj: dict[str, Any] = json.loads(inflate.decompress(packed) + inflate.flush())
    return obj
