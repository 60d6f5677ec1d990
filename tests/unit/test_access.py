"""Who may read /metrics: the token's review and the access review, built and read."""

from __future__ import annotations

import pytest

from dispatch_k8s.core.rules import access

USER = access.User(name="system:serviceaccount:mon:prom", uid="u-1", groups=("g",), extra={})


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def", "abc.def"),
        ("Bearer   padded  ", None),  # an empty word after the one space: no token
        ("Bearer ", None),
        ("Basic dXNlcjpwYXNz", None),
        ("bearer abc", "abc"),  # any case, as RFC 7235 and the API server take the scheme
        ("Bearer a b", "a"),  # the word after the space, the rest not read
        (None, None),
    ],
)
def test_only_a_bearer_header_carries_a_token(header: str | None, token: str | None) -> None:
    assert access.bearer_token(header) == token


def test_a_token_is_remembered_by_its_digest_not_as_it_is() -> None:
    key = access.token_key("secret-token")
    assert "secret-token" not in key
    assert key == access.token_key("secret-token") != access.token_key("secret-tokem")


def test_an_authenticated_review_names_its_user_and_any_other_none() -> None:
    answer = {
        "status": {
            "authenticated": True,
            "user": {
                "username": USER.name,
                "uid": "u-1",
                "groups": ["g"],
                "extra": {"scopes": ["a", "b"]},
            },
        }
    }
    assert access.reviewed_user(answer) == access.User(
        name=USER.name, uid="u-1", groups=("g",), extra={"scopes": ("a", "b")}
    )
    assert access.reviewed_user({"status": {"authenticated": False}}) is None
    assert access.reviewed_user({"status": {"authenticated": "true"}}) is None
    assert access.reviewed_user({}) is None


def test_the_access_review_asks_for_get_on_the_path() -> None:
    spec = access.access_review(USER, path="/metrics")
    assert spec["user"] == USER.name
    assert spec["groups"] == ["g"]
    assert spec["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
    assert access.allowed({"status": {"allowed": True}})
    assert not access.allowed({"status": {"allowed": False, "denied": True}})
    assert not access.allowed({"status": {}})
