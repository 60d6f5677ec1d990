"""Fixtures of the image tests: the engine, the base images, the step image built for real."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import engine
from tests.conftest import Cluster
from tests.images.containers import Mount
from tests.support.shipped import default_image


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[None]:
    """A running Docker engine: started here unless one answers, and then stopped
    again, with its mounts, when the run ends: the host is left as the run found it."""
    started = not engine.engine_ready()
    engine.ensure_engine()
    yield
    if started:
        engine.stop_ours()


@pytest.fixture(scope="session")
def debian_image(docker_engine: None) -> str:
    """Debian bookworm with Python 3.11, made with debootstrap: the stand-in base."""
    engine.ensure_debian_base()
    return engine.DEBIAN_BASE


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


@pytest.fixture(scope="session")
def step_image(debian_image: str) -> str:
    """The step image, built by images/build.sh exactly as users build it, on the local base."""
    tag = engine.build_step_image()
    assert tag == default_image(), f"build.sh printed {tag!r} on stdout, and nothing else"
    return tag


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
