"""A pod an engine made from a shipped template, against what the template says.

The engines' pod defaults on the local cluster (tests/cluster/engines.py: Argo's
`workflowDefaults` and `executor`, Tekton's `default-pod-template`) reach every pipeline pod.
They may change only what this machine forces (docs/development.md, the table): the host
network, the node's toleration, and the API server's loopback address in the env. Everything a
shipped template says of its step's pod and container, the pod that ran holds as it says; what
the engine adds on any cluster (its own containers, its `ARGO_*` variables, its entrypoint
wrapping the command, its volumes) is the engine's, not a change of what ships.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kubernetes import client

from tests.cluster.engines import loopback_api_env
from tests.cluster.node import TOLERATION
from tests.support.lifecycle import as_dict

# What the API server's DefaultTolerationSeconds plugin gives every pod, on any cluster.
DEFAULT_TOLERATIONS: Final = frozenset(
    {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
)


def substituted(value: Any, parameters: Mapping[str, str]) -> Any:
    """`value` with each of the engine's placeholders (`parameters`' keys) resolved."""
    if isinstance(value, str):
        for placeholder, resolved in parameters.items():
            value = value.replace(placeholder, resolved)
        return value
    if isinstance(value, list):
        return [substituted(item, parameters) for item in value]
    if isinstance(value, dict):
        return {key: substituted(item, parameters) for key, item in value.items()}
    return value


def pod_running(
    core: client.CoreV1Api, namespace: str, container: str, command: str
) -> dict[str, Any]:
    """The one pod in `namespace` whose container `container` ran the console script
    `command` (the engines wrap it: it is somewhere in the command line)."""
    found = [
        pod
        for pod in as_dict(core.list_namespaced_pod(namespace))["items"]
        for c in pod["spec"]["containers"]
        if c["name"] == container and command in [*c.get("command", []), *c.get("args", [])]
    ]
    assert len(found) == 1, f"pods running {command} in {container}: {len(found)}"
    return dict(found[0])


def differences(
    pod: Mapping[str, Any],
    *,
    container: str,
    shipped_container: Mapping[str, Any],
    shipped_pod: Mapping[str, Any],
    api_port: int,
    engine_env: str | None = None,
) -> dict[str, tuple[Any, Any]]:
    """Each field of the shipped template that the pod does not hold as shipped, by path:
    (shipped, ran). The machine-forced changes are taken out first, and each must be there:
    a pod without them would not have run here."""
    spec = pod["spec"]
    (ran,) = [c for c in spec["containers"] if c["name"] == container]
    forced_env = loopback_api_env(api_port)
    found: dict[str, tuple[Any, Any]] = {}

    def compare(path: str, shipped: Any, actual: Any) -> None:
        if shipped != actual:
            found[path] = (shipped, actual)

    # Forced: the host network, the node's toleration, the loopback address.
    compare("hostNetwork (forced)", True, spec.get("hostNetwork"))
    tolerations = [
        t for t in spec.get("tolerations") or [] if t.get("key") not in DEFAULT_TOLERATIONS
    ]
    compare("tolerations (forced)", True, TOLERATION in tolerations)
    env = ran.get("env") or []
    compare("env (forced)", True, all(variable in env for variable in forced_env))
    # Everything else as the template says.
    compare(
        "tolerations",
        shipped_pod.get("tolerations") or [],
        [t for t in tolerations if t != TOLERATION],
    )
    compare("serviceAccountName", shipped_pod["serviceAccountName"], spec["serviceAccountName"])
    compare(
        "securityContext",
        shipped_pod.get("securityContext") or {},
        spec.get("securityContext") or {},
    )
    for field in ("image", "securityContext", "resources", "workingDir"):
        compare(f"{container}.{field}", shipped_container.get(field), ran.get(field) or None)
    ours = [
        v
        for v in env
        if v not in forced_env and not (engine_env and v["name"].startswith(engine_env))
    ]
    compare(f"{container}.env", shipped_container.get("env") or [], ours)
    # The engine's entrypoint runs the command: its own words before it, and Tekton's `--`
    # between the command and its args.
    line = [w for w in [*ran.get("command", []), *ran.get("args", [])] if w != "--"]
    wanted = [*shipped_container.get("command", []), *shipped_container.get("args", [])]
    compare(f"{container}.command and args", wanted, line[len(line) - len(wanted) :])
    mounts = ran.get("volumeMounts") or []
    compare(
        f"{container}.volumeMounts (the engine's added)",
        shipped_container.get("volumeMounts") or [],
        [m for m in shipped_container.get("volumeMounts") or [] if m in mounts],
    )
    return found
