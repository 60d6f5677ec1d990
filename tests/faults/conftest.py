"""Fixtures of the fault suite: the integration suite's, and the local control plane itself
(these tests stop its components)."""

from __future__ import annotations

import pytest

from tests.cluster.harness import ControlPlane
from tests.conftest import Cluster
from tests.integration.conftest import custom, kueue, step, torch_runtime
from tests.pipelines.conftest import steps_identity


@pytest.fixture
def plane(control_plane: Cluster) -> ControlPlane:
    """The local control plane, whose components the test stops and starts."""
    if control_plane.plane is None:
        pytest.skip("stops components of the local control plane")
    return control_plane.plane


__all__ = ["custom", "kueue", "step", "steps_identity", "torch_runtime"]
