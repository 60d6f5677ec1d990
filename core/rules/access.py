"""Who may read /metrics: the bearer token a scrape carries, as the API server judges it.

As controller-runtime's secure metrics (filters.WithAuthenticationAndAuthorization): the token
is reviewed by the API server (TokenReview), and the user it names must be allowed `get` on
the non-resource URL of the request (SubjectAccessReview), as RBAC's ClusterRoles grant it
(`nonResourceURLs: [/metrics]`). These functions build the reviews and read their answers;
the controller sends them.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any, Final

from dispatch_k8s.core.rules import shapes

UNAUTHENTICATED: Final = 401
FORBIDDEN: Final = 403
ALLOWED: Final = 200


@dataclasses.dataclass(frozen=True, slots=True)
class User:
    """Whom a token names, as the TokenReview's status.user has it."""

    name: str
    uid: str
    groups: tuple[str, ...]
    extra: Mapping[str, tuple[str, ...]]


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header; None for any other header.

    Read as the API server's own bearer token authenticator reads it: the scheme in any case
    (RFC 7235), the token the word after one space.
    """
    parts = (authorization or "").strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def token_key(token: str) -> str:
    """What a token is remembered by: its digest, so no token is kept in memory as it is."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_review(token: str) -> dict[str, Any]:
    """The TokenReview's spec for `token`."""
    return {"token": token}


def reviewed_user(answer: Mapping[str, Any]) -> User | None:
    """The user a TokenReview's answer authenticates; None when it does not."""
    status = shapes.mapping(answer.get("status"))
    if status.get("authenticated") is not True:
        return None
    user = shapes.mapping(status.get("user"))
    extra = shapes.mapping(user.get("extra"))
    return User(
        name=str(user.get("username") or ""),
        uid=str(user.get("uid") or ""),
        groups=tuple(str(group) for group in user.get("groups") or ()),
        extra={key: tuple(str(v) for v in values or ()) for key, values in extra.items()},
    )


def access_review(user: User, *, path: str, verb: str = "get") -> dict[str, Any]:
    """The SubjectAccessReview's spec: may `user` `verb` the non-resource URL `path`?"""
    return {
        "user": user.name,
        "uid": user.uid,
        "groups": list(user.groups),
        "extra": {key: list(values) for key, values in user.extra.items()},
        "nonResourceAttributes": {"path": path, "verb": verb},
    }


def allowed(answer: Mapping[str, Any]) -> bool:
    """Whether a SubjectAccessReview's answer allows the request."""
    return shapes.mapping(answer.get("status")).get("allowed") is True
