"""The installed distribution owns one top-level import package, `dispatch_k8s`, and works
beside other distributions' `core` and `steps` packages."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path
from typing import Final

import pytest

REPO: Final = Path(__file__).resolve().parents[2]
# What the wheel is built from: the source folders and their links under dispatch_k8s/.
PACKAGES: Final = tuple(
    sorted(path.name for path in (REPO / "dispatch_k8s").iterdir() if path.is_symlink())
)
SOURCES: Final = ("pyproject.toml", "README.md", "LICENSE", "bin", "dispatch_k8s", *PACKAGES)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            ignored = shutil.ignore_patterns("__pycache__")
            shutil.copytree(path, source / name, symlinks=True, ignore=ignored)
        else:
            shutil.copy(path, source / name)
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", wheels, source],
        check=True,
    )
    (built,) = wheels.glob("dispatch_k8s-*.whl")
    return built


def test_the_wheel_has_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert tops == {"dispatch_k8s", "dispatch_k8s-0.1.0.data"}  # .data: the gates script
    assert PACKAGES == ("controller", "core", "steps")
    for package in PACKAGES:
        assert f"dispatch_k8s/{package}/__init__.py" in names
    (top_level,) = [name for name in names if name.endswith(".dist-info/top_level.txt")]
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["dispatch_k8s"]


def test_the_wheel_carries_its_license(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
    assert "License-Expression: Apache-2.0" in archive.read(metadata).decode().splitlines()
    licenses = [name for name in archive.namelist() if name.endswith("licenses/LICENSE")]
    assert licenses, "the license text is in the wheel"
    assert archive.read(licenses[0]) == (REPO / "LICENSE").read_bytes()


def test_it_installs_beside_other_core_and_steps_packages(wheel: Path, tmp_path: Path) -> None:
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(env), "platbase": str(env)}))
    # Another distribution's `core` and `steps`, installed first.
    for other in ("core", "steps"):
        (site / other).mkdir()
        (site / other / "__init__.py").write_text(f"WHOSE = 'another {other}'\n")
    # The dependencies come from this venv's site-packages, after the new env's own.
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            env / "bin" / "python",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            wheel,
        ],
        check=True,
    )
    probe = (
        "import core, steps, dispatch_k8s.core.rules.identity, dispatch_k8s.steps.hold;"
        "print(core.WHOSE, steps.WHOSE, dispatch_k8s.core.rules.identity.__name__)"
    )
    # Run outside the checkout, whose own core/ and steps/ would come first on sys.path.
    ran = subprocess.run(
        [env / "bin" / "python", "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert (
        ran.stdout.split("\n")[0] == "another core another steps dispatch_k8s.core.rules.identity"
    )
    version = subprocess.run(
        [env / "bin" / "dispatch-hold", "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.strip() == "dispatch-hold (dispatch-k8s) 0.1.0"
    assert (env / "bin" / "dispatch-kueue-gates").exists()


def test_the_install_page_names_every_executable_the_image_has(wheel: Path) -> None:
    """docs/install.md lists the image's executables: the wheel's console scripts and its
    scripts (the Kueue gates loop), no more and no fewer."""
    archive = zipfile.ZipFile(wheel)
    (entry_points,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    lines = archive.read(entry_points).decode().splitlines()
    section = lines[lines.index("[console_scripts]") + 1 :]
    scripts = {line.split("=")[0].strip() for line in section if "=" in line}
    scripts |= {n.rsplit("/", 1)[1] for n in archive.namelist() if ".data/scripts/" in n}
    page = (REPO / "docs" / "install.md").read_text()
    start = page.index("One image holds every step")
    listed = page[start : page.index("It has no", start)]
    assert set(re.findall(r"`([a-z-]+)`", listed)) == scripts
