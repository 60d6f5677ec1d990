"""Fixtures of the image tests: the shared engine, base and step image (tests/support/fixtures.py),
the other images, and what the containers mount."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.cluster import engine
from tests.images.containers import Mount
from tests.support.cluster_under_test import Cluster
from tests.support.controller_identity import controller_identity
from tests.support.fixtures import debian_image, docker_engine, step_image


@pytest.fixture(scope="session")
def busybox_image(docker_engine: None) -> str:
    """An image whose only program is a static busybox (sh, printf, env, cat)."""
    engine.ensure_busybox_image()
    return engine.BUSYBOX


@pytest.fixture(scope="session")
def no_shell_image(docker_engine: None) -> str:
    """An image without /bin/sh, like one built FROM scratch."""
    engine.ensure_no_shell_image()
    return engine.NO_SHELL


@pytest.fixture
def kubeconfig_mount(control_plane: Cluster, tmp_path: Path) -> Mount:
    """The admin kubeconfig, readable by the image's non-root user, mounted read-only."""
    copy = tmp_path / "kubeconfig"
    shutil.copyfile(control_plane.kubeconfig, copy)
    copy.chmod(0o644)  # the harness writes it 0600 for root; the container runs as 65532
    return Mount(host=copy, container="/kube/config")


@pytest.fixture
def outputs_mount(tmp_path: Path) -> Mount:
    """A host directory the container's non-root user writes its result files to."""
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    outputs.chmod(0o777)
    return Mount(host=outputs, container="/outputs", writable=True)


__all__ = ["controller_identity", "debian_image", "docker_engine", "step_image"]
