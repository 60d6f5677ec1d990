"""A team member: a ServiceAccount with the ordinary edit rights on a namespace's training
objects (TrainJobs, JobSets, Jobs, pods, Workloads) and ConfigMaps (where the steps keep their
ledger), as the built-in `edit` role has them, not cluster-admin. Bypasses are tried as
this identity, as a person with kubectl would try them."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from kubernetes import client, config

from tests.support.step_identity import service_account_token, token_kubeconfig

NAME: Final = "team-member"
EDIT: Final = ["get", "list", "watch", "create", "update", "patch", "delete"]
RULES: Final = [
    ("trainer.kubeflow.org", ["trainjobs"]),
    ("jobset.x-k8s.io", ["jobsets"]),
    ("batch", ["jobs"]),
    ("", ["pods"]),
    ("kueue.x-k8s.io", ["workloads"]),
    ("", ["configmaps"]),
]


def team_member(
    api: client.ApiClient, namespace: str, *, admin_kubeconfig: Path, work: Path
) -> client.ApiClient:
    """An API client acting as the team member in `namespace` (close it after use)."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    meta = client.V1ObjectMeta(name=NAME)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=meta))
    rules = [
        client.V1PolicyRule(api_groups=[group], resources=resources, verbs=EDIT)
        for group, resources in RULES
    ]
    rbac.create_namespaced_role(namespace, client.V1Role(metadata=meta, rules=rules))
    binding = client.V1RoleBinding(
        metadata=meta,
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=NAME),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name=NAME, namespace=namespace)],
    )
    rbac.create_namespaced_role_binding(namespace, binding)
    token = service_account_token(api, namespace, NAME)
    kubeconfig = token_kubeconfig(admin_kubeconfig, token, work / f"{NAME}.kubeconfig")
    member: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig)
    )
    return member
