"""Fixtures of the fault suite: the shared ones (tests/support/fixtures.py), and the local
control plane itself (these tests stop its components)."""

from __future__ import annotations

import pytest

from tests.cluster.harness import ControlPlane
from tests.support.cluster_under_test import Cluster
from tests.support.fixtures import custom, kueue, step, steps_identity, torch_runtime


@pytest.fixture
def plane(control_plane: Cluster) -> ControlPlane:
    """The local control plane, whose components the test stops and starts."""
    if control_plane.plane is None:
        pytest.skip("stops components of the local control plane")
    return control_plane.plane


__all__ = ["custom", "kueue", "step", "steps_identity", "torch_runtime"]
