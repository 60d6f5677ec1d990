"""The eight POSIX shells the prologue must behave identically in (docs/design.md §2).

Each is run the way an image would ship it: busybox and zsh through a link named `sh`,
since both change behaviour by the name they are called with.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final


@dataclass(frozen=True, slots=True)
class Shell:
    """A shell binary and whether it must be called as `sh`."""

    name: str
    binary: str
    as_sh: bool = False


SHELLS: Final = (
    Shell("dash", "dash"),
    Shell("busybox-ash", "busybox", as_sh=True),
    Shell("bash", "bash"),
    Shell("mksh", "mksh"),
    Shell("yash", "yash"),
    Shell("zsh-as-sh", "zsh", as_sh=True),
    Shell("ksh93", "ksh93"),
    Shell("posh", "posh"),
)


def shell_argv0(shell: Shell, links: Path) -> str:
    """The path to run `shell` by: a link named `sh` where the name matters."""
    found = shutil.which(shell.binary)
    if found is None:
        raise AssertionError(
            f"shell {shell.binary!r} is not installed: .ci/run installs all eight from Debian"
        )
    if not shell.as_sh:
        return found
    link = links / shell.name / "sh"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(found)
    return str(link)


def resolve_downward_env(
    env: list[Mapping[str, object]], pod: Mapping[str, object]
) -> dict[str, str]:
    """Resolve a container's env as the kubelet would, fieldRefs from `pod` ('' when absent)."""
    metadata = pod.get("metadata")
    assert isinstance(metadata, Mapping)
    resolved: dict[str, str] = {}
    for var in env:
        name = str(var["name"])
        if "value" in var:
            resolved[name] = str(var["value"])
            continue
        value_from = var["valueFrom"]
        assert isinstance(value_from, Mapping)
        path = str(value_from["fieldRef"]["fieldPath"])
        field, _, key = path.partition("['")
        value = metadata.get(field.removeprefix("metadata."))
        if key:  # one label or annotation; else a field itself (metadata.name)
            source = value or {}
            assert isinstance(source, Mapping)
            value = source.get(key.removesuffix("']"))
        resolved[name] = "" if value is None else str(value)
    return resolved
