"""The Docker engine and the base images the image tests build on, made on this machine.

No image registry is reachable (docs/development.md), so nothing is pulled:

- the engine is Debian's `docker.io`, started here without a bridge or iptables rules, so
  containers run on the host network and all traffic stays on loopback (docs/design.md §4);
- `local/debian-python:bookworm` is a debootstrapped Debian with Python 3.11, the stand-in
  for `python:3.11-slim` (`images/Dockerfile` takes it as `BASE`);
- `local/busybox:static` holds Debian's static busybox and nothing else: a training image
  whose only shell is busybox ash;
- `local/no-shell:static` has no /bin/sh at all, like an image built `FROM scratch`.

Images live in the engine's data root under ~/.cache/dispatch-k8s/docker, so each is made
once per machine. `python -m tests.cluster.engine prepare` does everything (scripts/setup
runs it); the pytest fixtures call the same functions, which return at once when done.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Final

from tests.cluster.wait import wait_until

DEBIAN_BASE: Final = "local/debian-python:bookworm"
BUSYBOX: Final = "local/busybox:static"
NO_SHELL: Final = "local/no-shell:static"
EXIT_CODES: Final = "local/exit-codes:static"
DEBIAN_SUITE: Final = "bookworm"
DEBIAN_MIRROR: Final = os.environ.get("DISPATCH_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# Everything under these paths is dropped from the debootstrapped tree: package caches and
# docs no step needs (they halve the base, 275 MB -> 133 MB).
TRIMMED: Final = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/locale",
)
# The applets a busybox-only training image gets as commands: the shell the prologue runs
# in, and what the tests' user commands call.
BUSYBOX_LINKS: Final = ("sh", "printf", "env", "cat")
ENGINE_START_TIMEOUT: Final = 90.0
# images/build.sh, which the step image is built by exactly as users build it.
BUILD_SCRIPT: Final = Path(__file__).resolve().parents[2] / "images" / "build.sh"
STEP_IMAGE_BUILD_TIMEOUT: Final = 900  # seconds: a cold build downloads every dependency wheel


class EngineUnavailable(RuntimeError):
    """The Docker engine is not running and cannot be started here."""


def cache_dir() -> Path:
    """Where the engine keeps its images and log: outside the repository."""
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "dispatch-k8s"


def _say(message: str) -> None:
    sys.stderr.write(f"images: {message}\n")
    sys.stderr.flush()


def _docker(*args: str, stdin: bytes | None = None, timeout: float = 300) -> str:
    done = subprocess.run(
        ["docker", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        stderr = done.stderr.decode(errors="replace").strip()
        raise RuntimeError(f"docker {' '.join(args[:2])} failed ({done.returncode}): {stderr}")
    return done.stdout.decode()


def engine_ready() -> bool:
    """True when a Docker engine answers on the default socket (or DOCKER_HOST)."""
    try:
        done = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def ensure_engine() -> None:
    """Start Debian's dockerd (no bridge, no iptables) unless an engine already answers.

    `.ci/run`, `python -m tests.up` and a pytest run (the `docker_engine` fixture) stop
    the one they started (`stop_ours`); `python -m tests.cluster.engine stop` stops it by hand.
    """
    if engine_ready():
        return
    dockerd = shutil.which("dockerd")
    if dockerd is None or shutil.which("docker") is None:
        raise EngineUnavailable(
            "no Docker engine answers and dockerd is not installed: run scripts/setup"
        )
    if os.geteuid() != 0:
        raise EngineUnavailable("no Docker engine answers, and only root can start dockerd")
    data_root = cache_dir() / "docker"
    data_root.mkdir(parents=True, exist_ok=True)
    log = cache_dir() / "dockerd.log"
    _say(f"starting dockerd (data root {data_root}, log {log})")
    with log.open("ab") as sink:
        subprocess.Popen(
            [
                dockerd,
                # No bridge network, no iptables rules and IP forwarding left as it is
                # (dockerd turns it on by default): containers use --network host, and nothing
                # on this machine's network changes (docs/design.md §4).
                "--bridge=none",
                "--iptables=false",
                "--ip-masq=false",
                "--ip-forward=false",
                f"--data-root={data_root}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
            start_new_session=True,  # outlives this process: later runs reuse it
        )
    wait_until(
        lambda: engine_ready() or None,
        what=f"dockerd to answer (log {log})",
        timeout=ENGINE_START_TIMEOUT,
    )


def image_exists(tag: str) -> bool:
    """True when the engine holds an image of this tag."""
    done = subprocess.run(
        ["docker", "image", "inspect", tag], capture_output=True, timeout=60, check=False
    )
    return done.returncode == 0


def image_size(tag: str) -> int:
    """The size of an image in bytes, its base's layers included."""
    return int(_docker("image", "inspect", "--format", "{{.Size}}", tag).strip())


def image_labels(tag: str) -> dict[str, str]:
    """An image's labels."""
    labels = json.loads(_docker("image", "inspect", "--format", "{{json .Config.Labels}}", tag))
    return dict(labels or {})


def _import(tag: str, tarball: bytes) -> None:
    _docker("import", "-", tag, stdin=tarball)


def import_tarball(tag: str, tarball: bytes, *, changes: list[str]) -> None:
    """Make `tag` from a root filesystem tarball, with Dockerfile instructions (ENV, ...)."""
    flags = [word for change in changes for word in ("--change", change)]
    _docker("import", *flags, "-", tag, stdin=tarball)


def _import_tree(tag: str, root: Path, *, changes: tuple[str, ...] | list[str] = ()) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(root, arcname=".")
    import_tarball(tag, buffer.getvalue(), changes=list(changes))


def ensure_debian_base() -> None:
    """Make DEBIAN_BASE with debootstrap unless the engine has it (about a minute)."""
    if image_exists(DEBIAN_BASE):
        return
    if shutil.which("debootstrap") is None:
        raise EngineUnavailable("debootstrap is not installed: run scripts/setup")
    scratch = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=cache_dir()))
    try:
        root = scratch / "rootfs"
        _say(f"debootstrapping {DEBIAN_SUITE} with python3 from {DEBIAN_MIRROR}")
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=python3,python3-venv",
                DEBIAN_SUITE,
                str(root),
                DEBIAN_MIRROR,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=900,
        )
        for path in TRIMMED:
            shutil.rmtree(root / path, ignore_errors=True)
            (root / path).mkdir(parents=True, exist_ok=True)
        _import_tree(DEBIAN_BASE, root)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def static_busybox() -> Path:
    """Debian's statically linked busybox, unpacked from its package into the cache.

    The host's /bin/busybox is linked dynamically and so cannot run alone in an image; the
    package is downloaded, not installed, as it would replace the host's busybox.
    """
    target = cache_dir() / "busybox-static" / "busybox"
    if target.exists():
        return target
    scratch = Path(tempfile.mkdtemp(prefix="busybox-", dir=cache_dir()))
    try:
        download = ["apt-get", "download", "busybox-static"]
        fetched = subprocess.run(download, cwd=scratch, capture_output=True, timeout=300)
        if fetched.returncode != 0:  # no package lists yet on this machine
            subprocess.run(["apt-get", "update", "-qq"], check=True, timeout=600)
            subprocess.run(download, cwd=scratch, check=True, capture_output=True, timeout=300)
        package = next(scratch.glob("busybox-static_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(package), str(scratch / "x")], check=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(scratch / "x" / "bin" / "busybox", target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _single_binary_tar(binary: Path, path: str, links: tuple[str, ...]) -> bytes:
    """A root filesystem of one binary at `path` plus symlinks to it beside it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        directory, _, name = path.rpartition("/")
        if directory:
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        info = archive.gettarinfo(str(binary), arcname=path)
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        with binary.open("rb") as content:
            archive.addfile(info, content)
        for link in links:
            info = tarfile.TarInfo(f"{directory}/{link}" if directory else link)
            info.type, info.linkname = tarfile.SYMTYPE, name
            archive.addfile(info)
    return buffer.getvalue()


def ensure_busybox_image() -> None:
    """Make BUSYBOX: /bin/busybox (static) with links sh, printf, env, cat; nothing else."""
    if not image_exists(BUSYBOX):
        _import(BUSYBOX, _single_binary_tar(static_busybox(), "bin/busybox", BUSYBOX_LINKS))


def ensure_no_shell_image() -> None:
    """Make NO_SHELL: one static program at /app and no /bin/sh, like a `FROM scratch` image."""
    if not image_exists(NO_SHELL):
        _import(NO_SHELL, _single_binary_tar(static_busybox(), "app", ()))


STAND_IN_STEP: Final = """#!/bin/sh
for word; do
  case $word in --name=exit-*) exit "${word#--name=exit-}" ;; esac
done
exit 1
"""


def ensure_exit_code_image(steps: list[str]) -> None:
    """Make EXIT_CODES: a stand-in step image whose every step (`steps`, on PATH) exits with
    the code its --name names (`--name=exit-3` exits 3): to see what an engine does with
    each code a real step can end with, without arranging the cause of each."""
    if image_exists(EXIT_CODES):
        return
    with tempfile.TemporaryDirectory(dir=cache_dir()) as work:
        root = Path(work)
        (root / "bin").mkdir()
        shutil.copy2(static_busybox(), root / "bin" / "busybox")
        (root / "bin" / "sh").symlink_to("busybox")
        for step in steps:
            (root / "bin" / step).write_text(STAND_IN_STEP)
            (root / "bin" / step).chmod(0o755)
        _import_tree(EXIT_CODES, root, changes=["ENV PATH=/bin"])


def ensure_pause_image(tag: str, source: Path) -> None:
    """Make `tag`: the Kubernetes pause program, compiled statically from its C source."""
    if image_exists(tag):
        return
    with tempfile.TemporaryDirectory() as work:
        binary = Path(work) / "pause"
        subprocess.run(
            ["gcc", "-static", "-Os", "-DVERSION=local", "-o", str(binary), str(source)],
            check=True,
            capture_output=True,
        )
        tarball = _single_binary_tar(binary, "pause", ())
        _docker("import", "--change", 'ENTRYPOINT ["/pause"]', "-", tag, stdin=tarball)


def build_step_image() -> str:
    """The step image, built by images/build.sh exactly as users build it, on the local
    Debian base (made first if missing); returns the tag build.sh printed."""
    ensure_debian_base()
    done = subprocess.run(
        # The engine has no bridge network, so build steps share the host's.
        [str(BUILD_SCRIPT), "--base", DEBIAN_BASE, "--", "--network", "host"],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=STEP_IMAGE_BUILD_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise EngineUnavailable(f"images/build.sh failed:\n{done.stderr[-4000:]}")
    return done.stdout.strip()


def prepare() -> None:
    """The engine and every base image: what scripts/setup makes ready before the tests."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    ensure_engine()
    ensure_debian_base()
    ensure_busybox_image()
    ensure_no_shell_image()


def _ended(pid: int) -> bool:
    """Whether process `pid` has exited (reaped here if it is this process's child)."""
    with contextlib.suppress(ChildProcessError):  # not ours to reap: its parent (or init) does
        os.waitpid(pid, os.WNOHANG)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"


def stop_ours() -> None:
    """Stop the dockerd `ensure_engine` started (data root ours), and remove the mounts it
    leaves (its network namespace, its data root): the host as it was before it ran."""
    data_root = cache_dir() / "docker"
    found = subprocess.run(
        ["pgrep", "-f", f"^{shutil.which('dockerd') or 'dockerd'} .*--data-root={data_root}$"],
        capture_output=True,
        text=True,
        check=False,
    )
    for pid in found.stdout.split():
        os.kill(int(pid), signal.SIGTERM)
        wait_until(
            lambda pid=int(pid): _ended(pid) or None,  # type: ignore[misc]
            what=f"dockerd {pid} to stop",
            timeout=ENGINE_START_TIMEOUT,
        )
        _say(f"stopped dockerd {pid}")
    mounted = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for point in ("/run/docker/netns/default", str(data_root)):
        if found.stdout.split() and point in mounted:
            subprocess.run(["umount", point], check=False)


def main(argv: list[str]) -> int:
    """`prepare`: start the engine and make the base images; `stop`: stop the engine again."""
    if argv == ["stop"]:
        stop_ours()
        return 0
    if argv != ["prepare"]:
        sys.stderr.write("usage: python -m tests.cluster.engine prepare|stop\n")
        return 2
    try:
        prepare()
    except EngineUnavailable as e:
        _say(str(e))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
