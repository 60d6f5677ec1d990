"""dispatch-doctor run as a platform engineer runs it, against a cluster's admin kubeconfig."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

from kubernetes import client

from dispatch_k8s.core.rules import doctor
from tests.cluster import kube
from tests.support.environment import host_env
from tests.support.kubectl import run_kubectl
from tests.support.lifecycle import BIN


def diagnosed(
    kubeconfig: Path, namespace: str, *options: str
) -> tuple[int, dict[str, dict[str, str]]]:
    """The exit code and each check's row, by name, of dispatch-doctor -o json `options` (a
    check of which there are several, one per controller Deployment found, under its name the
    last)."""
    done = subprocess.run(
        [
            str(BIN / "dispatch-doctor"),
            *("--kubeconfig", str(kubeconfig), "-n", namespace, "-o", "json", *options),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=host_env(),
    )
    assert done.returncode in (0, doctor.CHECK_FAILED), done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    return done.returncode, {row["check"]: row for row in rows}


def finds_the_install(
    api: client.ApiClient, kubeconfig: Path, namespace: str, *, prefix: str = ""
) -> None:
    """dispatch-doctor finds an install moved to `namespace`, its names with `prefix` (a user's
    overlay, or the chart's release namespace): its policies, the path guard's parameters, its
    AdmissionCheck and the controller's Deployment there, not missing from dispatch-system. A
    JobSet Deployment in `namespace` (replicas 0), as an identity the guard does not trust,
    fails with the patch of that ConfigMap, and the patch works."""
    controller = f"{prefix}{doctor.CONTROLLER}"
    parameters = f"{prefix}{doctor.CONTROLLERS_CONFIG_MAP}"
    jobset = jobset_deployment(namespace)
    kube.apply(api, jobset, namespace=namespace)
    try:
        _, rows = diagnosed(kubeconfig, namespace)
        # Every policy the guard-only choice installs is found under its name (the chart's
        # guard-only choice leaves raise-on-open out, which the row rightly names).
        policies = rows["policies"]["found"]
        assert not [p for p in doctor.VALIDATING_POLICIES if p in policies], policies
        row = rows["controller"]  # no node: none of its replicas is ready
        assert row["found"].startswith(f"{namespace}/{controller}: 0 of "), row
        assert row["fix"] == f"kubectl -n {namespace} logs deployment/{controller}", row
        row = rows["admission-check"]  # nothing keeps it Active: the controller is not ready
        assert row["found"].startswith(f"AdmissionCheck {prefix}dispatch-admission is not "), row
        assert row["fix"].startswith(f"kubectl -n {namespace} get deployment {controller} "), row
        row = rows["identity/jobset"]
        assert f"{namespace}/{parameters} does not list under jobset" in row["found"], row
        words = shlex.split(row["fix"])
        assert words[:6] == ["kubectl", "-n", namespace, "patch", "configmap", parameters], row
        run_kubectl(*words[1:], kubeconfig=kubeconfig)
        _, fixed = diagnosed(kubeconfig, namespace)
        assert fixed["identity/jobset"]["status"] == "pass", fixed["identity/jobset"]
    finally:
        kube.delete(api, jobset, namespace=namespace)


def jobset_deployment(namespace: str) -> dict[str, Any]:
    """JobSet's Deployment as an install in `namespace` has it, run as a ServiceAccount the
    path guard does not trust: replicas 0, so nothing runs; what the doctor reads is the
    install's objects."""
    labels = {"app": "jobset-doctor"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "jobset-controller-manager", "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": "jobset-controller-manager",
                    "containers": [{"name": "manager", "image": "jobset:v0.12.0"}],
                },
            },
        },
    }
