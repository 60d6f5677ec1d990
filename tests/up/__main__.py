"""`python -m tests.up [--dir DIR]`: run the local control plane until Ctrl-C or SIGTERM.

Builds missing binaries, starts etcd, kube-apiserver, kube-controller-manager and the JobSet,
Kueue and Trainer controllers on 127.0.0.1 (as upstream's ServiceAccounts, in the namespaces of
`--layout`: tests/cluster/identities.py), then prints the admin kubeconfig path on stdout
(nothing else goes there; progress and errors go to stderr). It composes the harness
(`tests/cluster`) with what the suites share (`tests/support`: the node runtime, the shipped
controller), so it lives above both, as the demo does:

    python -m tests.up > /tmp/kubeconfig-path &
    # once the file has a line:
    export KUBECONFIG="$(cat /tmp/kubeconfig-path)"
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType

from kubernetes import client, config

from tests.cluster import engine, identities
from tests.cluster.harness import ControlPlane, ControlPlaneError
from tests.support import node_controller
from tests.support.executions import NODE_RUNTIME, TRAINER, api_port, node_runtime
from tests.support.shipped import default_image

# How often the idle loop checks that every component is still running.
WATCH_SECONDS = 2.0


def _say(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    """SIGINT and SIGTERM: unwind, stopping every component on the way out.

    Further signals are ignored from here on: one that came during the stop would cut short
    the node's clean-up (its mounts, cgroups and sysctls).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _install_node_runtime(plane: ControlPlane) -> None:
    """The shipped torch runtime shaped for the node, so a TrainJob of one's own runs there."""
    group, version = TRAINER
    plane.rest.post(f"/apis/{group}/{version}/clustertrainingruntimes", node_runtime())
    _say(
        f"ClusterTrainingRuntime {NODE_RUNTIME} runs pods on the node (host network, its "
        "toleration); its training image: local/busybox:static (docs/development.md: The node)"
    )


def _step_image_on_node(plane: ControlPlane) -> str:
    """The step image, built with images/build.sh and imported into the node."""

    tag = engine.build_step_image()
    assert plane.node is not None
    plane.node.import_images([tag])
    _say(f"step image {tag} built with images/build.sh and imported into the node")
    return tag


def _start_engines(plane: ControlPlane, image: str) -> None:
    """Argo's and Tekton's controllers (their pods run the step image)."""
    seconds = plane.start_engines()
    _say(f"Argo Workflows and Tekton controllers ready in {seconds:.1f}s; step image {image}")


def _install_controller(plane: ControlPlane, image: str) -> None:
    """pipelines/controller/ on the node: two replicas of the admission controller, of `image`
    (the one the Deployment names)."""
    assert image == default_image(), f"the Deployment runs {default_image()}, not {image}"
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(plane.kubeconfig), client_configuration=configuration
    )
    listeners = [node_controller.Listeners.free() for _ in range(2)]
    with client.ApiClient(configuration) as api:
        namespace = node_controller.install(
            api, api_port=api_port(plane.kubeconfig), listeners=listeners
        )
    served = ", ".join(
        f"/healthz, /readyz on 127.0.0.1:{ports.probes}, /metrics over TLS on "
        f"127.0.0.1:{ports.metrics}"
        for ports in listeners
    )
    _say(
        f"dispatch-admission-controller: two replicas in namespace {namespace} (one Deployment "
        f"each; {served}); docs/kueue.md: The admission controller"
    )


def up(
    run_dir: Path | None,
    *,
    node: bool = True,
    engines: bool = False,
    controller: bool = False,
    layout: identities.Layout = identities.DEFAULT_LAYOUT,
) -> int:
    """Start the control plane, print the kubeconfig path, keep running until told to stop."""
    directory = run_dir or Path(tempfile.mkdtemp(prefix="dispatch-k8s-control-plane-"))
    # Explicitly for SIGINT too: a shell starts background jobs with SIGINT ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    plane = ControlPlane(directory, progress=_say, node=node, layout=layout)
    # The node imports its images through a Docker engine, which the plane starts if none
    # answers: one started for this run is stopped with it.
    engine_started = node and not engine.engine_ready()
    _say(f"starting the control plane in {directory} (logs in {directory / 'logs'})")
    idle = threading.Event()  # never set: waiting on it is an interruptible sleep
    try:
        plane.start()
        if node:
            _install_node_runtime(plane)
        image = _step_image_on_node(plane) if engines or controller else ""
        if engines:
            _start_engines(plane, image)
        if controller:
            _install_controller(plane, image)
        users = ", ".join(f"{key} {user}" for key, user in plane.controller_users.items())
        _say(f"layout {layout}; the controllers act as: {users}")
        _say(f"ready in {plane.started_seconds:.1f}s; apiserver {plane.server}; Ctrl-C stops it")
        sys.stdout.write(f"{plane.kubeconfig}\n")
        sys.stdout.flush()
        while not idle.wait(WATCH_SECONDS):
            plane.check_running()
    except KeyboardInterrupt:
        _say("stopping")
        return 0
    except ControlPlaneError as e:
        _say(f"control plane failed: {e}")
        if plane.started_seconds is not None:  # start() already reported the logs otherwise
            _say(plane.log_tails())
        return 1
    finally:
        plane.stop()
        if engine_started:
            engine.stop_ours()
    return 0


def main(argv: list[str]) -> int:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.up", description="start the local cluster and keep it running"
    )
    parser.add_argument("--dir", type=Path, default=None, help="run directory (default: a new one)")
    parser.add_argument(
        "--no-node",
        action="store_true",
        help="without the node (kube-scheduler, containerd, kubelet): pods are never run",
    )
    parser.add_argument(
        "--engines",
        action="store_true",
        help="with the Argo Workflows and Tekton controllers, and the step image on the node",
    )
    parser.add_argument(
        "--controller",
        action="store_true",
        help="with two replicas of the admission controller (pipelines/controller/) on the node",
    )
    parser.add_argument(
        "--layout",
        choices=identities.LAYOUTS,
        default=identities.DEFAULT_LAYOUT,
        help="where JobSet, Kueue and Trainer run: each project's own release (releases: "
        "jobset-system, kueue-system, kubeflow-system), or Trainer's manifests/overlays/manager "
        "(trainer-overlay: JobSet in kubeflow-system too)",
    )
    args = parser.parse_args(argv)
    if (args.engines or args.controller) and args.no_node:
        parser.error("--engines and --controller need the node: their pods run there")
    return up(
        args.dir,
        node=not args.no_node,
        engines=args.engines,
        controller=args.controller,
        layout=args.layout,
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
