"""Build the control plane's Go binaries from their modules, cached outside the repo.

`python -m tests.cluster.binaries build` builds whatever is missing from the cache (with
`--background`, in a niced process of its own that anyone needing a binary waits for);
`python -m tests.cluster.binaries pin` regenerates the wrapper modules from versions.toml;
`python -m tests.cluster.binaries path NAME…` prints where each named binary is, built if
missing (scripts/render-dist takes its kustomize so).
Nothing here is downloaded prebuilt: every binary is compiled from the Go module proxy's
sources with the machine's Go toolchain (docs/design.md §4, docs/development.md).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

HERE: Final = Path(__file__).resolve().parent
VERSIONS_FILE: Final = HERE / "versions.toml"
MODULES_DIR: Final = HERE / "go"
WRAPPER_PREFIX: Final = "dispatch-k8s.invalid/testbin"
GO_DIRECTIVE: Final = "1.26.0"  # the highest `go` line of the pinned upstream modules
# Stamped into kube-apiserver so /version is real: Kueue gates features on it
# (docs/development.md).
CONTROL_PLANE: Final = "control-plane"
ENGINES: Final = "engines"
BENCH: Final = "bench"  # kubectl, for tests/bench only: never part of a control-plane build
RELEASE: Final = "release"  # kustomize and helm, for config/, dist/ and charts/: built when named
STORAGE: Final = "storage"  # SeaweedFS, for the checkpoint library's S3 store: built when named
# What each component's first build took on a new machine (2 cores, Go's module downloads
# included), in the cold CI run of 2026-12-04 (the engines, kustomize and helm niced in the
# background beside the tests): told before a build starts, so nobody wonders whether a quiet
# 10 minutes is a hang. Each build's own output goes to <cache>/<name>-build.log.
COLD_BUILD_SECONDS: Final = {
    "kubernetes": 282,
    "etcd": 26,
    "jobset": 73,
    "kueue": 211,
    "trainer": 70,
    "kubectl": 20,
    "argo": 274,
    "tekton": 186,
    "kustomize": 16,
    "helm": 83,
    "seaweedfs": 582,  # measured with every core busy (other builds and tests beside it)
}
NICED: Final = ("nice", "-n", "19")  # a background build leaves the cores to the tests
BACKGROUND_PID: Final = ".background.pid"  # in the cache root: the background build's
KUBE_VERSION_PACKAGES: Final = (
    "k8s.io/component-base/version",
    "k8s.io/client-go/pkg/version",
)


def cache_root() -> Path:
    """Where built binaries live: never inside the repository."""
    configured = os.environ.get("DISPATCH_TESTBIN_CACHE")
    if configured:
        return Path(configured)
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "dispatch-k8s" / "testbin"


@dataclass(frozen=True, slots=True, kw_only=True)
class Component:
    """One upstream project, built from its own wrapper module."""

    name: str
    module: str
    version: str
    binaries: dict[str, str]  # binary name -> main package
    # "control-plane", "engines" (Argo, Tekton), "bench" (kubectl) or "release" (kustomize,
    # helm): all but the first built if asked
    group: str
    tags: tuple[str, ...] = ()  # Go build tags
    # Symlinks of the upstream repository (path -> target) that its module zip lacks: Go
    # module zips drop symlinks. Built from a copy of the module that has them back.
    links: dict[str, str] = field(default_factory=dict)
    # Go variables set at link time (package.variable -> value), as the upstream release does.
    stamps: dict[str, str] = field(default_factory=dict)
    # The other releases also supported, each with its own wrapper module, chosen by
    # DISPATCH_<NAME>_VERSION (Trainer's: DISPATCH_TRAINER_VERSION=v2.2.1).
    alternatives: tuple[str, ...] = ()
    default: str = ""  # the pinned version, when `version` is an alternative chosen instead

    @property
    def wrapper_dir(self) -> Path:
        """The wrapper module that pins this component's dependency graph: `go/<name>` for the
        pinned version, `go/<name>-<version>` for an alternative."""
        if self.default and self.version != self.default:
            return MODULES_DIR / f"{self.name}-{self.version}"
        return MODULES_DIR / self.name

    def every_version(self) -> list[Component]:
        """This component at its pinned version and at each alternative: what `pin` writes."""
        pinned = self.default or self.version
        return [
            dataclasses.replace(self, version=version, default=pinned)
            for version in (pinned, *self.alternatives)
        ]

    def ldflags(self) -> str:
        """Linker flags: stripped, the stamps set, and for Kubernetes the release version in."""
        flags = ["-s", "-w", *(f"-X {name}={value}" for name, value in self.stamps.items())]
        if self.module == "k8s.io/kubernetes":
            major, minor = self.version.removeprefix("v").split(".")[:2]
            for package in KUBE_VERSION_PACKAGES:
                flags += [
                    f"-X {package}.gitVersion={self.version}",
                    f"-X {package}.gitMajor={major}",
                    f"-X {package}.gitMinor={minor}",
                    f"-X {package}.gitTreeState=clean",
                    f"-X {package}.gitCommit={'0' * 40}",
                    f"-X {package}.buildDate=1970-01-01T00:00:00Z",
                ]
        return " ".join(flags)

    def cache_key(self, go_version: str) -> str:
        """Hash of everything that changes the binaries."""
        digest = hashlib.sha256()
        parts = [
            go_version,
            (self.wrapper_dir / "go.mod").read_text(),
            (self.wrapper_dir / "go.sum").read_text(),
            self.ldflags(),
            json.dumps(self.binaries, sort_keys=True),
        ]
        # Components without tags or links keep the keys they were cached under.
        if self.tags:
            parts.append(",".join(self.tags))
        if self.links:
            parts.append(json.dumps(self.links, sort_keys=True))
        for part in parts:
            digest.update(part.encode())
            digest.update(b"\0")
        return digest.hexdigest()[:16]


def version_variable(name: str) -> str:
    """The environment variable that chooses one of a component's alternatives."""
    return f"DISPATCH_{name.upper().replace('-', '_')}_VERSION"


def chosen_version(name: str, entry: dict[str, Any]) -> str:
    """The version of `name` to build and run: the pinned one, or the alternative its
    variable names; any other value is an error, not a build of an untested release."""
    pinned: str = entry["version"]
    wanted = os.environ.get(version_variable(name), "") or pinned
    allowed = [pinned, *entry.get("alternatives", ())]
    if wanted not in allowed:
        raise RuntimeError(
            f"{version_variable(name)}={wanted}: {name} is tested at {', '.join(allowed)} "
            f"only ({VERSIONS_FILE})"
        )
    return wanted


def components(
    *, engines: bool = False, bench: bool = False, release: bool = False, storage: bool = False
) -> list[Component]:
    """The pinned components in build order (each at its chosen version): the control plane's,
    the others' if asked."""
    table = tomllib.loads(VERSIONS_FILE.read_text())
    every = [
        Component(
            name=name,
            module=entry["module"],
            version=chosen_version(name, entry),
            default=entry["version"],
            alternatives=tuple(entry.get("alternatives", ())),
            binaries=dict(entry["binaries"]),
            group=entry.get("group", CONTROL_PLANE),
            tags=tuple(entry.get("tags", ())),
            links=dict(entry.get("links", {})),
            stamps=dict(entry.get("stamps", {})),
        )
        for name, entry in table.items()
        if "binaries" in entry  # a CRD-only entry (prometheus-operator) has nothing to build
    ]
    wanted = (
        {CONTROL_PLANE}
        | ({ENGINES} if engines else set())
        | ({BENCH} if bench else set())
        | ({RELEASE} if release else set())
        | ({STORAGE} if storage else set())
    )
    return [c for c in every if c.group in wanted]


def _go(*args: str, cwd: Path, capture: bool = False, log: IO[str] | None = None) -> str:
    """Run the go tool; with `log`, its own output (the module downloads: hundreds of lines on
    a new machine) goes there, and only its tail is shown if it fails."""
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-trimpath -buildvcs=false"}
    try:
        done = subprocess.run(
            ["go", *args],
            cwd=cwd,
            env=env,
            check=True,
            text=True,
            stdout=subprocess.PIPE if capture else log,
            stderr=log,
        )
    except subprocess.CalledProcessError:
        if log is not None:
            log.flush()
            tail = Path(log.name).read_text().splitlines()[-30:]
            sys.stderr.write("\n".join([f"go {args[0]} failed; the end of {log.name}:", *tail]))
            sys.stderr.write("\n")
        raise
    return done.stdout if capture else ""


def go_version() -> str:
    """`go version`, part of every cache key."""
    return subprocess.run(
        ["go", "version"], check=True, text=True, stdout=subprocess.PIPE
    ).stdout.strip()


def module_dir(module: str, version: str) -> Path:
    """The extracted source of `module@version` in the Go module cache (downloads if needed)."""
    out = _go("mod", "download", "-json", f"{module}@{version}", cwd=Path.cwd(), capture=True)
    info = json.loads(out)
    if "Error" in info:
        raise RuntimeError(f"go mod download {module}@{version}: {info['Error']}")
    return Path(info["Dir"])


def _upstream_replacements(module: str, version: str) -> list[tuple[str, str]]:
    """The replace lines of `module@version`'s go.mod, as (old, new) `go mod edit` operands.

    Go ignores a dependency's replace lines, so the wrapper must repeat them. A replacement
    by a local path (a module of the same repository) is taken as `replacement` says
    (docs/development.md).
    """
    out = _go("mod", "download", "-json", f"{module}@{version}", cwd=Path.cwd(), capture=True)
    gomod = json.loads(
        _go("mod", "edit", "-json", json.loads(out)["GoMod"], cwd=Path.cwd(), capture=True)
    )
    repeated = (
        replacement(module, version, replace["Old"]["Path"], replace["New"])
        for replace in gomod.get("Replace") or []
    )
    return [each for each in repeated if each is not None]


def replacement(module: str, version: str, old: str, new: dict[str, str]) -> tuple[str, str] | None:
    """One replace line of `module@version`'s go.mod as the wrapper repeats it, or None.

    A local path outside Kubernetes stands for a module released with `module` at the version
    `module` requires of it (etcd's ../api), or guards against an import nothing makes
    (etcd's ./FORBIDDEN_DEPENDENCY): the wrapper's require says as much, nothing to repeat.
    Kubernetes requires its staging modules at v0.0.0 and publishes them as v0.<minor>.<patch>.
    """
    if "Version" in new:
        return old, f"{new['Path']}@{new['Version']}"
    if module == "k8s.io/kubernetes":
        return old, f"{old}@v0.{version.removeprefix('v1.')}"
    return None


def pin(component: Component) -> None:
    """Regenerate the wrapper module of `component` (go.mod and go.sum)."""
    wrapper = component.wrapper_dir
    # Read before anything is removed: a module that cannot be pinned leaves its wrapper as it was.
    replacements = _upstream_replacements(component.module, component.version)
    shutil.rmtree(wrapper, ignore_errors=True)
    wrapper.mkdir(parents=True)
    (wrapper / "go.mod").write_text(
        f"module {WRAPPER_PREFIX}/{component.name}\n\ngo {GO_DIRECTIVE}\n"
    )
    _go("mod", "edit", f"-require={component.module}@{component.version}", cwd=wrapper)
    for old, new in replacements:
        _go("mod", "edit", f"-replace={old}={new}", cwd=wrapper)
    for package in component.binaries.values():
        _go("mod", "edit", f"-tool={package}", cwd=wrapper)
    _go("mod", "tidy", cwd=wrapper)


def binary_dir(component: Component, go_version_text: str) -> Path:
    """Where the binaries of `component` are cached for this Go toolchain."""
    return cache_root() / f"{component.name}-{component.cache_key(go_version_text)}"


def build(component: Component, go_version_text: str) -> Path:
    """Build `component` unless its cache entry is complete; return the cache entry.

    One process builds a component at a time: another that needs it waits for that build
    (a background one, `build --background`) and then finds it cached.
    """
    target = binary_dir(component, go_version_text)
    if (target / ".ok").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{component.name}.lock").open("w") as lock:
        try:  # released when the file is closed, or the process ends
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            hurry_background()
            fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".ok").exists():
            return target
        return _build_into(target, component)


def hurry_background() -> None:
    """Give the background build its normal priority back: someone now waits for it.

    It is niced so that it slows nothing beside it; but once a test waits for it, the tests
    beside that one (the other lanes) would starve it, and the waiting test with it.
    """
    try:
        pid = int((cache_root() / BACKGROUND_PID).read_text())
        if b"tests.cluster.binaries" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return  # that build ended, and its pid is another process's now
        os.setpriority(os.PRIO_PGRP, pid, 0)  # its session's every process: go and compile
    except (OSError, ValueError):
        pass  # no background build, or no right to raise a priority (only root may)


def _build_into(target: Path, component: Component) -> Path:
    """Build into a staging directory beside `target`, then move it there whole."""
    staging = Path(tempfile.mkdtemp(prefix=f".{component.name}-", dir=target.parent))
    started = time.monotonic()
    workdir = _with_links_restored(component, staging) if component.links else None
    log_path = target.parent / f"{component.name}-build.log"
    # One `go build` for all of a component's binaries: a link runs beside the compiling of
    # the next binary's packages, where one build per binary left a core idle during each.
    built = staging / "built"
    with log_path.open("w") as log:
        _go(
            "build",
            *(["-tags", ",".join(component.tags)] if component.tags else []),
            "-ldflags",
            component.ldflags(),
            "-o",
            f"{built}/",
            *component.binaries.values(),
            cwd=workdir or component.wrapper_dir,
            log=log,
        )
    for binary, package in component.binaries.items():
        (built / executable_name(package)).rename(staging / binary)
    built.rmdir()
    if workdir is not None:
        shutil.rmtree(workdir.parent, ignore_errors=True)
    (staging / ".ok").write_text(f"{time.monotonic() - started:.0f}s\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)  # atomic: a half-built entry is never seen as complete
    return target


def executable_name(package: str) -> str:
    """The file `go build -o DIR/` names a main package's executable: the last element of its
    path that is not a major version (`helm.sh/helm/v4/cmd/helm`: helm; `.../kustomize/v5`:
    kustomize)."""
    elements = package.split("/")
    last = elements[-1]
    if len(elements) > 1 and re.fullmatch(r"v[1-9][0-9]*", last) and last != "v1":
        return elements[-2]
    return last


def _with_links_restored(component: Component, staging: Path) -> Path:
    """A build directory whose wrapper module replaces the component's module with a copy of
    its source that has the repository's symlinks back; return the wrapper copy."""
    scratch = Path(tempfile.mkdtemp(prefix=".links-", dir=staging.parent))
    source = scratch / "source"
    shutil.copytree(module_dir(component.module, component.version), source)
    for directory in (source, *source.rglob("*")):
        if directory.is_dir():
            directory.chmod(0o755)  # the module cache's are read-only: this copy is removed
    for path, target in component.links.items():
        (source / path).symlink_to(target)
    wrapper = scratch / "wrapper"
    wrapper.mkdir()
    for name in ("go.mod", "go.sum"):
        shutil.copy2(component.wrapper_dir / name, wrapper / name)
    _go("mod", "edit", f"-replace={component.module}={source}", cwd=wrapper)
    return wrapper


def missing(go_version_text: str | None = None, *, engines: bool = False) -> list[str]:
    """The components whose binaries are not in the cache yet."""
    version = go_version_text or go_version()
    return [
        c.name for c in components(engines=engines) if not (binary_dir(c, version) / ".ok").exists()
    ]


def binaries(go_version_text: str | None = None, *, engines: bool = False) -> dict[str, Path]:
    """Paths of every built binary, building whatever is missing."""
    version = go_version_text or go_version()
    paths: dict[str, Path] = {}
    for component in components(engines=engines):
        built = build(component, version)
        for binary in component.binaries:
            paths[binary] = built / binary
    return paths


def cold_build_time(names: Iterable[str]) -> str:
    """What building the named components took on a new machine, told as `about N min`."""
    seconds = sum(COLD_BUILD_SECONDS.get(name, 0) for name in names)
    return f"about {round(seconds / 60)} min" if seconds >= 90 else f"about {seconds} s"


def build_in_background(to_build: list[Component]) -> int:
    """Start one niced process that builds `to_build`, and return: whoever needs one of them
    first waits for its build (build's lock). Nothing is started when all are cached, or while
    a background build is under way (it holds the background lock for its whole life)."""
    if not to_build:
        return 0
    names = [c.name for c in to_build]
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    log = root / "background-build.log"
    with (root / ".background.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.stderr.write(f"a background build is under way (its progress: {log})\n")
            return 0
        with log.open("w") as sink:
            started = subprocess.Popen(
                [*NICED, sys.executable, "-m", "tests.cluster.binaries", "build", *names],
                cwd=HERE.parent.parent,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                pass_fds=(lock.fileno(),),  # the lock is held while the process lives
                start_new_session=True,  # not stopped with the shell that started it
            )
        (root / BACKGROUND_PID).write_text(f"{started.pid}\n")  # its session's id: hurried
    sys.stderr.write(
        f"building {', '.join(names)} in the background ({cold_build_time(names)} cold, niced; "
        f"its progress: {log})\n"
    )
    return 0


def main(argv: list[str]) -> int:
    """Entry point: `pin [NAME…]`, `build [--engines] [--background] [NAME…]`, or `path NAME…`."""
    command, *names = argv or ["build"]
    engines, background = "--engines" in names, "--background" in names
    names = [name for name in names if name not in ("--engines", "--background")]
    every = components(engines=True, bench=True, release=True, storage=True)
    chosen = (  # in the order named: what is needed first is built first
        [c for name in names for c in every if c.name == name]
        if names
        else components(engines=engines)
    )
    if command == "pin":
        for component in chosen:
            for each_version in component.every_version():
                pin(each_version)
        return 0
    if command == "path":  # each binary of the components named, one a line
        version = go_version()
        for component in chosen:
            built = build(component, version)
            sys.stdout.write("".join(f"{built / name}\n" for name in component.binaries))
        return 0
    if command == "build":
        version = go_version()
        to_build = [c for c in chosen if not (binary_dir(c, version) / ".ok").exists()]
        if background:
            return build_in_background(to_build)
        if to_build:
            building = [c.name for c in to_build]
            sys.stderr.write(
                f"building from source: {', '.join(building)}; on this project's 2-core machine "
                f"that took {cold_build_time(building)} on a new machine (Go's downloads "
                f"included), 0 s once cached in {cache_root()}\n"
            )
        for component in chosen:
            started = time.monotonic()
            if component in to_build:
                took = cold_build_time([component.name])
                sys.stderr.write(
                    f"{component.name} {component.version}: building "
                    f"{', '.join(component.binaries)} ({took} cold)\n"
                )
            built = build(component, version)
            sys.stderr.write(
                f"{component.name} {component.version}: {built} "
                f"({time.monotonic() - started:.0f}s)\n"
            )
        return 0
    sys.stderr.write(
        "usage: python -m tests.cluster.binaries [pin|build [--engines] [--background]|path] "
        "[NAME...]\n"
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
