"""Response bodies read as they arrive: a list's items one at a time, a watch's events."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from dispatch_k8s.core.rules import shapes
from dispatch_k8s.core.shell.gateway.api_errors import ApiError

if TYPE_CHECKING:
    from kubernetes.client.rest import RESTResponse


def as_object(value: Any) -> dict[str, Any]:
    """Narrow a decoded JSON body to the plain dict every caller works with."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object, got {shapes.kind_word(value)}")
    return value


_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")
_DECODER: Final = json.JSONDecoder()


def iter_list_items(text: str, rest: dict[str, Any], *, key: str = "items") -> Iterator[Any]:
    """Yield the elements of the array `key` of the JSON object `text`, one decoded at a time.

    The object's other members are put into `rest` as they are read (all of them once the
    iteration ends). Anything that is not such an object raises ValueError.
    """

    def skip(at: int) -> int:
        match = _WHITESPACE.match(text, at)
        return match.end() if match else at

    def expect(at: int, char: str) -> int:
        at = skip(at)
        if text[at : at + 1] != char:
            raise ValueError(f"expected {char!r} at {at} of a list body")
        return at + 1

    at = expect(0, "{")
    if text[skip(at) : skip(at) + 1] == "}":
        return
    while True:
        name, at = _DECODER.raw_decode(text, skip(at))
        if not isinstance(name, str):
            raise ValueError(f"an object key at {at} of a list body is not a string")
        at = skip(expect(at, ":"))
        if name == key and text[at : at + 1] == "[":
            at = skip(at + 1)
            if text[at : at + 1] == "]":
                at += 1
            else:
                while True:
                    item, at = _DECODER.raw_decode(text, at)
                    yield item
                    del item
                    at = skip(at)
                    if text[at : at + 1] == "]":
                        at += 1
                        break
                    at = skip(expect(at, ","))
        else:
            rest[name], at = _DECODER.raw_decode(text, at)
        at = skip(at)
        if text[at : at + 1] == "}":
            return
        at = expect(at, ",")


def watch_events(response: RESTResponse) -> Iterator[dict[str, Any]]:
    """The events of a watch response, one JSON object a line; an ERROR event is raised."""
    from kubernetes.watch.watch import iter_resp_lines

    for line in iter_resp_lines(response.response):  # type: ignore[no-untyped-call]
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue  # as the client's own Watch: a line that is not JSON is skipped
        if not (
            isinstance(event, dict) and "type" in event and isinstance(event.get("object"), dict)
        ):
            continue  # nor is one that is no event
        if event.get("type") == "ERROR":
            status = shapes.mapping(event.get("object"))
            code = status.get("code")
            reason = str(status.get("reason") or "")
            raise ApiError(
                code if isinstance(code, int) else 0,
                reason,
                reason=reason,
                message=str(status.get("message") or ""),
            )
        yield event
