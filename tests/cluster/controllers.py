"""Configuration files of the JobSet, Kueue and Trainer controller managers, run out of cluster.

Each manager gets its own ports, its own directory and these deliberate departures from its
upstream deployment (each project's own deployment):

- internal certificate management off: its rotator would issue certificates for
  `<svc>.<ns>.svc` and overwrite the caBundle the harness registered;
- webhooks served on 127.0.0.1 with a certificate from the harness CA, health probes on
  127.0.0.1, metrics off, leader election off;
- Kueue: only the TrainJob integration, jobs without a queue name left alone, and its visibility
  API server off (it would listen on 0.0.0.0:8082 and needs an APIService nobody registers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

# The frameworks Kueue manages here; a job without `kueue.x-k8s.io/queue-name` is not managed.
KUEUE_FRAMEWORKS: Final = ("trainer.kubeflow.org/trainjob",)
# Kueue v0.19.2 loads its metrics serving certificate from this fixed path whenever internal
# certificate management is off (cmd/kueue/main.go), even with metrics disabled.
KUEUE_METRICS_CERT_DIR: Final = Path("/etc/kueue/metrics/certs")
METRICS_OFF: Final = "0"  # controller-runtime: "0" disables the metrics server


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerPorts:
    """The loopback ports one controller manager listens on."""

    webhook: int
    health: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerSpec:
    """How to run one controller manager."""

    name: str  # the versions.toml component, also the log and directory name
    binary: str  # the binary name in the build cache
    config: dict[str, Any]
    cert_dir: Path  # where the webhook server reads tls.crt / tls.key

    def write_config(self, path: Path) -> None:
        """Write the configuration (JSON is YAML, which all three managers read)."""
        path.write_text(json.dumps(self.config, indent=2) + "\n")


def _controller_manager(ports: ControllerPorts) -> dict[str, Any]:
    return {
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
        "metrics": {"bindAddress": METRICS_OFF},
        "leaderElection": {"leaderElect": False},
    }


def jobset(ports: ControllerPorts, workdir: Path) -> ControllerSpec:
    """JobSet v0.12: `config.jobset.x-k8s.io/v1alpha1` Configuration."""
    cert_dir = workdir / "serving-certs"
    return ControllerSpec(
        name="jobset",
        binary="jobset-controller",
        cert_dir=cert_dir,
        config={
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            **_controller_manager(ports),
            "webhook": {"port": ports.webhook, "host": "127.0.0.1", "certDir": str(cert_dir)},
            "internalCertManagement": {"enable": False},
        },
    )


def kueue(ports: ControllerPorts, workdir: Path) -> ControllerSpec:
    """Kueue v0.19: `config.kueue.x-k8s.io/v1beta2` Configuration."""
    cert_dir = workdir / "serving-certs"
    return ControllerSpec(
        name="kueue",
        binary="kueue",
        cert_dir=cert_dir,
        config={
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            **_controller_manager(ports),
            "webhook": {"port": ports.webhook, "host": "127.0.0.1", "certDir": str(cert_dir)},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
            "featureGates": {"VisibilityOnDemand": False},
        },
    )


def trainer(ports: ControllerPorts, workdir: Path) -> ControllerSpec:
    """Trainer v2.2: `config.trainer.kubeflow.org/v1alpha1` Configuration.

    Its webhook configuration has no certDir: controller-runtime's default
    `$TMPDIR/k8s-webhook-server/serving-certs` applies, so the harness sets TMPDIR per process.
    """
    return ControllerSpec(
        name="trainer",
        binary="trainer-controller-manager",
        cert_dir=workdir / "tmp" / "k8s-webhook-server" / "serving-certs",
        config={
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            **_controller_manager(ports),
            "webhook": {"port": ports.webhook, "host": "127.0.0.1"},
            "certManagement": {"enable": False},
        },
    )
