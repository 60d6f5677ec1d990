"""tests/cluster/binaries.py: one process builds a component at a time; a component's
alternative version is built from its own wrapper module."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cluster import binaries
from tests.cluster.wait import wait_until

GO_VERSION = "go version go0.0 test/none"


@pytest.fixture
def unbuildable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> binaries.Component:
    """A component whose source does not compile: any build of it that runs fails."""
    monkeypatch.setenv("DISPATCH_TESTBIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(binaries, "MODULES_DIR", tmp_path / "go")
    wrapper = tmp_path / "go" / "unbuildable"
    wrapper.mkdir(parents=True)
    (wrapper / "go.mod").write_text("module example.invalid/unbuildable\n\ngo 1.22\n")
    (wrapper / "go.sum").write_text("")
    (wrapper / "main.go").write_text("package main\n\nthis does not compile\n")
    return binaries.Component(
        name="unbuildable",
        module="example.invalid/unbuildable",
        version="v0.0.0",
        binaries={"unbuildable": "."},
        group=binaries.CONTROL_PLANE,
    )


def test_a_build_waits_for_the_one_under_way_and_then_finds_it_cached(
    unbuildable: binaries.Component,
) -> None:
    target = binaries.binary_dir(unbuildable, GO_VERSION)
    target.parent.mkdir(parents=True)
    with ThreadPoolExecutor(1) as pool:
        with (target.parent / ".unbuildable.lock").open("w") as under_way:
            fcntl.flock(under_way, fcntl.LOCK_EX)  # another process's build, not finished
            waiting = pool.submit(binaries.build, unbuildable, GO_VERSION)
            with pytest.raises(TimeoutError):
                waiting.result(timeout=1)
            target.mkdir()  # the other build's entry, complete
            (target / ".ok").write_text("1s\n")
        assert waiting.result(timeout=30) == target
    assert sorted(p.name for p in target.parent.iterdir()) == [".unbuildable.lock", target.name]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may raise a process's priority")
def test_a_build_that_waits_hurries_the_niced_background_build(
    unbuildable: binaries.Component,
) -> None:
    target = binaries.binary_dir(unbuildable, GO_VERSION)
    target.parent.mkdir(parents=True)
    # A stand-in for the background build: niced, in a session of its own, its pid recorded.
    stand_in = ["-c", "import time; time.sleep(60)", "tests.cluster.binaries"]
    background = subprocess.Popen(
        [*binaries.NICED, sys.executable, *stand_in], start_new_session=True
    )
    try:
        (binaries.cache_root() / binaries.BACKGROUND_PID).write_text(f"{background.pid}\n")
        wait_until(
            lambda: os.getpriority(os.PRIO_PROCESS, background.pid) == 19 or None,
            what="the stand-in niced",
            timeout=10,
        )
        with ThreadPoolExecutor(1) as pool:
            with (target.parent / ".unbuildable.lock").open("w") as under_way:
                fcntl.flock(under_way, fcntl.LOCK_EX)  # the background build, not finished
                waiting = pool.submit(binaries.build, unbuildable, GO_VERSION)
                wait_until(
                    lambda: os.getpriority(os.PRIO_PROCESS, background.pid) == 0 or None,
                    what="the waiting build to hurry the background one",
                    timeout=10,
                )
                target.mkdir()
                (target / ".ok").write_text("1s\n")
            assert waiting.result(timeout=30) == target
    finally:
        background.kill()
        background.wait()


def test_a_build_with_nothing_cached_and_nobody_building_runs(
    unbuildable: binaries.Component,
) -> None:
    with pytest.raises(subprocess.CalledProcessError):
        binaries.build(unbuildable, GO_VERSION)


@pytest.mark.parametrize(
    ("package", "name"),
    [
        ("k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"),
        ("go.etcd.io/etcd/server/v3", "server"),
        ("sigs.k8s.io/kustomize/kustomize/v5", "kustomize"),
        ("example.com/tool/v10", "tool"),
        ("example.com/tool/v1", "v1"),
        ("example.com/tool/v0", "v0"),
        ("example.com/tool/v02", "v02"),
        ("sigs.k8s.io/jobset", "jobset"),
    ],
)
def test_an_executable_is_named_as_go_build_names_it(package: str, name: str) -> None:
    assert binaries.executable_name(package) == name


def test_no_second_background_build_starts_while_one_is_under_way(
    unbuildable: binaries.Component, capsys: pytest.CaptureFixture[str]
) -> None:
    root = binaries.cache_root()
    root.mkdir(parents=True)
    with (root / ".background.lock").open("w") as under_way:
        fcntl.flock(under_way, fcntl.LOCK_EX)  # held by the background build's process
        assert binaries.build_in_background([unbuildable]) == 0
    assert "a background build is under way" in capsys.readouterr().err
    assert not (root / "background-build.log").exists(), "a second build was started"


@pytest.mark.parametrize("name", ["trainer", "kubernetes"])
def test_an_alternative_version_is_chosen_by_its_variable_and_built_from_its_own_wrapper(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tomllib.loads(binaries.VERSIONS_FILE.read_text())
    pinned, (alternative, *_) = table[name]["version"], table[name]["alternatives"]
    variable = binaries.version_variable(name)

    def chosen_component() -> binaries.Component:
        (component,) = [c for c in binaries.components() if c.name == name]
        return component

    monkeypatch.delenv(variable, raising=False)
    default = chosen_component()
    assert (default.version, default.wrapper_dir.name) == (pinned, name)
    monkeypatch.setenv(variable, alternative)
    chosen = chosen_component()
    assert (chosen.version, chosen.wrapper_dir.name) == (alternative, f"{name}-{alternative}")
    # Each has its wrapper module in the repository, and so its own cache entry.
    assert chosen.cache_key(GO_VERSION) != default.cache_key(GO_VERSION)
    assert [c.version for c in chosen.every_version()] == [pinned, alternative]


def test_a_version_that_is_not_an_alternative_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISPATCH_TRAINER_VERSION", "v2.1.0")
    with pytest.raises(RuntimeError, match=r"DISPATCH_TRAINER_VERSION=v2.1.0: trainer is tested"):
        binaries.components()


@pytest.mark.parametrize(
    ("module", "old", "new", "repeated"),
    [
        # A module of the same release, at the version the upstream go.mod requires of it.
        ("go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/api/v3", {"Path": "../api"}, None),
        # A guard against an import nothing makes.
        ("go.etcd.io/etcd/server/v3", "go.etcd.io/etcd", {"Path": "./FORBIDDEN_DEPENDENCY"}, None),
        (
            "k8s.io/kubernetes",
            "k8s.io/api",
            {"Path": "./staging/src/k8s.io/api"},
            ("k8s.io/api", "k8s.io/api@v0.36.3"),
        ),
        (
            "sigs.k8s.io/jobset",
            "a.example/x",
            {"Path": "b.example/x", "Version": "v1.2.3"},
            ("a.example/x", "b.example/x@v1.2.3"),
        ),
    ],
)
def test_pin_repeats_an_upstream_replace_line_or_says_why_not(
    module: str, old: str, new: dict[str, str], repeated: tuple[str, str] | None
) -> None:
    version = "v1.36.3" if module == "k8s.io/kubernetes" else "v3.6.8"
    assert binaries.replacement(module, version, old, new) == repeated
