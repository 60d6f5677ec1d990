"""The pinned kubectl (tests/cluster/versions.toml's bench component), where it was built."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Final

from tests.cluster import binaries

HOW_TO_BUILD: Final = "python -m tests.cluster.binaries build kubectl"


def find_kubectl() -> Path | None:
    """The kubectl built from versions.toml's bench component, if it was built."""
    (kubectl,) = [c for c in binaries.components(bench=True) if c.name == "kubectl"]
    try:
        path = binaries.binary_dir(kubectl, binaries.go_version()) / "kubectl"
    except (OSError, subprocess.CalledProcessError):  # no Go toolchain: nothing was built
        return None
    return path if path.exists() else None


def run_kubectl(*args: str, kubeconfig: Path, timeout: float = 300) -> str:
    """Run the pinned kubectl with `kubeconfig`; its stdout (one line of error if it fails)."""
    binary = find_kubectl()
    assert binary is not None, f"scripts/setup builds kubectl: {HOW_TO_BUILD}"
    done = subprocess.run(
        [str(binary), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr.strip()}"
    return done.stdout
