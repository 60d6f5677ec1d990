"""A real control plane on loopback: etcd, kube-apiserver, kube-controller-manager, and the real
JobSet, Kueue and Trainer controller managers with their webhooks (docs/design.md §4), each
controller as the ServiceAccount its upstream install makes, with that install's RBAC
(tests/cluster/identities.py).

envtest-style (docs/development.md), with no kubelet and no scheduler: tests play the
kubelet by patching `pods/status`. Use it as a context manager or call start()/stop():

    with ControlPlane(run_dir) as plane:
        print(plane.kubeconfig)
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import fcntl
import functools
import json
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, TypeVar

import yaml

from tests.cluster import binaries, certs, controllers, engines, identities, manifests
from tests.cluster import node as node_module
from tests.cluster.process import LOOPBACK, Process, free_ports
from tests.cluster.relay import LoopbackToUnix, Relay
from tests.cluster.rest import ApiError, RestClient
from tests.cluster.wait import wait_until

T = TypeVar("T")

# On 2 loaded cores kube-apiserver alone can take well over envtest's 20 s
# (kubernetes/kubernetes#137743 raised k/k's own wait to 60 s).
DEFAULT_TIMEOUT: Final = 180.0
SERVICE_CIDR: Final = "10.0.0.0/24"
# kube-controller-manager controllers the tests rely on: Jobs create pods, ownerReferences
# cascade (JobSet -> Job -> Pod, foreground deletion on JobSet restarts), namespaces finish
# deleting. The pod GC marks deleted pods that were never scheduled Failed: without a kubelet
# nothing else does, and a Job with podReplacementPolicy: Failed keeps its tracking finalizer on
# them (so namespaces and suspended Jobs never drain). It also deletes pods bound to a node that
# has no Node object, so a test that binds pods must create the Node first.
KCM_CONTROLLERS: Final = (
    "job-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "pod-garbage-collector-controller",
    # With the node: lifts its not-ready taint once the kubelet reports Ready.
    "node-lifecycle-controller",
    # Every namespace's `default` ServiceAccount and `kube-root-ca.crt` ConfigMap, which the
    # ServiceAccount admission plugin's token volume needs: pods on the node (the engines',
    # the steps') reach the API server with their ServiceAccount's token, as in any cluster.
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    # The shipped controller Deployment (pipelines/controller/) gets its pods.
    "deployment-controller",
    "replicaset-controller",
    # The shipped audit CronJob (pipelines/jobs/audit-cronjob.yaml) fires.
    "cronjob-controller",
)
CONTROLLER_ORDER: Final = ("kueue", "jobset", "trainer")
CLUSTER_NAME: Final = "dispatch-test"
ADMIN_USER: Final = "dispatch-admin"
ADMIN_GROUPS: Final = ("system:masters",)
# kube-controller-manager's own identity, as kubeadm gives it, in no group: the bootstrap
# policy's ClusterRole of the same name is what it may do (make its controllers' ServiceAccounts
# and their tokens in kube-system). With --use-service-account-credentials each controller acts
# as its own ServiceAccount (identities.system_users), which the path guard is told.
KCM_USER: Final = "system:kube-controller-manager"
# How long the controllers' ServiceAccount tokens last: longer than any run (`up` included).
TOKEN_SECONDS: Final = 7 * 24 * 3600
# The node's identities. Tests only: each also in system:masters, rather than the Node
# authorizer and the bootstrap roles, so the node's RBAC is not what these tests are about.
NODE_IDENTITIES: Final = {
    "kubelet": f"system:node:{node_module.NODE_NAME}",
    "kube-scheduler": identities.SCHEDULER_USER,
    "apiserver-kubelet-client": "kube-apiserver-kubelet-client",
}
# What users of this group send is written to the audit log (logs/audit.log): the tests that
# must know who wrote what, and when (a fenced leader's writes), act as such users.
AUDITED_GROUP: Final = "dispatch-test:audited"
# So are the upstream controllers' requests (their ServiceAccounts' namespaces' groups): who
# made each managed object, and every request their RBAC or the path guard refused
# (ControlPlane.refusals). Mostly lists and watches, as their informers read: a few thousand
# lines a run.


def _audit_policy(groups: list[str]) -> dict[str, Any]:
    """Audited users' requests, and those of the ServiceAccounts of `groups`."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "userGroups": [AUDITED_GROUP, *groups]},
            {"level": "None"},
        ],
    }


# The audit annotation the RBAC authorizer's answer is told in ("allow" or "forbid").
RBAC_DECISION: Final = "authorization.k8s.io/decision"
NODE_READY_TIMEOUT: Final = 180.0
WEBHOOK_UNREACHABLE: Final = "failed calling webhook"
PROBE_NAME: Final = "dispatch-harness-probe"
# Which admission policies kube-apiserver serves: every kind (v1.36's default), or as a cluster
# before 1.36 serves them (ValidatingAdmissionPolicy alone), or before 1.30 (neither). Both are
# GA and their feature gates locked on, so the only way to an older cluster's API is to turn
# the resources off (--runtime-config) and their admission plugins with them.
ServedPolicies = Literal["all", "validating", "none"]
_POLICY_RESOURCES: Final = {
    "MutatingAdmissionPolicy": ("mutatingadmissionpolicies", "mutatingadmissionpolicybindings"),
    "ValidatingAdmissionPolicy": (
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
    ),
}
_NOT_SERVED: Final[dict[ServedPolicies, tuple[str, ...]]] = {
    "all": (),
    "validating": ("MutatingAdmissionPolicy",),
    "none": ("MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"),
}


def _policy_flags(served: ServedPolicies) -> list[str]:
    """kube-apiserver's flags that leave out the policy kinds `served` does not serve."""
    off = _NOT_SERVED[served]
    if not off:
        return []
    resources = [
        f"admissionregistration.k8s.io/v1/{resource}=false"
        for kind in off
        for resource in _POLICY_RESOURCES[kind]
    ]
    return [
        f"--runtime-config={','.join(resources)}",
        f"--disable-admission-plugins={','.join(off)}",
    ]


class ControlPlaneError(RuntimeError):
    """The control plane could not start; the message carries the component logs."""


class ComponentExited(ControlPlaneError):
    """A component process exited while it should be running."""


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool | None:
    """True once `url` answers 200, else None (the shape wait_until polls for)."""
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            return int(response.status) == 200 or None
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


class ControlPlane:
    """Starts, watches and stops every component; `kubeconfig` is an admin (system:masters) one."""

    def __init__(
        self,
        run_dir: Path,
        *,
        binary_paths: Mapping[str, Path] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        progress: Callable[[str], None] | None = None,
        node: bool = False,
        layout: identities.Layout = identities.DEFAULT_LAYOUT,
        served_policies: ServedPolicies = "all",
    ) -> None:
        self.run_dir = run_dir.resolve()
        self.layout = layout
        self.served_policies = served_policies
        # Read from the modules at start (it may download them), by component.
        self.identities: dict[str, identities.Identity] = {}
        self.node = node_module.Node(self.run_dir) if node else None
        self.timeout = timeout
        self._progress = progress
        self._began = 0.0
        self._binary_paths = dict(binary_paths) if binary_paths is not None else None
        self._processes: dict[str, Process] = {}
        self._ca = certs.CertificateAuthority()
        self._pki = self.run_dir / "pki"
        self._logs = self.run_dir / "logs"
        self._api_port = 0
        self._rest: RestClient | None = None
        self._controller_ports: dict[str, controllers.ControllerPorts] = {}
        self._engines_relays: list[Relay] = []
        self._engine_started = False  # whether _start_node started the Docker engine
        # What the controllers' bindings grant (SubjectAccessReviews), asked again after a
        # restart of kube-apiserver; and each restart's span, wall clock, from its start until
        # its RBAC authorizer granted them again.
        self._granted: list[dict[str, Any]] = []
        self._authorizer_unready: list[tuple[datetime.datetime, datetime.datetime]] = []
        self.started_seconds: float | None = None  # how long start() took
        self.node_started_seconds: float | None = None  # of which the node, images included

    # --- public surface -----------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (written once kube-apiserver is ready)."""
        return self.run_dir / "kubeconfig"

    @property
    def server(self) -> str:
        """The apiserver URL: always on 127.0.0.1."""
        return f"https://{LOOPBACK}:{self._api_port}"

    @property
    def logs(self) -> dict[str, Path]:
        """Every component's log file, by component name."""
        return {name: process.log for name, process in self._processes.items()}

    def audited_kubeconfig(self, user: str, path: Path) -> Path:
        """A kubeconfig for `user` (in system:masters and AUDITED_GROUP), written to `path`:
        every request it sends is in `audit_events`."""
        pair = f"audited-{user}"
        self._ca.client(user, (*ADMIN_GROUPS, AUDITED_GROUP)).write(
            self._pki / f"{pair}.crt", self._pki / f"{pair}.key"
        )
        self._write_kubeconfig_for(user, pair, path)
        return path

    def audit_events(self, user: str) -> list[dict[str, Any]]:
        """The requests of audited `user` so far, oldest first, as the API server logged them
        (one audit.k8s.io/v1 Event per line, at their ResponseComplete stage)."""
        events = self._audit_log(json.dumps(user))
        return [event for event in events if event["user"]["username"] == user]

    @property
    def controller_users(self) -> dict[str, str]:
        """Who the controllers act as, by the path guard's key (pipelines/policies/
        controllers.yaml): JobSet, Kueue and Trainer, kube-controller-manager's, and
        kube-scheduler's."""
        upstream = {name: found.user for name, found in self.identities.items()}
        return {**upstream, **identities.system_users()}

    def refusals(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every request of an upstream controller (JobSet, Kueue, Trainer, or one of
        kube-controller-manager's) the API server refused with 403 so far, in `namespace` if
        given: by RBAC (`authorization.k8s.io/decision: forbid`), by an admission policy, or
        by a namespace being deleted."""
        groups = set(self._controller_groups())
        return [
            event
            for event in self._audit_log('"code":403')
            if groups & set(event["user"].get("groups", []))
            and event.get("responseStatus", {}).get("code") == 403
            and namespace in (None, event.get("objectRef", {}).get("namespace"))
        ]

    def refused_by_rbac(self) -> list[dict[str, Any]]:
        """The refusals that were RBAC's: a right the controllers' upstream roles lack.

        Not those a restarted kube-apiserver answered before its RBAC authorizer had read the
        roles and bindings again: it serves as soon as it listens, and until its informers
        have synced it forbids every request but system:masters' (the controllers, still
        running, retry their watches at once; the refusals end when it has read them). A
        fault test's outage, not a right missing."""
        return [
            event
            for event in self.refusals()
            if event.get("annotations", {}).get(RBAC_DECISION) == "forbid"
            and not self._while_authorizer_unready(event["requestReceivedTimestamp"])
        ]

    def _while_authorizer_unready(self, received: str) -> bool:
        at = datetime.datetime.fromisoformat(received)
        return any(began <= at <= ended for began, ended in self._authorizer_unready)

    def _audit_log(self, holding: str) -> list[dict[str, Any]]:
        """The audit log's events whose line holds `holding` (as the API server writes it:
        compact JSON). The log holds every request of the controllers, tens of megabytes in a
        whole run: only the lines that can match are decoded."""
        log = self._logs / "audit.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [json.loads(line) for line in lines if holding in line]

    def _controller_groups(self) -> list[str]:
        """The ServiceAccount groups of the upstream controllers' namespaces."""
        found = {identities.KCM_NAMESPACE} | {i.namespace for i in self.identities.values()}
        return [f"system:serviceaccounts:{namespace}" for namespace in sorted(found)]

    def start(self) -> None:
        """Start everything and wait until it is ready; on failure stop and raise with logs.

        Missing binaries are built first (a no-op when all are cached; not counted in
        `started_seconds`).
        """
        paths = self._binary_paths if self._binary_paths is not None else binaries.binaries()
        self._began = began = time.monotonic()
        try:
            self._start(paths)
        except BaseException as e:
            report = self.log_tails()
            self.stop()
            if isinstance(e, Exception):  # timeouts, exited components, refused manifests
                raise ControlPlaneError(f"{type(e).__name__}: {e}\n{report}") from e
            raise  # KeyboardInterrupt and friends: stopped, nothing to explain
        self.started_seconds = time.monotonic() - began

    def stop(self) -> None:
        """Stop every component, newest first: TERM to each process group, KILL after a grace.

        With a node, also remove what it left: containers, mounts, cgroups, changed sysctls,
        and the Docker engine if its node started it.
        """
        for process in reversed(list(self._processes.values())):
            process.stop()
        for relay in self._engines_relays:
            relay.close()
        if self.node is not None:
            self.node.clean()
        if self._engine_started:  # the engine this plane's node started, and only that one
            from tests.cluster import engine

            engine.stop_ours()
            self._engine_started = False

    def start_engines(self) -> float:
        """Start Argo Workflows' and Tekton's controllers on the running plane (once), after
        building their binaries and images if missing; return the seconds it took.

        See tests/cluster/engines.py: they run on the host in network namespaces of their
        own, and their pods on the node.
        """
        if self.node is None:
            raise ControlPlaneError("the engines' pods run on the node: start with node=True")
        began = time.monotonic()
        if engines.ARGO_CONTROLLER in self._processes:
            return 0.0
        paths = binaries.binaries(engines=True)
        images = engines.ensure_images(paths)
        self.node.import_images(images.tags())
        crds = engines.engine_crds(self.rest)
        self._wait(functools.partial(self._established, crds), what="the engines' CRDs")
        tekton = engines.engine_source("tekton")
        engines.apply_all(
            self.rest,
            [
                engines.namespace(engines.ARGO_NAMESPACE),
                engines.namespace(engines.TEKTON_NAMESPACE),
                engines.argo_configmap(self._api_port, images),
                *engines.tekton_configmaps(tekton, self._api_port),
            ],
        )
        webhook = LoopbackToUnix(self.run_dir / "tekton-webhook.sock").start()
        self._engines_relays.append(webhook)
        webhook_objects = engines.tekton_webhook_objects(tekton, webhook.port)
        engines.apply_all(self.rest, webhook_objects)
        launch = engines.EngineLaunch(
            run_dir=self.run_dir,
            api_port=self._api_port,
            kubeconfig=self.kubeconfig,
            start=lambda name, argv, env: self._process(name, argv, env=env),
        )
        self._engines_relays.append(engines.start_controllers(launch, paths, images, webhook))
        for name, url in engines.READINESS.items():
            pid = self._processes[name].pid
            assert pid is not None
            self._wait(functools.partial(engines.answers_inside, pid, url), what=f"{name} {url}")
        self._wait(
            functools.partial(engines.tekton_webhooks_configured, self.rest, webhook_objects),
            what="Tekton's webhook configurations filled in by its webhook",
        )
        return time.monotonic() - began

    @contextlib.contextmanager
    def stopped(self, component: str) -> Iterator[None]:
        """Stop one component for the block (a controller, etcd or kube-apiserver), then start
        it again and wait until it answers: an outage, for fault tests."""
        process = self._processes[component]
        process.stop()
        try:
            yield
        finally:
            began = datetime.datetime.now(datetime.UTC)
            process.start()
            if component in self._controller_ports:
                url = f"http://{LOOPBACK}:{self._controller_ports[component].health}/readyz"
                self._wait(functools.partial(_http_ok, url), what=f"{component} /readyz again")
            self._wait(self._apiserver_ready, what=f"kube-apiserver /readyz after {component}")
            if component == "kube-apiserver":
                self._wait_granted(f"RBAC granting the controllers' bindings after {component}")
                self._authorizer_unready.append((began, datetime.datetime.now(datetime.UTC)))
            self._wait_webhooks_answer()

    def check_running(self) -> None:
        """Raise ComponentExited if any started component has exited."""
        for name, process in self._processes.items():
            code = process.exit_code()
            if code is not None:
                raise ComponentExited(f"{name} exited with status {code} (log {process.log})")

    def log_tails(self, lines: int = 40) -> str:
        """The end of every component's log, for a failure report."""
        parts = []
        for name, process in self._processes.items():
            parts.append(f"----- {name} ({process.log}) -----\n{process.tail(lines)}")
        return "\n".join(parts)

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- start-up, in dependency order --------------------------------------------------

    def _start(self, paths: Mapping[str, Path]) -> None:
        if self.run_dir.exists() and any(self.run_dir.iterdir()):
            # etcd state from another run would hold CRDs and webhooks for another CA and ports.
            raise ControlPlaneError(f"{self.run_dir} is not empty: give a new run directory")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.identities = identities.identities(self.layout)
        ports = iter(free_ports(10))
        etcd_client, etcd_peer = next(ports), next(ports)
        self._api_port, kcm_port = next(ports), next(ports)
        controller_ports = self._controller_ports = {
            name: controllers.ControllerPorts(webhook=next(ports), health=next(ports))
            for name in CONTROLLER_ORDER
        }
        self._write_pki()
        self._start_etcd(paths["etcd"], etcd_client, etcd_peer)
        self._start_apiserver(paths["kube-apiserver"], etcd_client)
        self._start_controller_manager(paths["kube-controller-manager"], kcm_port)
        self._install_crds(controller_ports)
        self._install_identities()
        specs = self._start_controllers(paths, controller_ports)
        self._install_webhooks(controller_ports)
        for spec in specs:
            url = f"http://{LOOPBACK}:{controller_ports[spec.name].health}/readyz"
            self._wait(functools.partial(_http_ok, url), what=f"{spec.name} /readyz")
        self._wait_webhooks_answer()
        self._wait(lambda: self._exists("/api/v1/namespaces/default"), what="namespace default")
        if self.node is not None:
            self._start_node(self.node, paths)

    def _start_node(self, node: node_module.Node, paths: Mapping[str, Path]) -> None:
        from tests.cluster import engine  # the Docker engine makes the node's images

        began = time.monotonic()
        self._engine_started = not engine.engine_ready()
        engine.ensure_engine()
        engine.ensure_pause_image(node_module.PAUSE_IMAGE, node_module.pause_source())
        engine.ensure_busybox_image()  # the demo's training image; tests import more
        kubelet, health, scheduler = free_ports(3)
        ports = node_module.NodePorts(kubelet=kubelet, kubelet_health=health, scheduler=scheduler)
        kubeconfigs = {}
        for name in ("kubelet", "kube-scheduler"):
            kubeconfigs[name] = self.run_dir / f"{name}.kubeconfig"
            self._write_kubeconfig_for(NODE_IDENTITIES[name], name, kubeconfigs[name])
        node.save_sysctls()
        node_module.processes(
            node,
            binaries=dict(paths),
            ports=ports,
            kubeconfigs=kubeconfigs,
            client_ca=self._pki / "ca.crt",
            start=lambda name, argv: self._process(name, argv),
        )
        self._wait(lambda: node.socket.exists() or None, what="containerd socket")
        node.import_images([node_module.PAUSE_IMAGE, engine.BUSYBOX])
        self._wait(self._node_ready, what=f"node {node_module.NODE_NAME} Ready")
        self.node_started_seconds = time.monotonic() - began

    def _node_ready(self) -> bool | None:
        try:
            found = self.rest.get(f"/api/v1/nodes/{node_module.NODE_NAME}")
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        conditions = found.get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) or None

    def _wait(self, check: Callable[[], T | None], *, what: str) -> T:
        """wait_until, but give up at once if a component died."""

        def checked() -> T | None:
            self.check_running()
            return check()

        value = wait_until(checked, what=what, timeout=self.timeout)
        if self._progress:
            self._progress(f"{time.monotonic() - self._began:6.1f}s  {what}")
        return value

    def _process(
        self, name: str, argv: list[str], *, env: Mapping[str, str] | None = None
    ) -> Process:
        workdir = self.run_dir / name
        workdir.mkdir(parents=True, exist_ok=True)
        process = Process(
            name=name, argv=argv, log=self._logs / f"{name}.log", env=env or {}, cwd=workdir
        )
        self._processes[name] = process
        process.start()
        return process

    def _write_pki(self) -> None:
        self._pki.mkdir(parents=True, exist_ok=True)
        (self._pki / "ca.crt").write_bytes(self._ca.cert_pem)
        self._ca.serving("kube-apiserver").write(
            self._pki / "apiserver.crt", self._pki / "apiserver.key"
        )
        self._ca.serving("kube-controller-manager").write(
            self._pki / "kcm.crt", self._pki / "kcm.key"
        )
        self._ca.client(ADMIN_USER, ADMIN_GROUPS).write(
            self._pki / "admin.crt", self._pki / "admin.key"
        )
        self._ca.client(KCM_USER, ()).write(
            self._pki / "kcm-client.crt", self._pki / "kcm-client.key"
        )
        certs.service_account_signing_key().write(self._pki / "sa.pub", self._pki / "sa.key")
        for name, user in NODE_IDENTITIES.items():
            self._ca.client(user, ADMIN_GROUPS).write(
                self._pki / f"{name}.crt", self._pki / f"{name}.key"
            )

    def _start_etcd(self, binary: Path, client: int, peer: int) -> None:
        client_url, peer_url = f"http://{LOOPBACK}:{client}", f"http://{LOOPBACK}:{peer}"
        self._process(
            "etcd",
            [
                str(binary),
                "--name=etcd",
                f"--data-dir={self.run_dir / 'etcd' / 'data'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=etcd={peer_url}",
                "--unsafe-no-fsync=true",  # test data: durability is not worth the disk waits
                "--log-level=warn",
            ],
        )
        self._wait(functools.partial(_http_ok, f"{client_url}/health"), what="etcd /health")

    def _start_apiserver(self, binary: Path, etcd_client: int) -> None:
        pki = self._pki
        policy = self.run_dir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(_audit_policy(self._controller_groups())))
        self._process(
            "kube-apiserver",
            [
                str(binary),
                f"--etcd-servers=http://{LOOPBACK}:{etcd_client}",
                f"--secure-port={self._api_port}",
                f"--bind-address={LOOPBACK}",
                # Without it the apiserver looks for a default route and fails on hosts
                # that have none (docs/development.md).
                f"--advertise-address={LOOPBACK}",
                f"--cert-dir={self.run_dir / 'kube-apiserver' / 'certs'}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-account-issuer=https://{LOOPBACK}:{self._api_port}/",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                # The `kubernetes` Service's endpoint would be 127.0.0.1, which Endpoints
                # validation refuses (loopback); nothing in-cluster needs it.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                # The kubelet is reached on its Hostname address, localhost: never eth0's.
                "--kubelet-preferred-address-types=Hostname",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self._logs / 'audit.log'}",
                *_policy_flags(self.served_policies),
            ],
        )
        self._rest = RestClient(
            server=self.server,
            ca_file=pki / "ca.crt",
            cert_file=pki / "admin.crt",
            key_file=pki / "admin.key",
        )
        # Anonymous /readyz is 403 until RBAC bootstrap is done: ask with credentials.
        self._wait(self._apiserver_ready, what="kube-apiserver /readyz")
        self._write_kubeconfig()

    def _apiserver_ready(self) -> bool | None:
        try:
            return self.rest.get("/readyz") == "ok" or None
        except (ApiError, urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def _write_kubeconfig(self) -> None:
        self._write_kubeconfig_for(ADMIN_USER, "admin", self.kubeconfig)
        self._write_kubeconfig_for(KCM_USER, "kcm-client", self._kcm_kubeconfig)

    @property
    def _kcm_kubeconfig(self) -> Path:
        return self.run_dir / "kube-controller-manager.kubeconfig"

    def _write_kubeconfig_for(self, user: str, pair: str, path: Path) -> None:
        def data(name: str) -> str:
            return base64.b64encode((self._pki / name).read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": CLUSTER_NAME,
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": data("ca.crt"),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": data(f"{pair}.crt"),
                        "client-key-data": data(f"{pair}.key"),
                    },
                }
            ],
            "contexts": [
                {"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": user}}
            ],
            "current-context": CLUSTER_NAME,
        }
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(config, sort_keys=False))

    def _start_controller_manager(self, binary: Path, port: int) -> None:
        kubeconfig = str(self._kcm_kubeconfig)
        self._process(
            "kube-controller-manager",
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--tls-cert-file={self._pki / 'kcm.crt'}",
                f"--tls-private-key-file={self._pki / 'kcm.key'}",
                f"--cert-dir={self.run_dir / 'kube-controller-manager' / 'certs'}",
                "--leader-elect=false",
                # Each controller as its own ServiceAccount in kube-system, with the bootstrap
                # policy's role for it (system:controller:<name>), as kubeadm runs it.
                "--use-service-account-credentials=true",
                f"--controllers={','.join(KCM_CONTROLLERS)}",
                f"--root-ca-file={self._pki / 'ca.crt'}",
                "--profiling=false",
            ],
        )
        context = ssl.create_default_context(cafile=str(self._pki / "ca.crt"))
        url = f"https://{LOOPBACK}:{port}/healthz"
        self._wait(
            functools.partial(_http_ok, url, context), what="kube-controller-manager /healthz"
        )

    def _install_crds(self, ports: Mapping[str, controllers.ControllerPorts]) -> None:
        names = []
        for component in CONTROLLER_ORDER:
            for crd in manifests.crds(
                component, webhook_port=ports[component].webhook, ca_bundle=self._ca.cert_pem
            ):
                self.rest.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
                names.append(crd["metadata"]["name"])
        # The managers set up watches at start (Trainer skips JobSet support if the kind is
        # not yet served), so every CRD must be served before any of them starts.
        self._wait(
            functools.partial(self._established, names), what=f"{len(names)} CRDs Established"
        )

    def _established(self, names: list[str]) -> bool | None:
        for name in names:
            crd = self.rest.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = crd.get("status", {}).get("conditions", [])
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return None
        return True

    def _start_controllers(
        self, paths: Mapping[str, Path], ports: Mapping[str, controllers.ControllerPorts]
    ) -> list[controllers.ControllerSpec]:
        builders = {
            "jobset": controllers.jobset,
            "kueue": controllers.kueue,
            "trainer": controllers.trainer,
        }
        _ensure_kueue_metrics_cert(self._ca)
        specs = []
        for name in CONTROLLER_ORDER:
            workdir = self.run_dir / name
            spec = builders[name](ports[name], workdir)
            self._ca.serving(name).write(spec.cert_dir / "tls.crt", spec.cert_dir / "tls.key")
            config = workdir / "config.yaml"
            spec.write_config(config)
            (workdir / "tmp").mkdir(parents=True, exist_ok=True)
            kubeconfig = self.run_dir / f"{name}.kubeconfig"
            self._write_token_kubeconfig(self.identities[name], kubeconfig)
            self._process(
                name,
                [str(paths[spec.binary]), f"--config={config}"],
                env={"KUBECONFIG": str(kubeconfig), "TMPDIR": str(workdir / "tmp")},
            )
            specs.append(spec)
        return specs

    def _install_identities(self) -> None:
        """Each controller's namespace, ServiceAccount, roles and bindings, as its module has
        them; then wait until the RBAC authorizer grants what each binding says, so no
        controller starts to a refusal."""
        for namespace in sorted({i.namespace for i in self.identities.values()}):
            self.rest.post(
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
        roles: dict[tuple[str, str, str], dict[str, Any]] = {}
        bindings = []
        for found in self.identities.values():
            for document in found.objects:
                metadata = document["metadata"]
                self.rest.post(_collection(document), document)
                if document["kind"] in ("ClusterRole", "Role"):
                    key = (document["kind"], metadata.get("namespace", ""), metadata["name"])
                    roles[key] = document
                elif document["kind"] in ("ClusterRoleBinding", "RoleBinding"):
                    bindings.append(document)
        self._granted = [review for binding in bindings for review in _reviews(binding, roles)]
        self._wait_granted(f"RBAC granting the controllers' {len(bindings)} bindings")

    def _wait_granted(self, what: str) -> None:
        self._wait(lambda: all(map(self._allowed, self._granted)) or None, what=what)

    def _allowed(self, review: dict[str, Any]) -> bool:
        answer = self.rest.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        return bool(answer.get("status", {}).get("allowed"))

    def _write_token_kubeconfig(self, identity: identities.Identity, path: Path) -> None:
        """A kubeconfig holding a token of `identity`'s ServiceAccount (TokenRequest), as its
        pod would get one mounted."""
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        }
        answer = self.rest.post(
            f"/api/v1/namespaces/{identity.namespace}/serviceaccounts/{identity.account}/token",
            request,
        )
        ca = base64.b64encode((self._pki / "ca.crt").read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": CLUSTER_NAME,
                    "cluster": {"server": self.server, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": identity.user, "user": {"token": answer["status"]["token"]}}],
            "contexts": [
                {"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": identity.user}}
            ],
            "current-context": CLUSTER_NAME,
        }
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(config, sort_keys=False))

    def _install_webhooks(self, ports: Mapping[str, controllers.ControllerPorts]) -> None:
        paths = {
            "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
            "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
        }
        for component in CONTROLLER_ORDER:
            for configuration in manifests.webhook_configurations(
                component, webhook_port=ports[component].webhook, ca_bundle=self._ca.cert_pem
            ):
                resource = paths[configuration["kind"]]
                self.rest.post(f"/apis/admissionregistration.k8s.io/v1/{resource}", configuration)

    def _wait_webhooks_answer(self) -> None:
        """Poll a server-side dry-run create through each manager's webhooks until it is served.

        A webhook that is not reachable yet fails the request with "failed calling webhook"; any
        other failure is a real answer this harness does not expect, so it is raised.
        """
        for what, path, body in _PROBES:
            self._wait(functools.partial(self._dry_run, path, body), what=f"{what} webhooks")

    def _dry_run(self, path: str, body: dict[str, Any]) -> bool | None:
        try:
            self.rest.post(f"{path}?dryRun=All", body)
        except ApiError as e:
            if WEBHOOK_UNREACHABLE in e.body:
                return None
            raise
        except TimeoutError:
            # Just after an etcd or API server restart a request can hang past the client's
            # timeout while the managers' informers relist: no answer yet, ask again.
            return None
        return True

    def _exists(self, path: str) -> bool | None:
        try:
            self.rest.get(path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        return True

    @property
    def rest(self) -> RestClient:
        """The harness's own admin client (available once kube-apiserver started)."""
        if self._rest is None:
            raise ControlPlaneError("kube-apiserver has not been started")
        return self._rest


# Dry-run creates that pass through every webhook server: Kueue (ResourceFlavor), JobSet (JobSet,
# also Kueue's no-op JobSet hooks) and Trainer (ClusterTrainingRuntime).
_PROBES: Final[list[tuple[str, str, dict[str, Any]]]] = [
    (
        "Kueue",
        "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": PROBE_NAME},
        },
    ),
    (
        "JobSet",
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets",
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": PROBE_NAME},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "probe",
                        "template": {
                            "spec": {
                                "template": {
                                    "spec": {
                                        "restartPolicy": "Never",
                                        "containers": [{"name": "probe", "image": "probe"}],
                                    }
                                }
                            }
                        },
                    }
                ]
            },
        },
    ),
    (
        "Trainer",
        "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes",
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "ClusterTrainingRuntime",
            "metadata": {"name": PROBE_NAME},
            "spec": {
                "mlPolicy": {"numNodes": 1, "torch": {}},
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {
                                    "metadata": {
                                        "labels": {
                                            "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                        }
                                    },
                                    "spec": {
                                        "template": {
                                            "spec": {
                                                "containers": [{"name": "node", "image": "probe"}]
                                            }
                                        }
                                    },
                                },
                            }
                        ]
                    }
                },
            },
        },
    ),
]


_RBAC_PATHS: Final = {
    "ServiceAccount": "/api/v1/{scope}serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/{scope}roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/{scope}rolebindings",
}


def _collection(document: dict[str, Any]) -> str:
    namespace = document["metadata"].get("namespace")
    scope = f"namespaces/{namespace}/" if namespace else ""
    return _RBAC_PATHS[document["kind"]].format(scope=scope)


def _reviews(
    binding: dict[str, Any], roles: Mapping[tuple[str, str, str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """SubjectAccessReviews asking, for each ServiceAccount the binding names, the first right
    of the role it binds: allowed once the authorizer has seen the binding and the role."""
    ref = binding["roleRef"]
    namespace = binding["metadata"].get("namespace", "")
    role = roles.get((ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"]))
    rules = [r for r in (role or {}).get("rules", []) if r.get("resources")]
    if not rules:  # an aggregated role, or one of the cluster's own: nothing to wait for here
        return []
    rule = rules[0]
    resource, _, subresource = rule["resources"][0].partition("/")
    attributes = {
        "group": rule.get("apiGroups", [""])[0],
        "resource": resource,
        "subresource": subresource,
        "verb": rule["verbs"][0],
        **({"namespace": namespace} if namespace else {}),
        **({"name": rule["resourceNames"][0]} if rule.get("resourceNames") else {}),
    }
    return [
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": identities.username(subject["namespace"], subject["name"]),
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{subject['namespace']}",
                    "system:authenticated",
                ],
                "resourceAttributes": attributes,
            },
        }
        for subject in binding.get("subjects", [])
        if subject["kind"] == "ServiceAccount"
    ]


def _ensure_kueue_metrics_cert(ca: certs.CertificateAuthority) -> None:
    """Kueue v0.19.2 exits unless a certificate exists at a fixed /etc path (see controllers).

    Any valid pair will do (metrics are off); it is written once, under a lock so concurrent
    runs never pair one run's certificate with another's key.
    """
    directory = controllers.KUEUE_METRICS_CERT_DIR
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            crt, key = directory / "tls.crt", directory / "tls.key"
            if not (crt.exists() and key.exists()):
                ca.serving("kueue-metrics").write(crt, key)
    except PermissionError as e:
        raise ControlPlaneError(
            f"Kueue needs a metrics certificate in {directory} and this user cannot write it: "
            f"run `sudo install -d -o {os.getuid()} {directory}` once"
        ) from e
