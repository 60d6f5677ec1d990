"""A real node for the local control plane: kube-scheduler, containerd and a kubelet.

Everything stays on loopback and under the run directory (docs/development.md):
- containerd is Debian's 1.6 (the `containerd` package the Docker engine already brings): it
  answers the kubelet through the CRI v1 API, and kubelet 1.36 falls back to its own cgroup
  driver when containerd cannot tell it one. Its root, state, socket and opt dir are the run
  directory's, never the system's.
- The CNI configuration has the `loopback` plugin only, so every pod that runs here uses
  `hostNetwork: true`; the kubelet never touches iptables and resolves names through a
  resolv.conf naming 127.0.0.1 alone.
- The node is called `localhost`, and the API server prefers the Hostname address, so it
  reaches the kubelet (logs, exec) on 127.0.0.1 only.
- The kubelet changes three sysctls at start; they are restored when the node stops, and every
  container, mount and cgroup the node made is removed.
- Images are made locally (no registry): a static pause image compiled from the Kubernetes
  source, and the images `tests/cluster/engine.py` builds, imported with `ctr images import`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from tests.cluster.process import LOOPBACK, Process
from tests.cluster.wait import wait_until

NODE_NAME: Final = "localhost"  # resolves to 127.0.0.1: the API server reaches the kubelet there
PAUSE_IMAGE: Final = "local/pause:3.10"
# Only pods that tolerate this run on the real node; the rest stay unscheduled, as before, for
# the tests that play the kubelet by writing pods/status.
TAINT_KEY: Final = "dispatch-k8s.test/real-node"
TOLERATION: Final = {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
SYSCTLS: Final = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
PROC_SYS: Final = Path("/proc/sys")
SYSCTL_RECORD: Final = Path("/run/dispatch-k8s/sysctls.json")
CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
CNI_PLUGINS: Final = Path("/usr/lib/cni")
CLEAN_TIMEOUT: Final = 10.0  # seconds to see the node's last processes gone
DEBIAN_PACKAGES: Final = ("containerd", "runc", "containernetworking-plugins")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodePorts:
    """Loopback ports of the node's components."""

    kubelet: int
    kubelet_health: int
    scheduler: int


class Node:
    """The node's files, processes and clean-up, for one control plane's run directory."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir / "node"
        self.containerd_dir = self.dir / "containerd"
        # This node's own cgroup parent and pod log directory: another node on the machine
        # (a second test run) must neither see this node's pods as orphans nor clean them up.
        self.cgroup_root = f"/dispatch-k8s-{secrets.token_hex(4)}"
        self.pod_logs = self.dir / "pod-logs"
        self.socket = self.containerd_dir / "containerd.sock"

    # --- files --------------------------------------------------------------------------

    def write_containerd_config(self) -> Path:
        """containerd's config: its own directories, CRI on loopback, lo-only CNI."""
        cni_conf = self.dir / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-lo-only.conflist").write_text(
            json.dumps(
                {"cniVersion": "1.0.0", "name": "lo-only", "plugins": [{"type": "loopback"}]}
            )
        )
        root, state = self.containerd_dir / "root", self.containerd_dir / "state"
        config = f"""version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.containerd_dir / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  # The VM withholds CAP_SYS_RESOURCE: runc cannot lower oom_score_adj (docs/development.md).
  restrict_oom_score_adj = true
  sandbox_image = "docker.io/{PAUSE_IMAGE}"
  stream_server_address = "{LOOPBACK}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_PLUGINS}"
    conf_dir = "{cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = false
"""
        path = self.containerd_dir / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config)
        return path

    def write_kubelet_config(self, ports: NodePorts, client_ca: Path) -> Path:
        """The KubeletConfiguration: loopback only, no iptables, cgroup v1 allowed."""
        resolv = self.dir / "resolv.conf"
        resolv.write_text(f"nameserver {LOOPBACK}\n")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,  # the VM mounts cgroup v1 controllers
            "cgroupDriver": "cgroupfs",
            "address": LOOPBACK,
            "port": ports.kubelet,
            "healthzBindAddress": LOOPBACK,
            "healthzPort": ports.kubelet_health,
            "readOnlyPort": 0,
            "makeIPTablesUtilChains": False,
            "cgroupRoot": self.cgroup_root,
            "podLogsDir": str(self.pod_logs),
            "resolvConf": str(resolv),
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "memory.available": "100Mi",
            },
            "authentication": {
                "x509": {"clientCAFile": str(client_ca)},
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
            },
            # Tests only: the API server is the kubelet's one client, on loopback.
            "authorization": {"mode": "AlwaysAllow"},
            "serializeImagePulls": False,
            "registerNode": True,
        }
        path = self.dir / "kubelet-config.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    # --- sysctls, images ----------------------------------------------------------------

    def save_sysctls(self) -> None:
        """Remember the values the kubelet will change, machine-wide: a node that starts
        while another runs finds them changed already, so the first node's record of the
        host's own values is kept until the last node stops."""
        with _sysctl_record() as record:
            if not record["originals"]:  # kept from a crashed run: the host's own values
                record["originals"] = {
                    name: (PROC_SYS / name).read_text().strip() for name in SYSCTLS
                }
            record["holders"].append(self._holder)

    def restore_sysctls(self) -> None:
        """Put back what the kubelets changed, once no other node runs on the machine."""
        with _sysctl_record() as record:
            if self._holder in record["holders"]:
                record["holders"].remove(self._holder)
            if record["holders"]:
                return
            for name, value in record["originals"].items():
                with contextlib.suppress(OSError):
                    (PROC_SYS / name).write_text(value)
            record["originals"] = {}

    @property
    def _holder(self) -> dict[str, object]:
        return {"pid": os.getpid(), "dir": str(self.dir)}

    def ctr(self, *args: str, stdin: Path | None = None) -> str:
        """Run `ctr` against this node's containerd, in the CRI namespace."""
        with open(stdin, "rb") if stdin else contextlib.nullcontext() as source:
            done = subprocess.run(
                ["ctr", "--address", str(self.socket), "-n", "k8s.io", *args],
                stdin=source,
                capture_output=True,
                check=True,
            )
        return done.stdout.decode()

    def import_images(self, tags: list[str]) -> None:
        """Save each locally built image from the Docker engine and import it."""
        with tempfile.TemporaryDirectory(dir=self.dir) as work:
            for tag in tags:
                archive = Path(work) / "image.tar"
                subprocess.run(["docker", "save", "-o", str(archive), tag], check=True)
                self.ctr("images", "import", "--no-unpack", "-", stdin=archive)

    # --- clean-up -----------------------------------------------------------------------

    def remove_containers(self) -> None:
        """Kill every task this containerd runs and the shims that keep them."""
        with contextlib.suppress(subprocess.CalledProcessError, FileNotFoundError, OSError):
            for task in self.ctr("tasks", "list", "-q").split():
                with contextlib.suppress(subprocess.CalledProcessError):
                    self.ctr("tasks", "kill", "-s", "SIGKILL", task)
        for pid in _processes_mentioning(str(self.containerd_dir)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def remove_mounts(self) -> None:
        """Unmount everything mounted below the node's directory, deepest first."""
        for mount in sorted(_mounts_below(self.dir), key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)

    def remove_cgroups(self) -> None:
        """Kill what still runs in this node's cgroups, then remove them, deepest first.

        A container outlives its shim, so stopping containerd alone leaves it running.
        """
        name = self.cgroup_root.strip("/")
        tops = [h / name for h in _hierarchies() if (h / name).is_dir()]

        def emptied() -> bool | None:
            left = _pids_in(tops)
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return not left or None

        with contextlib.suppress(AssertionError):  # what still runs is left; rmdir says so
            wait_until(emptied, what="the node's containers to end", timeout=CLEAN_TIMEOUT)
        for top in tops:
            for directory in sorted(_directories(top), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    directory.rmdir()

    def make_cgroup_root(self) -> None:
        """The node's cgroup parent in every hierarchy (the kubelet needs it to exist)."""
        for hierarchy in _hierarchies():
            if hierarchy.is_dir() and (hierarchy / "cgroup.procs").exists():
                (hierarchy / self.cgroup_root.strip("/")).mkdir(exist_ok=True)

    def clean(self) -> None:
        """Leave the host as it was: no containers, mounts, cgroups; sysctls back."""
        self.remove_containers()
        self.remove_mounts()
        self.remove_cgroups()
        self.restore_sysctls()
        shutil.rmtree(self.containerd_dir / "state", ignore_errors=True)


@contextlib.contextmanager
def _sysctl_record() -> Iterator[dict[str, Any]]:
    """The machine-wide record of the host's sysctl values and the nodes that changed them,
    under an exclusive lock; holders whose process is gone are dropped."""
    SYSCTL_RECORD.parent.mkdir(parents=True, exist_ok=True)
    with (SYSCTL_RECORD.parent / "sysctls.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            record = json.loads(SYSCTL_RECORD.read_text())
        except (OSError, ValueError):
            record = {"originals": {}, "holders": []}
        record["holders"] = [h for h in record["holders"] if _alive(int(h["pid"]))]
        yield record
        if record["originals"]:
            SYSCTL_RECORD.write_text(json.dumps(record))
        else:
            SYSCTL_RECORD.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pause_source() -> Path:
    """build/pause/linux/pause.c of the pinned Kubernetes, from the Go module cache."""
    from tests.cluster import binaries  # the pinned version and the module cache

    kubernetes = next(c for c in binaries.components() if c.module == "k8s.io/kubernetes")
    return binaries.module_dir(kubernetes.module, kubernetes.version) / "build/pause/linux/pause.c"


def _hierarchies() -> list[Path]:
    return [path for path in CGROUP_ROOT.iterdir()] if CGROUP_ROOT.exists() else []


def _pids_in(tops: list[Path]) -> set[int]:
    pids: set[int] = set()
    for top in tops:
        for directory in _directories(top):
            with contextlib.suppress(OSError):
                pids |= {int(p) for p in (directory / "cgroup.procs").read_text().split()}
    return pids


def _processes_mentioning(text: str) -> Iterator[int]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    yield int(entry.name)


def _mounts_below(directory: Path) -> list[str]:
    prefix = str(directory.resolve())
    mounts = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = line.split()[1].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            mounts.append(point)
    return mounts


def _directories(top: Path) -> Iterator[Path]:
    yield top
    for path, names, _ in os.walk(top):
        for name in names:
            yield Path(path) / name


def processes(
    node: Node,
    *,
    binaries: dict[str, Path],
    ports: NodePorts,
    kubeconfigs: dict[str, Path],
    client_ca: Path,
    start: Callable[[str, list[str]], Process],
) -> None:
    """Start kube-scheduler, containerd and the kubelet through `start` (the harness's)."""
    scheduler = kubeconfigs["kube-scheduler"]
    start(
        "kube-scheduler",
        [
            str(binaries["kube-scheduler"]),
            f"--kubeconfig={scheduler}",
            f"--authentication-kubeconfig={scheduler}",
            f"--authorization-kubeconfig={scheduler}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={ports.scheduler}",
            "--leader-elect=false",
        ],
    )
    start("containerd", ["containerd", f"--config={node.write_containerd_config()}"])
    node.make_cgroup_root()
    start(
        "kubelet",
        [
            str(binaries["kubelet"]),
            f"--config={node.write_kubelet_config(ports, client_ca)}",
            f"--kubeconfig={kubeconfigs['kubelet']}",
            f"--container-runtime-endpoint=unix://{node.socket}",
            f"--root-dir={node.dir / 'kubelet'}",
            f"--hostname-override={NODE_NAME}",
            f"--cert-dir={node.dir / 'kubelet-pki'}",
            f"--register-with-taints={TAINT_KEY}=true:NoSchedule",
        ],
    )
