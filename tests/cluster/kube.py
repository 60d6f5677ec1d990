"""Raw JSON requests to the API server for any kind, found by discovery.

The shipped manifests reach the server exactly as written (no generated model in between,
which would drop fields it does not know and so hide a typo from `fieldValidation=Strict`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from kubernetes import client
from kubernetes.client.exceptions import ApiException

# An object's identity on the server, as the release renderers key what they render.
from release.dist import Key as Key
from release.dist import key as key

APPLY: Final = "application/apply-patch+yaml"  # server-side apply; JSON is valid YAML
FIELD_MANAGER: Final = "dispatch-k8s-tests"


@dataclass(frozen=True, slots=True, kw_only=True)
class Resource:
    """Where a kind is served: its URL prefix, plural and scope."""

    prefix: str  # /api/v1 or /apis/<group>/<version>
    plural: str
    namespaced: bool

    def path(self, *, namespace: str | None, name: str | None = None) -> str:
        """The collection path, or the object path when `name` is given."""
        scope = f"/namespaces/{namespace}" if self.namespaced and namespace else ""
        path = f"{self.prefix}{scope}/{self.plural}"
        return f"{path}/{name}" if name else path


def request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]] | None = None,
    body: Any = None,
    content_type: str = "application/json",
) -> dict[str, Any]:
    """Send one request with the client's credentials; the decoded body, or ApiException."""
    verb, url, headers, payload, _ = api.param_serialize(
        method,
        path,
        query_params=query or [],
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(verb, url, header_params=headers, body=payload, _request_timeout=60)
    response.read()  # type: ignore[no-untyped-call]  # the client leaves it unannotated
    text = (response.data or b"").decode()
    if not 200 <= response.status < 300:
        raise ApiException(status=response.status, reason=response.reason or "", body=text)
    decoded: dict[str, Any] = json.loads(text) if text else {}
    return decoded


def discover(api: client.ApiClient, api_version: str, kind: str) -> Resource:
    """The resource serving `kind` in `api_version`, from the server's discovery document."""
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    listing = request(api, "GET", prefix)
    for resource in listing["resources"]:
        if resource["kind"] == kind and "/" not in resource["name"]:
            return Resource(
                prefix=prefix, plural=resource["name"], namespaced=resource["namespaced"]
            )
    raise LookupError(f"{api_version} serves no {kind}")


def apply(
    api: client.ApiClient,
    body: dict[str, Any],
    *,
    namespace: str | None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Server-side apply one object (strict field validation); create it if it has only a
    generateName, as apply needs a name. An object that names its namespace goes there."""
    namespace = body.get("metadata", {}).get("namespace", namespace)
    resource = discover(api, body["apiVersion"], body["kind"])
    query = [("fieldValidation", "Strict"), ("fieldManager", FIELD_MANAGER)]
    if dry_run:
        query.append(("dryRun", "All"))
    name = body.get("metadata", {}).get("name")
    if name is None:
        return request(api, "POST", resource.path(namespace=namespace), query=query, body=body)
    return request(
        api,
        "PATCH",
        resource.path(namespace=namespace, name=name),
        query=[*query, ("force", "true")],
        body=body,
        content_type=APPLY,
    )


def dry_run(
    api: client.ApiClient, body: dict[str, Any], *, namespace: str | None
) -> dict[str, Any]:
    """Create one object with dryRun=All and strict field validation; nothing is stored.

    A create, not an apply: for custom resources an apply reports an unknown field as a 500
    ("failed to create typed patch object"), a create as a 400 naming the field. Only an
    object that exists already (a runtime another test installed) is dry-run applied instead.
    An object that names its namespace is dry-run there.
    """
    namespace = body.get("metadata", {}).get("namespace", namespace)
    resource = discover(api, body["apiVersion"], body["kind"])
    query = [("fieldValidation", "Strict"), ("dryRun", "All")]
    try:
        return request(api, "POST", resource.path(namespace=namespace), query=query, body=body)
    except ApiException as e:
        if e.status != 409:
            raise
    return apply(api, body, namespace=namespace, dry_run=True)


def refusal(api: client.ApiClient, body: dict[str, Any], *, namespace: str | None) -> str:
    """Dry-run `body`, which the server must refuse as invalid (400 or 422): its message."""
    try:
        dry_run(api, body, namespace=namespace)
    except ApiException as e:
        if e.status in (400, 422):
            message: str = json.loads(str(e.body))["message"]
            return message
        raise
    raise AssertionError(f"{body['kind']} {body['metadata'].get('name')}: accepted")


def delete(api: client.ApiClient, body: dict[str, Any], *, namespace: str | None) -> None:
    """Delete one object; gone already is fine."""
    resource = discover(api, body["apiVersion"], body["kind"])
    try:
        request(
            api,
            "DELETE",
            resource.path(namespace=namespace, name=body["metadata"]["name"]),
        )
    except ApiException as e:
        if e.status != 404:
            raise


def stored(api: client.ApiClient, k: Key) -> dict[str, Any] | None:
    """The object `k` as the server holds it, or None if it has none."""
    api_version, kind, namespace, name = k
    resource = discover(api, api_version, kind)
    try:
        return request(api, "GET", resource.path(namespace=namespace or None, name=name))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def everything(api: client.ApiClient) -> set[Key]:
    """Every object of every kind the server lists, in every namespace."""
    prefixes = ["/api/v1"] + [
        f"/apis/{group['preferredVersion']['groupVersion']}"
        for group in request(api, "GET", "/apis")["groups"]
    ]
    found = set()
    for prefix in prefixes:
        api_version = prefix.removeprefix("/api/").removeprefix("/apis/")
        for resource in request(api, "GET", prefix)["resources"]:
            if "/" in resource["name"] or "list" not in resource["verbs"]:
                continue
            listing = request(api, "GET", f"{prefix}/{resource['name']}")
            found |= {
                (
                    api_version,
                    resource["kind"],
                    i["metadata"].get("namespace", ""),
                    i["metadata"]["name"],
                )
                for i in listing["items"]
            }
    return found
