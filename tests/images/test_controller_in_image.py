"""The admission controller in the step image, run as its shipped Deployment's pod says: the
image's user, a read-only root filesystem and no writable volume, every capability dropped, no
privilege escalation; the shipped command and args, only the listen addresses on loopback; the
shipped ServiceAccount's token mounted where the kubelet mounts it."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes import client

from tests.cluster.engines import loopback_api_env
from tests.cluster.wait import wait_until
from tests.images.containers import Mount, as_the_pod
from tests.support.cluster_under_test import Cluster
from tests.support.controller_identity import SERVICE_ACCOUNT
from tests.support.executions import api_port
from tests.support.node_controller import Listeners, on_loopback, shipped_deployment
from tests.support.replicas import secure_get
from tests.support.step_identity import StepIdentity, cluster_ca, service_account_token

pytestmark = pytest.mark.images
POD_NAME: Final = "dispatch-admission-controller-in-image"
STARTUP: Final = 60.0
SERVICE_ACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"


def kubelet_env(container: Mapping[str, Any], namespace: str) -> dict[str, str]:
    """The container's env as the kubelet gives it, each fieldRef resolved for one pod."""
    fields = {"metadata.name": POD_NAME, "metadata.namespace": namespace}
    return {
        var["name"]: var["value"]
        if "value" in var
        else fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
        for var in container["env"]
    }


@pytest.fixture
def service_account_mount(
    controller_identity: StepIdentity,
    api_client: client.ApiClient,
    namespace: str,
    control_plane: Cluster,
    tmp_path: Path,
) -> Mount:
    """What the kubelet mounts for the shipped ServiceAccount (token, CA, namespace), readable
    by the image's user: the container finds the API server as a pod does, with no kubeconfig."""
    mounted = tmp_path / "serviceaccount"
    mounted.mkdir()
    files = {
        "token": service_account_token(api_client, namespace, SERVICE_ACCOUNT).encode(),
        "ca.crt": cluster_ca(control_plane.kubeconfig),
        "namespace": namespace.encode(),
    }
    for name, content in files.items():
        (mounted / name).write_bytes(content)
        (mounted / name).chmod(0o644)
    return Mount(host=mounted, container=SERVICE_ACCOUNT_DIR)


def test_the_shipped_controller_serves_metrics_over_tls_on_a_read_only_root(
    step_image: str, service_account_mount: Mount, control_plane: Cluster, namespace: str
) -> None:
    pod = shipped_deployment()["spec"]["template"]["spec"]
    (shipped,) = pod["containers"]
    assert shipped["image"] == step_image, "the image the Deployment names"
    listeners = Listeners.free()
    api = loopback_api_env(api_port(control_plane.kubeconfig))
    env = {**kubelet_env(shipped, namespace), **{var["name"]: var["value"] for var in api}}
    command = [*shipped["command"], *on_loopback(shipped["args"], listeners)]
    made = as_the_pod(step_image, pod, command, env=env, mounts=[service_account_mount])
    made.start()
    try:
        wrapped = made.get_wrapped_container()

        def scraped() -> int | None:
            wrapped.reload()
            if wrapped.status != "running":
                _, stderr = made.get_logs()
                code = wrapped.attrs["State"]["ExitCode"]
                raise AssertionError(f"the controller exited {code}: {stderr.decode()[-2000:]}")
            try:
                return secure_get(listeners.metrics, "/metrics", None)[0]
            except OSError:  # not listening yet
                return None

        status = wait_until(scraped, what="/metrics over TLS", timeout=STARTUP)
        assert status == 401, "a scrape without a token is not authenticated"
        probes = f"http://127.0.0.1:{listeners.probes}"
        with urllib.request.urlopen(f"{probes}/healthz", timeout=5) as answer:
            assert answer.status == 200
    finally:
        made.stop()
