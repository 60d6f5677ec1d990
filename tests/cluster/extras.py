"""The checkpoint library's `torch` extra, installed into the virtualenv beside the Go builds.

PyTorch from PyPI brings NVIDIA's CUDA wheels on Linux x86_64 (over 3 GB; no CPU-only index is
reachable here, docs/development.md), minutes of downloading on a new machine that nothing but
the storage suite, which runs last, and mypy need. `python -m tests.cluster.extras install
--background` (scripts/setup) starts one niced install that holds a lock for its whole life;
`python -m tests.cluster.extras wait` and `wait_for_torch()` (the storage suite) wait for it,
and install in the foreground whatever it left.

The wheels are downloaded once per machine into a wheelhouse beside the Go builds' cache
(`pip download` keeps a file it finds there), and each virtualenv installs from it with no index:
pip's own cache keeps nothing of these downloads here, and a new checkout (CI's) would download
them again.
"""

from __future__ import annotations

import fcntl
import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Final

from tests.cluster.binaries import cache_root

ROOT: Final = Path(__file__).resolve().parent.parent.parent
NICED: Final = ("nice", "-n", "19")
# The virtualenv's own: another worktree's virtualenv installs its torch under its own lock.
LOCK: Final = Path(sys.prefix) / ".torch-install.lock"
LOG: Final = Path(sys.prefix) / "torch-install.log"
PIP: Final = (sys.executable, "-m", "pip")


# What the extra brings that the project's own install does not (checkpoints/pyproject.toml).
MODULES: Final = ("torch", "numpy")


def installed() -> bool:
    """Whether this interpreter can import what the extra installs."""
    return all(importlib.util.find_spec(module) is not None for module in MODULES)


def wheelhouse() -> Path:
    """The machine's downloaded wheels of the extra, beside the Go builds' cache."""
    return cache_root().parent / "wheels"


def _requirements() -> list[str]:
    project = tomllib.loads((ROOT / "checkpoints" / "pyproject.toml").read_text())
    return list(project["project"]["optional-dependencies"]["torch"])


def install() -> None:
    """Download what the wheelhouse lacks (one download per machine at a time), then install
    the extra's requirements from it alone."""
    wheels = wheelhouse()
    wheels.mkdir(parents=True, exist_ok=True)
    with (wheels / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run([*PIP, "download", "-q", "-d", wheels, *_requirements()], check=True)
    subprocess.run(
        [*PIP, "install", "-q", "--no-index", "--find-links", wheels, *_requirements()], check=True
    )


def install_in_background() -> int:
    """Start one niced pip that installs the extra unless torch is there or one is under way."""
    if installed():
        return 0
    with LOCK.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.stderr.write(f"torch is being installed in the background (its log: {LOG})\n")
            return 0
        with LOG.open("w") as sink:
            subprocess.Popen(
                [*NICED, sys.executable, "-m", "tests.cluster.extras", "install"],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                pass_fds=(lock.fileno(),),  # the lock is held while pip lives
                start_new_session=True,  # not stopped with the shell that started it
            )
    sys.stderr.write(f"installing torch in the background (its log: {LOG})\n")
    return 0


def wait_for_torch() -> None:
    """Return once torch imports: wait for the background install, then install what it left."""
    # The lock first, always: torch's files appear long before pip has installed the rest.
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        importlib.invalidate_caches()
        if not installed():
            sys.stderr.write("installing torch (the checkpoint library's torch extra)\n")
            install()
            importlib.invalidate_caches()


def main(argv: list[str]) -> int:
    """Entry point: `install [--background]` or `wait`."""
    if argv == ["install", "--background"]:
        return install_in_background()
    if argv == ["install"]:
        install()
        return 0
    if argv == ["wait"]:
        wait_for_torch()
        return 0
    sys.stderr.write("usage: python -m tests.cluster.extras install [--background] | wait\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
