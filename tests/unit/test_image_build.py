"""images/build.sh with a stand-in `docker` that records its words and a stand-in pip that does
nothing: the tag, the labels' values and `--push` come from pyproject.toml and git, checked
without an engine, a package index or a registry. tests/images/test_image_metadata.py reads the
labels and the SBOM of the image built for real."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Final

import pytest
import yaml

from tests.support.shipped import REPO, default_image, version

BUILD: Final = REPO / "images" / "build.sh"
DOCKERFILE: Final = REPO / "images" / "Dockerfile"
IMAGE_COMPONENT: Final = REPO / "config" / "components" / "image" / "kustomization.yaml"
PUSH_TO: Final = "registry.example:5000/team/dispatch-k8s"
# Each OCI label and the build argument that gives it its value.
LABEL_ARGS: Final = {
    "version": "VERSION",
    "licenses": "LICENSES",
    "revision": "REVISION",
    "source": "SOURCE",
}


def run(
    tmp_path: Path, *argv: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    """Run build.sh; return how it ended and the words of each `docker` call."""
    stand_ins = tmp_path / "bin"
    stand_ins.mkdir(exist_ok=True)
    calls = tmp_path / "docker-calls"
    docker = stand_ins / "docker"
    docker.write_text(f"#!/bin/sh\n{{ printf '%s\\t' \"$@\"; echo; }} >> {calls}\n")
    pip = stand_ins / "python"
    pip.write_text("#!/bin/sh\nexit 0\n")  # `python -m pip wheel|download`: nothing to fetch
    for script in (docker, pip):
        script.chmod(0o755)
    done = subprocess.run(
        ["bash", str(BUILD), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            **os.environ,
            "PATH": f"{stand_ins}:{os.environ['PATH']}",
            "PYTHON": str(pip),
            "TMPDIR": str(tmp_path),
            **(env or {}),
        },
    )
    lines = calls.read_text().splitlines() if calls.exists() else []
    return done, [line.split("\t")[:-1] for line in lines]


def build(
    tmp_path: Path, *argv: str, env: dict[str, str] | None = None
) -> tuple[str, list[list[str]]]:
    """Run build.sh, which must succeed; return its stdout and the `docker` calls' words."""
    done, calls = run(tmp_path, *argv, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout, calls


def build_args(words: list[str]) -> dict[str, str]:
    pairs = [words[i + 1] for i, word in enumerate(words) if word == "--build-arg"]
    return dict(pair.split("=", 1) for pair in pairs)


def head_commit() -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def test_the_dockerfile_labels_take_their_values_from_the_build_args() -> None:
    labels = dict(
        re.findall(r'org\.opencontainers\.image\.(\w+)="\$\{(\w+)\}"', DOCKERFILE.read_text())
    )
    assert labels == LABEL_ARGS


def test_the_tag_and_the_labels_come_from_pyproject_and_git(tmp_path: Path) -> None:
    stdout, calls = build(tmp_path)
    assert stdout == f"{default_image()}\n"
    ((verb, *words),) = calls
    assert verb == "build"
    assert words[words.index("--tag") + 1] == default_image()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    args = build_args(words)
    assert args["VERSION"] == version()
    assert args["LICENSES"] == project["license"] == "Apache-2.0"
    assert args["REVISION"] == head_commit()


def test_the_manifests_name_the_tag_build_sh_makes() -> None:
    (image,) = yaml.safe_load(IMAGE_COMPONENT.read_text())["images"]
    assert f"{image['newName']}:{image['newTag']}" == default_image()


def test_outside_git_revision_and_source_are_unknown(tmp_path: Path) -> None:
    _, ((_, *words),) = build(tmp_path, env={"GIT_DIR": str(tmp_path / "no-repository")})
    args = build_args(words)
    assert (args["REVISION"], args["SOURCE"]) == ("unknown", "unknown")


def test_the_source_is_the_origin_remote_without_credentials(tmp_path: Path) -> None:
    repository = tmp_path / "repository.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(repository)], check=True)
    credentials = "https://someone:secret@git.example/team/dispatch-k8s.git"
    subprocess.run(
        ["git", f"--git-dir={repository}", "remote", "add", "origin", credentials], check=True
    )
    _, ((_, *words),) = build(tmp_path, env={"GIT_DIR": str(repository)})
    assert build_args(words)["SOURCE"] == "https://git.example/team/dispatch-k8s.git"


def test_push_tags_the_version_and_pushes_it(tmp_path: Path) -> None:
    stdout, calls = build(tmp_path, "--push", PUSH_TO)
    pushed = f"{PUSH_TO}:{version()}"
    assert stdout == f"{pushed}\n"
    assert [call[0] for call in calls] == ["build", "tag", "push"]
    assert calls[1:] == [["tag", default_image(), pushed], ["push", pushed]]


@pytest.mark.parametrize("name", [f"{PUSH_TO}:latest", "dispatch-k8s:9"])
def test_push_refuses_a_name_with_a_tag(tmp_path: Path, name: str) -> None:
    done, calls = run(tmp_path, "--push", name)
    assert (done.returncode, calls) == (2, [])
    assert "without a tag" in done.stderr
