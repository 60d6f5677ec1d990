"""The project as its release reads it: where the repository is, its version, its default image."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parents[1]
Manifest = dict[str, Any]


def version() -> str:
    """The project version: the default image tag is dispatch-k8s:<version>."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return str(project["version"])


def default_image() -> str:
    """The tag images/build.sh gives by default, and the one the manifests name."""
    return f"dispatch-k8s:{version()}"
