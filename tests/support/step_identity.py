"""The shipped step identity (pipelines/rbac/steps.yaml) installed in a test namespace, a
kubeconfig holding a token of its ServiceAccount, for the steps to run with (lifecycle.run_step).

Cluster-scoped objects get the namespace appended to their names, so tests never share them.
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml
from kubernetes import client, config

from tests.cluster import kube
from tests.support.shipped import PIPELINES, Manifest, documents

RBAC: Final = PIPELINES / "rbac" / "steps.yaml"
SERVICE_ACCOUNT: Final = "dispatch-steps"
Rule = tuple[str, str, str]  # (apiGroup, resource, verb)


def granted(document: Manifest) -> set[Rule]:
    """Every (apiGroup, resource, verb) a Role or ClusterRole grants, one by one."""
    return {
        (group, resource, verb)
        for rule in document["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def shipped_grants(rbac: Path = RBAC) -> set[Rule]:
    """What the shipped Role and ClusterRole (of `rbac`, the steps' by default) grant together."""
    return {
        rule
        for document in documents(rbac)
        if document["kind"] in ("Role", "ClusterRole")
        for rule in granted(document)
    }


def _without(document: Manifest, denied: Rule | None) -> Manifest:
    """The (Cluster)Role with one (apiGroup, resource, verb) taken out."""
    if denied is None:
        return document
    rules = []
    for group, resource, verb in sorted(granted(document) - {denied}):
        rules.append({"apiGroups": [group], "resources": [resource], "verbs": [verb]})
    return {**document, "rules": rules}


def identity_objects(
    namespace: str, *, denied: Rule | None = None, rbac: Path = RBAC
) -> list[Manifest]:
    """The shipped RBAC objects (of `rbac`, the steps' by default) for `namespace`, optionally
    missing one grant; cluster-scoped objects get the namespace appended to their names, so
    tests never share them."""
    objects = []
    for document in documents(rbac):
        document = copy.deepcopy(document)
        if document["kind"] in ("Role", "ClusterRole"):
            document = _without(document, denied)
        if document["kind"].startswith("Cluster"):
            document["metadata"]["name"] += f"-{namespace}"
        if document["kind"] == "ClusterRoleBinding":
            document["roleRef"]["name"] += f"-{namespace}"
            for subject in document["subjects"]:
                subject["namespace"] = namespace
        objects.append(document)
    return objects


def service_account_token(
    api: client.ApiClient, namespace: str, service_account: str = SERVICE_ACCOUNT
) -> str:
    """A one-hour token of a ServiceAccount (TokenRequest API)."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    answer = client.CoreV1Api(api).create_namespaced_service_account_token(
        service_account, namespace, request
    )
    assert answer.status is not None
    return str(answer.status.token)


def cluster_ca(admin_kubeconfig: Path) -> bytes:
    """The PEM CA bundle an admin kubeconfig trusts the API server by."""
    cluster = yaml.safe_load(admin_kubeconfig.read_text())["clusters"][0]["cluster"]
    if "certificate-authority-data" in cluster:
        return base64.b64decode(cluster["certificate-authority-data"])
    return Path(cluster["certificate-authority"]).read_bytes()


def token_kubeconfig(admin_kubeconfig: Path, token: str, path: Path) -> Path:
    """A kubeconfig for the same server that authenticates with `token` only."""
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    ca = base64.b64encode(cluster_ca(admin_kubeconfig)).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": cluster["server"], "certificate-authority-data": ca},
            }
        ],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": SERVICE_ACCOUNT}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@dataclass(slots=True)
class StepIdentity:
    """The shipped identity installed in one namespace; `remove` deletes its cluster objects."""

    api: client.ApiClient
    namespace: str
    kubeconfig: Path
    objects: list[Manifest]

    def remove(self) -> None:
        """Delete the cluster-scoped objects (namespaced ones go with the namespace)."""
        for document in self.objects:
            if document["kind"].startswith("Cluster"):
                kube.delete(self.api, document, namespace=None)

    def api_client(self) -> client.ApiClient:
        """An API client authenticated as the ServiceAccount (close it after use)."""
        api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )
        return api


def install_identity(
    api: client.ApiClient,
    namespace: str,
    *,
    admin_kubeconfig: Path,
    work: Path,
    denied: Rule | None = None,
) -> StepIdentity:
    """Apply the shipped RBAC in `namespace` and mint a token kubeconfig for it."""
    objects = identity_objects(namespace, denied=denied)
    for document in objects:
        kube.apply(api, document, namespace=namespace)
    token = service_account_token(api, namespace)
    kubeconfig = token_kubeconfig(admin_kubeconfig, token, work / f"{SERVICE_ACCOUNT}.kubeconfig")
    return StepIdentity(api=api, namespace=namespace, kubeconfig=kubeconfig, objects=objects)


# What every authenticated user may do (discovery and self-reviews), not granted by us.
EVERYONE: Final = frozenset(
    {"selfsubjectaccessreviews", "selfsubjectrulesreviews", "selfsubjectreviews"}
)


def granted_by_the_server(api: client.ApiClient, namespace: str) -> set[Rule]:
    """The account's own rules in `namespace`, as the server's SelfSubjectRulesReview says."""
    review = client.AuthorizationV1Api(api).create_self_subject_rules_review(
        client.V1SelfSubjectRulesReview(
            spec=client.V1SelfSubjectRulesReviewSpec(namespace=namespace)
        )
    )
    assert review.status is not None
    rules = set()
    for rule in review.status.resource_rules:
        for group in rule.api_groups or []:
            for resource in rule.resources or []:
                if resource not in EVERYONE:
                    rules |= {(group, resource, verb) for verb in rule.verbs}
    return rules
