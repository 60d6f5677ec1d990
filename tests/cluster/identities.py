"""Who the controllers run as: JobSet, Kueue and Trainer as the ServiceAccounts their upstream
installs create, with the roles and bindings of their own modules (tests/cluster/manifests.py),
and kube-controller-manager's controllers as their own ServiceAccounts in kube-system (its
--use-service-account-credentials, as kubeadm runs it). None of them is in system:masters, so
a right the design needs that upstream does not grant fails here as it would in a cluster.

Two upstream layouts (docs/install.md, Which upstream layouts are tested):

- `releases`: each project's own release, JobSet in jobset-system (its `config/default`), Kueue
  in kueue-system, Trainer in kubeflow-system (its `manifests/overlays/manager`). Every suite
  runs on it;
- `trainer-overlay`: Trainer's `manifests/overlays/manager` as it is, which includes JobSet's
  release and sets its own namespace over it: JobSet runs in kubeflow-system
  (tests/integration/test_trainer_overlay_layout.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from tests.cluster import manifests

Layout = Literal["releases", "trainer-overlay"]
LAYOUTS: Final[tuple[Layout, ...]] = ("releases", "trainer-overlay")
DEFAULT_LAYOUT: Final[Layout] = "releases"
# kube-controller-manager's controllers the path guard names, by the key of
# pipelines/policies/controllers.yaml: with --use-service-account-credentials each acts as a
# ServiceAccount of kube-system named by its controller (k8s.io/kubernetes
# cmd/kube-controller-manager/app: batch.go, core.go). A key's other users
# (system:kube-controller-manager, DRA's device-taint-eviction-controller) run in no cluster here.
KCM_ACCOUNTS: Final = {
    "job-controller": "job-controller",
    "garbage-collector": "generic-garbage-collector",
    "namespace-controller": "namespace-controller",
    "pod-garbage-collector": "pod-garbage-collector",
    # The taint eviction controller is given the node lifecycle controller's client (core.go).
    "taint-eviction": "node-controller",
}
KCM_NAMESPACE: Final = "kube-system"
# kube-scheduler's user, the path guard's key `scheduler`: its preemption deletes its victims.
# kubeadm gives it this user (a client certificate), as the node's harness does.
SCHEDULER_USER: Final = "system:kube-scheduler"
# The users each layout runs JobSet, Kueue and Trainer as, for what must know them before a
# cluster starts (the policies' parameters in tests/support/policies.py, the chart's values in
# tests/up/). `identities` reads them from the modules, and the harness refuses to start when
# the two differ: an upstream that renamed one is noticed, not half-applied.
USERS: Final[dict[Layout, dict[str, str]]] = {
    "releases": {
        "jobset": "system:serviceaccount:jobset-system:jobset-controller-manager",
        "kueue": "system:serviceaccount:kueue-system:kueue-controller-manager",
        "trainer": "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",
    },
    "trainer-overlay": {
        "jobset": "system:serviceaccount:kubeflow-system:jobset-controller-manager",
        "kueue": "system:serviceaccount:kueue-system:kueue-controller-manager",
        "trainer": "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",
    },
}


def username(namespace: str, account: str) -> str:
    """The user a ServiceAccount's token authenticates as."""
    return f"system:serviceaccount:{namespace}:{account}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """One upstream controller's ServiceAccount and what its module's RBAC makes for it."""

    component: str  # the versions.toml name: jobset, kueue, trainer
    namespace: str
    account: str
    objects: tuple[manifests.Manifest, ...]  # the ServiceAccount, roles and bindings

    @property
    def user(self) -> str:
        """Its username, as the path guard's parameters name it."""
        return username(self.namespace, self.account)


def namespaces(layout: Layout) -> dict[str, str]:
    """Each controller's namespace in `layout`, as the overlays it names set them."""
    found = {name: manifests.release_namespace(name) for name in ("jobset", "kueue", "trainer")}
    if layout == "trainer-overlay":
        # manifests/overlays/manager includes third-party/jobset (JobSet's release) and sets
        # `namespace:` over everything it includes.
        found["jobset"] = found["trainer"]
    return found


def identity(component: str, namespace: str) -> Identity:
    """`component` as its module installs it, in `namespace`."""
    objects = manifests.rbac(component, namespace=namespace)
    (account,) = [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"]
    return Identity(
        component=component, namespace=namespace, account=account, objects=tuple(objects)
    )


def identities(layout: Layout) -> dict[str, Identity]:
    """JobSet's, Kueue's and Trainer's identities in `layout`, by component; ValueError if
    their users are not USERS[layout]."""
    found = {name: identity(name, ns) for name, ns in namespaces(layout).items()}
    users = {name: found[name].user for name in found}
    if users != USERS[layout]:
        raise ValueError(f"the modules' manifests make {users} in layout {layout}, not USERS")
    return found


def system_users() -> dict[str, str]:
    """kube-controller-manager's controllers' users and kube-scheduler's, by the path guard's
    key."""
    kcm = {key: username(KCM_NAMESPACE, account) for key, account in KCM_ACCOUNTS.items()}
    return {**kcm, "scheduler": SCHEDULER_USER}
