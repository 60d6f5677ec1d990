"""Arbitrary JSON for fuzzing the parsers: any value, put anywhere in a valid object."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)


def leaf_paths(value: Any, prefix: tuple[str | int, ...] = ()) -> list[list[str | int]]:
    """The path of every key and list item in `value`, outermost first."""
    if isinstance(value, dict):
        items: list[tuple[str | int, Any]] = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return []
    found = [[*prefix, key] for key, _ in items]
    for key, child in items:
        found += leaf_paths(child, (*prefix, key))
    return found


def with_value(document: dict[str, Any], keys: list[str | int], value: Any) -> dict[str, Any]:
    """A copy of `document` with `value` at `keys`."""
    changed = copy.deepcopy(document)
    parent: Any = changed
    for key in keys[:-1]:
        parent = parent[key]
    parent[keys[-1]] = value
    return changed


@st.composite
def cut_in_a_character(draw: st.DrawFn, before: st.SearchStrategy[bytes]) -> bytes:
    """Valid UTF-8 (`before`, then one more character) cut inside that last character."""
    char = draw(st.characters(min_codepoint=0x80, exclude_categories=["Cs"]))
    encoded = char.encode()
    return draw(before) + encoded[: draw(st.integers(1, len(encoded) - 1))]


def cut_anywhere(whole: bytes) -> st.SearchStrategy[bytes]:
    """`whole` cut at any byte, inside a character too."""
    return st.integers(0, len(whole)).map(lambda at: whole[:at])


# Any bytes: arbitrary, or UTF-8 text cut mid-character.
BYTES = st.binary(max_size=48) | cut_in_a_character(st.text(max_size=12).map(str.encode))


def as_os_string(data: bytes) -> str:
    """The bytes as Python gives them in sys.argv and os.environ (surrogateescape)."""
    return data.decode("utf-8", "surrogateescape")


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
