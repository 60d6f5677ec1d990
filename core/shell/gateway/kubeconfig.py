"""Which cluster, with which credentials: in-cluster config inside a pod, else a kubeconfig.

Every way a kubeconfig can be wrong (missing, not a mapping, no such context, unloadable)
is one BadInput line naming the file, never a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from dispatch_k8s.core.rules.errors import BadInput

if TYPE_CHECKING:  # imported where first used: a step that never connects never pays for them
    from kubernetes.client import Configuration


def kubeconfig_files(kubeconfig: Path | None) -> list[Path]:
    """The kubeconfig files the client reads: the one given, else $KUBECONFIG's, else ~/.kube."""
    if kubeconfig is not None:
        return [kubeconfig]
    listed = os.environ.get("KUBECONFIG") or "~/.kube/config"  # the client's own default
    return [Path(word).expanduser() for word in listed.split(os.pathsep) if word]


def load(*, kubeconfig: Path | None, context: str | None) -> Configuration:
    """The client configuration: in-cluster inside a pod unless a kubeconfig is given."""
    from kubernetes import config
    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException

    configuration = Configuration()
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and kubeconfig is None
    files = [] if in_cluster else kubeconfig_files(kubeconfig)
    where = os.pathsep.join(map(str, files))
    if files and not any(path.exists() for path in files):
        raise BadInput(
            f"kubeconfig {where} does not exist"
            if len(files) == 1
            else f"none of the kubeconfig files {where} exists"
        )
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig) if kubeconfig else None,
                context=context,
                client_configuration=configuration,
            )
    except (ConfigException, OSError, TypeError, AttributeError) as e:
        # TypeError, AttributeError: the client reads a file whose YAML is no mapping (a
        # list, a string) as if it were one.
        if files and context is not None:
            _check_context(kubeconfig, context, where=where)
        if isinstance(e, TypeError | AttributeError):
            raise BadInput(f"kubeconfig {where} is not a kubeconfig (no mapping)") from e
        raise BadInput(f"cannot load cluster credentials: {e}".replace("\n", " ")) from e
    return configuration


def _check_context(kubeconfig: Path | None, context: str, *, where: str) -> None:
    """Raise BadInput naming a `context` the kubeconfig does not have."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        contexts, _ = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None
        )
    except (ConfigException, OSError, TypeError, AttributeError):
        return  # not even the contexts can be read: the load's own error says why
    names = sorted(str(entry.get("name")) for entry in contexts or [] if isinstance(entry, dict))
    if context not in names:
        raise BadInput(
            f"context {context} is not in kubeconfig {where} (its contexts: "
            f"{', '.join(names) or 'none'})"
        )
