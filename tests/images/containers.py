"""Run one command in a container with testcontainers, the way a pipeline pod would.

Every container shares the host's network (the engine has no bridge; the local API server
is on 127.0.0.1) and by default runs as the image's non-root user on a read-only root
filesystem with a tmpfs at /tmp: the restricted pod settings of the shipped manifests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer

# Ryuk, testcontainers' reaper, is an image pulled from Docker Hub, which is not reachable;
# run_container removes each container itself.
testcontainers_config.ryuk_disabled = True

NON_ROOT: Final = "65532:65532"
RUN_TIMEOUT: Final = 180  # seconds; five Go controllers share two cores with the steps


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    """A host path bound into the container."""

    host: Path
    container: str
    writable: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerRun:
    """How one container ended: exit code and both streams."""

    code: int
    stdout: str
    stderr: str
    logs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def result(self) -> dict[str, Any]:
        """The step's JSON result: the whole of stdout."""
        parsed: dict[str, Any] = json.loads(self.stdout)
        return parsed

    @property
    def error(self) -> dict[str, Any]:
        """The last log record: a failing step's one-line reason, with its exit code."""
        assert self.logs, f"no JSON log line on stderr: {self.stderr!r}"
        return self.logs[-1]


def _json_lines(text: str) -> list[dict[str, Any]]:
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


def container(
    image: str,
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[Mount] = (),
    user: str = NON_ROOT,
    read_only: bool = True,
) -> DockerContainer:
    """A container set up like a restricted pod (not started)."""
    made = DockerContainer(
        image,
        env=dict(env or {}),
        volumes=[(str(m.host), m.container, "rw" if m.writable else "ro") for m in mounts],
        network_mode="host",
        read_only=read_only,
        user=user,
    )
    made.with_command(list(command))
    if read_only:
        made.with_tmpfs_mount("/tmp")
    return made


def run_container(
    image: str,
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[Mount] = (),
    user: str = NON_ROOT,
    read_only: bool = True,
) -> ContainerRun:
    """Start the container, wait for it to exit, collect its output, remove it."""
    made = container(image, command, env=env, mounts=mounts, user=user, read_only=read_only)
    made.start()
    try:
        status = made.get_wrapped_container().wait(timeout=RUN_TIMEOUT)
        stdout, stderr = made.get_logs()
    finally:
        made.stop()
    text = stderr.decode(errors="replace")
    return ContainerRun(
        code=int(status["StatusCode"]),
        stdout=stdout.decode(errors="replace"),
        stderr=text,
        logs=_json_lines(text),
    )


# The securityContext fields as_the_pod carries over to the engine; a shipped field not among
# them fails the test rather than being left out unseen.
POD_SECURITY: Final = {"runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile"}
CONTAINER_SECURITY: Final = {"allowPrivilegeEscalation", "readOnlyRootFilesystem", "capabilities"}


def as_the_pod(
    image: str,
    pod: Mapping[str, Any],
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    mounts: Sequence[Mount] = (),
) -> DockerContainer:
    """A container set up as `pod`'s one container says (not started): its user and group,
    the root filesystem read-only if it says so with a tmpfs only where it mounts an emptyDir,
    its capabilities dropped, no privilege escalation, the engine's default seccomp profile."""
    (spec,) = pod["containers"]
    pod_security, security = pod["securityContext"], spec["securityContext"]
    assert set(pod_security) <= POD_SECURITY, f"not carried over: {pod_security}"
    assert set(security) <= CONTAINER_SECURITY, f"not carried over: {security}"
    assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}  # the engine's default
    assert pod_security["runAsNonRoot"] is True
    assert set(security["capabilities"]) == {"drop"}, "only dropped, none added"
    volumes = {volume["name"]: volume for volume in pod.get("volumes") or []}
    made = DockerContainer(
        image,
        env=dict(env),
        volumes=[(str(m.host), m.container, "rw" if m.writable else "ro") for m in mounts],
        network_mode="host",
        read_only=security["readOnlyRootFilesystem"],
        user=f"{pod_security['runAsUser']}:{pod_security['runAsGroup']}",
        cap_drop=security["capabilities"]["drop"],
        security_opt=[] if security["allowPrivilegeEscalation"] else ["no-new-privileges"],
    )
    for mounted in spec.get("volumeMounts") or []:
        volume = volumes[mounted["name"]]
        assert set(volume) == {"name", "emptyDir"}, f"an emptyDir only: {volume}"
        made.with_tmpfs_mount(mounted["mountPath"])
    made.with_command(list(command))
    return made
