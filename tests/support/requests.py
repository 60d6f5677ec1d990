"""The sample start request the suites share, as `dispatch-start` flags."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatch_k8s.core.rules import trainjob
from dispatch_k8s.core.rules.request import StartRequest


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


def trainjob_body(job_id: str, *, runtime: str, namespace: str, **fields: Any) -> dict[str, Any]:
    """The TrainJob `start` would build for a sample request (G=1, N=1), made without start's
    runtime checks: for tests that create a job around them. `fields` override the request."""
    request = StartRequest.model_validate(
        {
            "job_id": job_id,
            "generation": 1,
            "submission": 1,
            "attempt": 1,
            "image": "registry.example/trainer:1",
            "command": ["python"],
            "runtime_name": runtime,
            "namespace": namespace,
            **fields,
        }
    )
    return trainjob.build_trainjob(request, trainer_job="node")  # the torch runtime's trainer
