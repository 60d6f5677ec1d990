"""Fixtures of the real-node suite: the shared ones (tests/support/fixtures.py), and the steps
run as a pipeline on a cluster runs them: as the shipped steps' ServiceAccount."""

from __future__ import annotations

import pytest

from tests.support.controller_identity import controller_identity
from tests.support.fixtures import (
    custom,
    debian_image,
    docker_engine,
    kueue,
    member,
    real_node_runtime,
    step_image,
    step_image_on_node,
    steps_identity,
    torch_runtime,
    training_images,
)
from tests.support.lifecycle import Step, StepRun, run_step
from tests.support.step_identity import StepIdentity

__all__ = [
    "controller_identity",
    "custom",
    "debian_image",
    "docker_engine",
    "kueue",
    "member",
    "real_node_runtime",
    "step",
    "step_image",
    "step_image_on_node",
    "steps_identity",
    "torch_runtime",
    "training_images",
]


@pytest.fixture
def step(steps_identity: StepIdentity) -> Step:
    """Run a step as the shipped steps' ServiceAccount (pipelines/rbac/steps.yaml, installed in
    the test's namespace) with a token of it, not the admin: a grant the steps need and the
    shipped Role lacks fails here as it would in a pipeline."""

    def run(name: str, *args: str) -> StepRun:
        return run_step(name, *args, kubeconfig=steps_identity.kubeconfig)

    return run
