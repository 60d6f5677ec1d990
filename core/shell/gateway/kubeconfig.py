"""Which cluster, with which credentials: in-cluster config inside a pod, else a kubeconfig.

The namespace a step acts in when none is given is resolved here too, as kubectl resolves it.
Every way a kubeconfig can be wrong (missing, not a mapping, no such context or user, an
exec plugin missing or failing, a server that is not a URL, unloadable) is one BadInput line
naming the file, never a traceback, and is found before any request is sent.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from dispatch_k8s.core.rules.errors import BadInput

if TYPE_CHECKING:  # imported where first used: a step that never connects never pays for them
    from kubernetes.client import Configuration


# The namespace of the pod's ServiceAccount, mounted in every pod that mounts its token.
SERVICE_ACCOUNT_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE: Final = "default"


def uses_in_cluster_config(kubeconfig: Path | None) -> bool:
    """Inside a pod, with no kubeconfig given, the pod's own ServiceAccount is used."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and kubeconfig is None


def kubeconfig_files(kubeconfig: Path | None) -> list[Path]:
    """The kubeconfig files the client reads: the one given, else $KUBECONFIG's, else ~/.kube."""
    if kubeconfig is not None:
        return [kubeconfig]
    listed = os.environ.get("KUBECONFIG") or "~/.kube/config"  # the client's own default
    return [Path(word).expanduser() for word in listed.split(os.pathsep) if word]


def _unreadable() -> tuple[type[Exception], ...]:
    """What the client raises for a kubeconfig it cannot use, beside its ConfigException.

    OSError: a file it cannot open. ValueError (UnicodeDecodeError among them), YAMLError:
    bytes that are not UTF-8, or not YAML. TypeError, AttributeError: YAML whose document is
    no mapping (a list, a string), read as if it were one.
    """
    import yaml
    from kubernetes.config.config_exception import ConfigException

    return (ConfigException, OSError, ValueError, yaml.YAMLError, TypeError, AttributeError)


def load(*, kubeconfig: Path | None, context: str | None) -> Configuration:
    """The client configuration: in-cluster inside a pod unless a kubeconfig is given."""
    from kubernetes import config
    from kubernetes.client import Configuration

    configuration = Configuration()
    in_cluster = uses_in_cluster_config(kubeconfig)
    files = [] if in_cluster else kubeconfig_files(kubeconfig)
    where = os.pathsep.join(map(str, files))
    if files and not any(path.exists() for path in files):
        raise BadInput(
            f"kubeconfig {where} does not exist"
            if len(files) == 1
            else f"none of the kubeconfig files {where} exists"
        )
    try:
        with _errors_logged() as logged:
            if in_cluster:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            else:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=str(kubeconfig) if kubeconfig else None,
                    context=context,
                    client_configuration=configuration,
                )
    except _unreadable() as e:
        if files and context is not None:
            _check_context(kubeconfig, context, where=where)
        if isinstance(e, TypeError | AttributeError):
            raise BadInput(f"kubeconfig {where} is not a kubeconfig (no mapping)") from e
        raise BadInput(f"cannot load cluster credentials: {_one_line(str(e))}") from e
    if logged:
        # The client logs (and so swallows) what its exec plugin did wrong, then goes on
        # without credentials: each request would fail as if the server were down (75).
        raise BadInput(
            f"kubeconfig {where}: its exec credential plugin failed: {_one_line(logged[0])}"
        )
    if not in_cluster:
        _check_user(kubeconfig, context, where=where)
    _check_server(configuration.host, where=f"kubeconfig {where}" if files else "in-cluster config")
    return configuration


def _one_line(text: str) -> str:
    return " ".join(text.split())


@contextlib.contextmanager
def _errors_logged() -> Iterator[list[str]]:
    """What the kubernetes client logs at ERROR (its exec plugin's failure), kept, not printed.

    The client logs through the root logger; with no handler there, the first `logging.error`
    would install one that prints to stderr for the rest of the process (a line that is not
    the step's own). A handler of our own stops that and keeps the message.
    """
    kept: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            kept.append(record.getMessage())

    handler = Keep(logging.ERROR)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield kept
    finally:
        root.removeHandler(handler)


def _check_server(server: str, *, where: str) -> None:
    """BadInput unless `server` is a URL a request can be sent to: http(s)://HOST[:PORT].

    `where` names what gave it: `kubeconfig FILE`, or the in-cluster config.
    """
    from urllib3.exceptions import LocationParseError
    from urllib3.util import parse_url

    try:
        url = parse_url(server)
    except LocationParseError:
        url = None
    if url is None or url.scheme not in ("https", "http") or not url.host:
        raise BadInput(
            f"{where}: the cluster's server {server!r} is not a URL (give https://HOST[:PORT])"
        )


def _check_user(kubeconfig: Path | None, context: str | None, *, where: str) -> None:
    """BadInput when the context names a user the kubeconfig does not have, as kubectl says.

    The client would go on without credentials, and every request be refused as anonymous.
    """
    from kubernetes.config.kube_config import KubeConfigMerger

    try:
        # Merged and looked up as the client does (its merger, not a copy of its rules).
        merged = KubeConfigMerger(os.pathsep.join(map(str, kubeconfig_files(kubeconfig)))).config  # type: ignore[no-untyped-call]
        chosen = context or merged["current-context"]
        user = merged["contexts"].get_with_name(chosen)["context"].safe_get("user")
        found = bool(merged.safe_get("users")) and merged["users"].get_with_name(user, safe=True)
    except _unreadable():
        return  # loaded, yet not readable again: the load said all it could
    if user and not found:
        raise BadInput(f"kubeconfig {where}: user {user} of context {chosen} is not in it")


def _check_context(kubeconfig: Path | None, context: str, *, where: str) -> None:
    """Raise BadInput naming a `context` the kubeconfig does not have."""
    from kubernetes import config

    try:
        contexts, _ = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None
        )
    except _unreadable():
        return  # not even the contexts can be read: the load's own error says why
    names = sorted(str(entry.get("name")) for entry in contexts or [] if isinstance(entry, dict))
    if context not in names:
        raise BadInput(
            f"context {context} is not in kubeconfig {where} (its contexts: "
            f"{', '.join(names) or 'none'})"
        )


def resolve_namespace(*, kubeconfig: Path | None, context: str | None) -> str:
    """The namespace when none is given, as kubectl resolves it.

    The namespace of the context `load` chooses in the kubeconfig it reads, else the pod's
    ServiceAccount's, else `default`.
    """
    return (
        _context_namespace(kubeconfig, context) or _service_account_namespace() or DEFAULT_NAMESPACE
    )


def _context_namespace(kubeconfig: Path | None, context: str | None) -> str:
    """The namespace of the context `load` chooses (`context`, else current-context), or ""."""
    if uses_in_cluster_config(kubeconfig):
        return ""
    from kubernetes.config.kube_config import KubeConfigMerger

    where = os.pathsep.join(map(str, kubeconfig_files(kubeconfig)))
    try:
        # Merged as `load` merges them (the client's merger, not a copy of its rules).
        merged = KubeConfigMerger(where).config  # type: ignore[no-untyped-call]
        if merged is None:  # none of the files exists
            return ""
        chosen = context or merged["current-context"]
        namespace = merged["contexts"].get_with_name(chosen)["context"].safe_get("namespace")
    except _unreadable():
        # A kubeconfig that cannot be read names no namespace; connecting says what is wrong.
        return ""
    return namespace if isinstance(namespace, str) else ""


def _service_account_namespace() -> str:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    except OSError:  # not in a pod, or its token is not mounted
        return ""
