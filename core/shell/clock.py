"""Now, as the API server's timestamps are written.

A `metav1.Time` (conditions' `lastTransitionTime`, Events) is RFC 3339 in whole seconds; a
`metav1.MicroTime` (a Lease's `acquireTime` and `renewTime`) keeps microseconds. Read by the
shell only: the pure rules take the time as an argument.
"""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> str:
    """Now as a Kubernetes Time: RFC 3339, UTC, whole seconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    """Now as a Kubernetes MicroTime: RFC 3339, UTC, microseconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
