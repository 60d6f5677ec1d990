"""The cluster the tests run against: the local control plane, or the one a kubeconfig names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.cluster.harness import ControlPlane

EXISTING_CLUSTER_ENV: Final = "DISPATCH_TEST_KUBECONFIG"


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    """The cluster under test: an admin kubeconfig, and the local control plane if we run one."""

    kubeconfig: Path
    plane: ControlPlane | None
