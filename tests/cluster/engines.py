"""The real workflow engines on the local cluster: Argo Workflows and Tekton Pipelines.

Both controllers are built from their Go modules (tests/cluster/versions.toml, group
"engines"), run on the host as the admin, and create pods that the real node runs
(docs/development.md). What this module makes true for them:
- Every listener stays off the host's interfaces: each controller runs in a network namespace
  of its own that reaches only the API server (tests/cluster/netns.py). Argo's healthz (:6060)
  and Tekton's probes (:8080) and profiling (:8008) ports cannot be moved or bound to loopback.
- The engines' images are made locally (no registry): Argo's executor (argoexec on PATH, no
  shell), Tekton's tools (entrypoint, nop, workingdirinit, sidecarlogresults under /ko-app)
  and a busybox shell image.
- Their pods run on this node: the engines' own defaults give every pod the host network, the
  node's toleration and the API server's loopback address in the variables in-cluster clients
  read (Argo: `workflowDefaults` and `executor`; Tekton: `default-pod-template`). Nothing in a
  workflow or pipeline has to change to run here.
- Tekton runs with its webhook, which defaults and validates every Tekton object (and
  Tekton's ConfigMaps) as on a cluster: it too runs in a network namespace of its own, and the
  API server reaches its port there through a relay from a free host loopback port. Its
  webhook configurations are its release's (config/500-webhooks.yaml); they name the Service
  `tekton-pipelines-webhook`, which here is an ExternalName of 127.0.0.1 (the API server
  sends to `externalName:port`, the port being the relay's). Knative's reconcilers in the
  webhook make its certificate, as on a cluster, and fill in the configurations' rules and CA;
  they refuse a URL in place of the Service, so the Service stays. The CRDs convert nothing
  (every shipped object is v1, the storage version; tests/cluster/crds.py).
"""

from __future__ import annotations

import copy
import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from tests.cluster import binaries
from tests.cluster import node as node_module
from tests.cluster.process import LOOPBACK, Process
from tests.cluster.relay import LoopbackToUnix, UnixToLoopback
from tests.cluster.rest import ApiError, RestClient

REPO: Final = binaries.HERE.parent.parent
ARGO_NAMESPACE: Final = "argo"
TEKTON_NAMESPACE: Final = "tekton-pipelines"
ARGO_CONFIGMAP: Final = "workflow-controller-configmap"
ARGO_CONTROLLER: Final = "argo-workflow-controller"
TEKTON_CONTROLLER: Final = "tekton-controller"
TEKTON_WEBHOOK: Final = "tekton-webhook"
TEKTON_WEBHOOK_PORT: Final = 8443  # inside its namespace; the shipped Deployment's
IMAGE_REVISION: Final = "2"  # raise when ensure_images makes its images differently
# Where each controller says it is ready, inside its own network namespace.
READINESS: Final = {
    ARGO_CONTROLLER: f"http://{LOOPBACK}:6060/healthz",
    TEKTON_CONTROLLER: f"http://{LOOPBACK}:8080/readiness",
    TEKTON_WEBHOOK: f"http://{LOOPBACK}:8080/readiness",
}
TEKTON_SHELL_LINKS: Final = ("sh", "cat", "touch", "chmod", "cp", "mkdir", "ls", "rm", "mv")
# Tekton checks the server's version against this; the shipped manifest says v1.28.0.
TEKTON_MIN_KUBERNETES: Final = "v1.28.0"
TEKTON_ENV: Final = {
    "SYSTEM_NAMESPACE": TEKTON_NAMESPACE,
    "KUBERNETES_MIN_VERSION": TEKTON_MIN_KUBERNETES,
    "CONFIG_DEFAULTS_NAME": "config-defaults",
    "CONFIG_LOGGING_NAME": "config-logging",
    "CONFIG_OBSERVABILITY_NAME": "config-observability",
    "CONFIG_FEATURE_FLAGS_NAME": "feature-flags",
    "CONFIG_LEADERELECTION_NAME": "config-leader-election-controller",
    "CONFIG_SPIRE": "config-spire",
    "METRICS_DOMAIN": "tekton.dev/pipeline",
}
# The webhook's, as its shipped Deployment (config/webhook.yaml) sets them.
TEKTON_WEBHOOK_ENV: Final = {
    **TEKTON_ENV,
    "CONFIG_LEADERELECTION_NAME": "config-leader-election-webhook",
    "WEBHOOK_PORT": str(TEKTON_WEBHOOK_PORT),
    "WEBHOOK_ADMISSION_CONTROLLER_NAME": "webhook.pipeline.tekton.dev",
    "WEBHOOK_SERVICE_NAME": "tekton-pipelines-webhook",
    "WEBHOOK_SECRET_NAME": "webhook-certs",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineImages:
    """The locally made images the engines' pods run."""

    argoexec: str
    tekton_tools: str
    shell: str

    def tags(self) -> list[str]:
        """Every tag, for importing into the node."""
        return [self.argoexec, self.tekton_tools, self.shell]


def loopback_api_env(api_port: int) -> list[dict[str, str]]:
    """What in-cluster clients read to find the API server, set to its loopback address.

    The kubelet sets these to the `kubernetes` Service's cluster IP, which nothing here
    routes; a container's own env wins over the kubelet's.
    """
    return [
        {"name": "KUBERNETES_SERVICE_HOST", "value": LOOPBACK},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(api_port)},
        {"name": "KUBERNETES_SERVICE_PORT_HTTPS", "value": str(api_port)},
    ]


def _files_tar(files: Mapping[str, Path], links: Mapping[str, str]) -> bytes:
    """A root filesystem of `files` (path in the image -> file here), symlinks, and a /tmp
    any user may write (Argo's executor writes a resource template's manifest there)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        tmp = tarfile.TarInfo("tmp")
        tmp.type, tmp.mode = tarfile.DIRTYPE, 0o1777
        archive.addfile(tmp)
        directories = sorted({p.rpartition("/")[0] for p in [*files, *links] if "/" in p})
        for directory in directories:
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        for path, source in files.items():
            info = archive.gettarinfo(str(source), arcname=path)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o755
            with source.open("rb") as content:
                archive.addfile(info, content)
        for path, target in links.items():
            info = tarfile.TarInfo(path)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return buffer.getvalue()


def ensure_images(paths: Mapping[str, Path]) -> EngineImages:
    """Make the engines' images in the Docker engine unless it has them.

    Tags carry the binaries' cache entry and IMAGE_REVISION, so a rebuilt binary or a
    changed recipe gets a new image.
    """
    from tests.cluster import engine

    argoexec = f"local/argoexec:{paths['argoexec'].parent.name}-{IMAGE_REVISION}"
    tools = f"local/tekton-tools:{paths['entrypoint'].parent.name}-{IMAGE_REVISION}"
    shell = f"local/busybox:tekton-{IMAGE_REVISION}"
    images = EngineImages(argoexec=argoexec, tekton_tools=tools, shell=shell)
    if not engine.image_exists(argoexec):
        # emissary's init container finds argoexec on PATH and copies it into the pod.
        tarball = _files_tar({"bin/argoexec": paths["argoexec"]}, {})
        engine.import_tarball(argoexec, tarball, changes=["ENV PATH=/bin"])
    if not engine.image_exists(tools):
        names = ("entrypoint", "nop", "workingdirinit", "sidecarlogresults")
        tarball = _files_tar({f"ko-app/{name}": paths[name] for name in names}, {})
        engine.import_tarball(tools, tarball, changes=['ENTRYPOINT ["/ko-app/nop"]'])
    if not engine.image_exists(images.shell):
        links = {f"bin/{name}": "busybox" for name in TEKTON_SHELL_LINKS}
        tarball = _files_tar({"bin/busybox": engine.static_busybox()}, links)
        engine.import_tarball(images.shell, tarball, changes=["ENV PATH=/bin"])
    return images


def argo_configmap(api_port: int, images: EngineImages) -> dict[str, Any]:
    """Argo's controller configuration for this cluster."""
    env = loopback_api_env(api_port)
    executor = {"image": images.argoexec, "imagePullPolicy": "Never", "env": env}
    defaults = {
        "spec": {
            "hostNetwork": True,
            "tolerations": [node_module.TOLERATION],
            # The step containers (Argo names them `main`) need the loopback address too;
            # `executor.env` reaches only the init and wait containers.
            "podSpecPatch": json.dumps({"containers": [{"name": "main", "env": env}]}),
        }
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": ARGO_CONFIGMAP, "namespace": ARGO_NAMESPACE},
        "data": {
            "executor": yaml.safe_dump(executor),
            "workflowDefaults": yaml.safe_dump(defaults),
            # Its metrics port would listen on every interface (of its namespace, here).
            "metricsConfig": "enabled: false\n",
            "telemetryConfig": "enabled: false\n",
        },
    }


def tekton_configmaps(source: Path, api_port: int) -> list[dict[str, Any]]:
    """Tekton's shipped config/config-*.yaml, with this cluster's defaults."""
    maps = []
    for path in sorted((source / "config").glob("config-*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "ConfigMap":
                maps.append(_tekton_for_this_node(copy.deepcopy(document), api_port))
    return maps


def _tekton_for_this_node(configmap: dict[str, Any], api_port: int) -> dict[str, Any]:
    name = configmap["metadata"]["name"]
    data = configmap.setdefault("data", {})
    if name == "feature-flags":
        # The default makes a StatefulSet per workspace-sharing PipelineRun (no Service
        # network here to reach one, and not what the shipped Pipelines need).
        data["coschedule"] = "disabled"
    if name == "config-defaults":
        template = {
            "hostNetwork": True,
            "tolerations": [node_module.TOLERATION],
            "env": loopback_api_env(api_port),
        }
        data["default-pod-template"] = yaml.safe_dump(template)
    return configmap


def tekton_webhook_objects(source: Path, port: int) -> list[dict[str, Any]]:
    """Tekton's webhook configurations and their Secret as its release ships them, each
    webhook sent to `port` (the relay's), and the Service they name as an ExternalName of
    127.0.0.1: the one difference from a cluster, where it selects the webhook's pods."""
    shipped = yaml.safe_load_all((source / "config" / "500-webhooks.yaml").read_text())
    documents = [copy.deepcopy(document) for document in shipped if document]
    for document in documents:
        for webhook in document.get("webhooks", []):
            webhook["clientConfig"]["service"]["port"] = port
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": TEKTON_WEBHOOK_ENV["WEBHOOK_SERVICE_NAME"],
            "namespace": TEKTON_NAMESPACE,
        },
        "spec": {"type": "ExternalName", "externalName": LOOPBACK},
    }
    return [service, *documents]


def tekton_webhooks_configured(
    rest: RestClient, documents: Iterable[dict[str, Any]]
) -> bool | None:
    """True once the webhook has filled in every webhook configuration among `documents` (its
    rules and CA: before, they match nothing), else None."""
    for document in documents:
        if "webhooks" not in document:
            continue
        plural = f"{document['kind'].lower()}s"
        path = f"/apis/{document['apiVersion']}/{plural}/{document['metadata']['name']}"
        for webhook in rest.get(path).get("webhooks", []):
            if not webhook.get("rules") or not webhook["clientConfig"].get("caBundle"):
                return None
    return True


def engine_crds(plane_rest: RestClient) -> list[str]:
    """Install every pinned CRD (the engines', prometheus-operator's); return their names."""
    from tests.cluster import crds

    names = []
    for crd in crds.every_crd():
        try:
            plane_rest.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        except ApiError as e:
            if e.status != 409:
                raise
        names.append(crd["metadata"]["name"])
    return names


def apply_all(rest: RestClient, documents: Iterable[dict[str, Any]]) -> None:
    """Create each object (core v1 or a group's; plural: the kind + "s", true of the kinds
    this module makes), leaving any that already exists."""
    for document in documents:
        namespace = document["metadata"].get("namespace")
        plural = f"{document['kind'].lower()}s"
        base = "/api/v1" if document["apiVersion"] == "v1" else f"/apis/{document['apiVersion']}"
        path = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
        try:
            rest.post(path, document)
        except ApiError as e:
            if e.status != 409:
                raise


def namespace(name: str) -> dict[str, Any]:
    """A Namespace object."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineLaunch:
    """What starts the controllers: the harness's process starter and its API server."""

    run_dir: Path
    api_port: int
    kubeconfig: Path
    start: Callable[[str, list[str], Mapping[str, str]], Process]


def in_own_network(
    launch: EngineLaunch, socket: Path, argv: list[str], serve: Iterable[str] = ()
) -> list[str]:
    """`argv` run in a network namespace of its own that reaches the API server only (and is
    reached, through each `serve` of netns.py's `--serve SOCKET=PORT`)."""
    return [
        "unshare",
        "--net",
        "--",
        sys.executable,
        "-m",
        "tests.cluster.netns",
        f"--socket={socket}",
        f"--port={launch.api_port}",
        *(f"--serve={each}" for each in serve),
        "--",
        *argv,
    ]


def start_controllers(
    launch: EngineLaunch, paths: Mapping[str, Path], images: EngineImages, webhook: LoopbackToUnix
) -> UnixToLoopback:
    """Start both controllers and Tekton's webhook (whose socket `webhook` leads to); return
    the relay they reach the API server through."""
    relay = UnixToLoopback(launch.run_dir / "engines-api.sock", launch.api_port).start()
    kubeconfig = str(launch.kubeconfig)
    wrapper_env = {"PYTHONPATH": str(REPO)}  # the wrapper is tests.cluster.netns
    launch.start(
        ARGO_CONTROLLER,
        in_own_network(
            launch,
            relay.path,
            [
                str(paths["workflow-controller"]),
                f"--kubeconfig={kubeconfig}",
                f"--namespace={ARGO_NAMESPACE}",
                f"--configmap={ARGO_CONFIGMAP}",
                f"--executor-image={images.argoexec}",
                "--executor-image-pull-policy=Never",
                "--workflow-workers=4",
                "--loglevel=info",
            ],
        ),
        {**wrapper_env, "LEADER_ELECTION_DISABLE": "true", "ARGO_NAMESPACE": ARGO_NAMESPACE},
    )
    launch.start(
        TEKTON_CONTROLLER,
        in_own_network(
            launch,
            relay.path,
            [
                str(paths["tekton-controller"]),
                f"--kubeconfig={kubeconfig}",
                "-disable-ha",
                f"-entrypoint-image={images.tekton_tools}",
                f"-nop-image={images.tekton_tools}",
                f"-sidecarlogresults-image={images.tekton_tools}",
                f"-workingdirinit-image={images.tekton_tools}",
                f"-shell-image={images.shell}",
                "-shell-image-win=not-on-this-node",
            ],
        ),
        {**wrapper_env, **TEKTON_ENV, "KUBECONFIG": kubeconfig},
    )
    launch.start(
        TEKTON_WEBHOOK,
        in_own_network(
            launch,
            relay.path,
            [str(paths["tekton-webhook"]), f"--kubeconfig={kubeconfig}", "-disable-ha"],
            serve=[f"{webhook.socket}={TEKTON_WEBHOOK_PORT}"],
        ),
        {**wrapper_env, **TEKTON_WEBHOOK_ENV, "KUBECONFIG": kubeconfig},
    )
    return relay


def answers_inside(pid: int, url: str) -> bool | None:
    """True once `url` answers 200 in the network namespace of process `pid`, else None."""
    probe = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)"
    done = subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", "--", sys.executable, "-c", probe, url],
        capture_output=True,
        check=False,
        timeout=30,
    )
    return done.returncode == 0 or None


def engine_source(name: str) -> Path:
    """The module source of a pinned engine (for its configuration files)."""
    (component,) = [c for c in binaries.components(engines=True) if c.name == name]
    return binaries.module_dir(component.module, component.version)
