"""Fixtures of the real-node suite: the shared ones (tests/support/fixtures.py)."""

from __future__ import annotations

from tests.support.controller_identity import controller_identity
from tests.support.fixtures import (
    custom,
    debian_image,
    docker_engine,
    kueue,
    member,
    real_node_runtime,
    step,
    step_image,
    step_image_on_node,
    steps_identity,
    torch_runtime,
    training_images,
)

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
