"""Golden files under tests/golden: what a change to an output must show in review.

`DISPATCH_REGENERATE=1` rewrites them (never in CI); the diff is then read like code.
"""

from __future__ import annotations

import json
import os
from typing import Any, Final

from tests.support.shipped import REPO

GOLDEN: Final = REPO / "tests" / "golden"


def check_golden_text(name: str, text: str) -> None:
    """`text` is tests/golden/`name`, to the byte."""
    path = GOLDEN / name
    if os.environ.get("DISPATCH_REGENERATE") and not os.environ.get("CI"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing: DISPATCH_REGENERATE=1 writes it"
    assert path.read_text() == text, f"{path} differs: review, then DISPATCH_REGENERATE=1"


def check_golden(name: str, rendered: Any) -> None:
    """`rendered` as the JSON of tests/golden/`name` (indented, keys sorted)."""
    check_golden_text(name, json.dumps(rendered, indent=2, sort_keys=True) + "\n")
