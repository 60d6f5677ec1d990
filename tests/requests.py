"""The sample start request the suites share, as `dispatch-start` flags."""

from __future__ import annotations

from collections.abc import Mapping


def request_flags(
    job_id: str, *, attempt: int = 1, args: bool = True, extra: Mapping[str, str] | None = None
) -> list[str]:
    """Flags of a request with G=3 and N=7; `extra` adds `--<field>=<value>` flags."""
    fields = {
        "job-id": job_id,
        "generation": "3",
        "submission": "7",
        "attempt": str(attempt),
        "image": "registry.example/trainer:1",
    }
    flags = [f"--{key}={value}" for key, value in fields.items()]
    flags += ["--command=python", "--command=train.py"]
    if args:
        flags += ["--args=--lr", "--args=0.1"]
    flags += [f"--{key.replace('_', '-')}={value}" for key, value in (extra or {}).items()]
    return flags
