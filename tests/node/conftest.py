"""Fixtures of the real-node suite (tests/node/fixtures.py), and the integration, image and
pipeline suites' fixtures it shares."""

from __future__ import annotations

from tests.images.conftest import debian_image, docker_engine, step_image
from tests.integration.conftest import custom, kueue, member, step, torch_runtime
from tests.node.fixtures import real_node_runtime, step_image_on_node, training_images
from tests.pipelines.conftest import steps_identity
from tests.support.controller_identity import controller_identity

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
