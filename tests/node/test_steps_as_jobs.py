"""The step image as a Kubernetes Job on the real node, as the shipped ServiceAccount with the
shipped RBAC: the step pod reaches the API server on 127.0.0.1 only, raises A, and the
training pod it opens prints R = 1."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes import client

from tests.cluster.node import TOLERATION
from tests.conftest import Cluster
from tests.integration.conftest import Step
from tests.integration.lifecycle import as_dict
from tests.node.executions import DEADLINE, expected, printed, start_flags
from tests.pipelines import kube
from tests.pipelines.identity import SERVICE_ACCOUNT, StepIdentity
from tests.pipelines.render import JOBS
from tests.shipped import documents
from tests.wait import wait_until

pytestmark = [pytest.mark.node, pytest.mark.cluster, pytest.mark.images]
API_ACCESS: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
ROOT_CA: Final = "kube-root-ca.crt"


def _api_server(kubeconfig: Path) -> tuple[str, int, str]:
    """The API server's loopback host and port, and its CA, from the admin kubeconfig."""
    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    url = urlsplit(cluster["server"])
    assert url.hostname == "127.0.0.1", "the pods must reach the API server on loopback"
    assert url.port is not None
    if "certificate-authority-data" in cluster:
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    else:
        ca = Path(cluster["certificate-authority"]).read_text()
    return url.hostname, url.port, ca


def on_the_node(job: dict[str, Any], *, host: str, port: int) -> dict[str, Any]:
    """The shipped Job as it runs on this node. The local control plane runs without the
    ServiceAccount admission plugin, so this adds what the plugin adds (the projected token,
    CA and namespace); and with no Service network, the host network and the API server's
    loopback address in the env in-cluster clients read."""
    job = copy.deepcopy(job)
    pod = job["spec"]["template"]["spec"]
    pod["hostNetwork"] = True
    pod["tolerations"] = [TOLERATION]
    pod["volumes"].append(
        {
            "name": "kube-api-access",
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                    {
                        "configMap": {
                            "name": ROOT_CA,
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {"fieldPath": "metadata.namespace"},
                                }
                            ]
                        }
                    },
                ]
            },
        }
    )
    (container,) = pod["containers"]
    container["volumeMounts"].append(
        {"name": "kube-api-access", "mountPath": API_ACCESS, "readOnly": True}
    )
    container["env"] += [
        {"name": "KUBERNETES_SERVICE_HOST", "value": host},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(port)},
    ]
    return job


def test_the_shipped_unsuspend_job_opens_a_trainjob_that_prints_r_1(
    step: Step,
    namespace: str,
    real_node_runtime: str,
    step_image_on_node: str,
    steps_identity: StepIdentity,
    control_plane: Cluster,
    api_client: client.ApiClient,
) -> None:
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    host, port, ca = _api_server(control_plane.kubeconfig)
    root_ca = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ROOT_CA}}
    kube.apply(api_client, {**root_ca, "data": {"ca.crt": ca}}, namespace=namespace)
    started = step("start", *start_flags(namespace, real_node_runtime))
    assert started.code == 0, started.error
    name = started.result["name"]

    (shipped,) = documents(JOBS / "unsuspend.yaml")
    job = on_the_node(shipped, host=host, port=port)
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    (container,) = pod["containers"]
    assert container["image"] == step_image_on_node
    next(e for e in container["env"] if e["name"] == "DISPATCH_NAME")["value"] = name
    job_name = kube.apply(api_client, job, namespace=namespace)["metadata"]["name"]

    def finished() -> dict[str, Any] | None:
        status = as_dict(batch.read_namespaced_job(job_name, namespace)).get("status") or {}
        return status if status.get("succeeded") or status.get("failed") else None

    done = wait_until(finished, what=f"Job {job_name} to finish", timeout=DEADLINE)
    listed = as_dict(core.list_namespaced_pod(namespace, label_selector=f"job-name={job_name}"))
    (step_pod,) = listed["items"]
    log = str(core.read_namespaced_pod_log(step_pod["metadata"]["name"], namespace))
    assert done.get("succeeded") == 1, log
    assert "Traceback" not in log
    result = next(json.loads(line) for line in log.splitlines() if '"admission"' in line)
    assert result["admission"] == 1
    first = printed(core, namespace, name, restart=0, admission=1)
    assert (first.epoch, first.attempt) == expected(1, 0)
