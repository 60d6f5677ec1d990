"""Reading the API's objects: a field missing, null or of another shape reads as empty.

Controllers and people write these objects; a decision on a malformed one is a refusal or
nothing to do, told in words, never a crash (docs/design.md §3: no traceback for any input).
So is the word a value reads as in those words, whatever was written there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def mapping(value: Any) -> Mapping[str, Any]:
    """`value` if it is a mapping, else empty."""
    if type(value) is dict:  # what JSON decodes to: skips the slower abstract-class check
        return value
    return value if isinstance(value, Mapping) else {}


def at(obj: Any, *keys: str) -> Mapping[str, Any]:
    """The mapping at `keys` below `obj`; a missing or malformed step reads as empty."""
    found = mapping(obj)
    for key in keys:
        found = mapping(found.get(key))
    return found


def mappings(value: Any) -> list[Mapping[str, Any]]:
    """The mapping items of `value` if it is a list, else none."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def annotations_of(obj: Any) -> Mapping[str, Any]:
    """metadata.annotations, empty when absent or malformed."""
    return at(obj, "metadata", "annotations")


def labels_of(obj: Any) -> Mapping[str, Any]:
    """metadata.labels, empty when absent or malformed."""
    return at(obj, "metadata", "labels")


def without_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` less metadata.managedFields (often half of it; no decision reads it), to keep."""
    meta = {k: v for k, v in mapping(obj.get("metadata")).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def kind_word(value: Any) -> str:
    """What a decoded JSON or YAML value is, in words (`a list`), never a Python type's name."""
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return "a value of another kind (a date, a set, bytes)"


def word(value: Any) -> str:
    """`value` if it is a non-empty string, else its repr (the audit's findings name it so)."""
    return value if isinstance(value, str) and value else repr(value)


def printable_word(value: Any) -> str:
    """`value` if it is a printable non-empty string, else `shown(value)`: for one-line refusals."""
    return value if isinstance(value, str) and value.isprintable() and value else shown(value)


def shown(value: Any) -> str:
    """Return `value` quoted on one short line, for a message."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
