"""Documents a command reads: a start request or a runtime, as JSON or YAML."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from dispatch_k8s.core.rules import shapes
from dispatch_k8s.core.rules.errors import BadInput


def read_document(path: Path, *, what: str) -> dict[str, Any]:
    """Read one JSON or YAML mapping, in UTF-8, from `path`."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise BadInput(f"cannot read {what} {path}: {e.strerror}") from e
    try:
        text = data.decode()
    except UnicodeDecodeError as e:  # not the locale's: a file made elsewhere reads the same
        raise BadInput(f"{what} {path} is not UTF-8: {e.reason} at byte {e.start}") from e
    try:
        document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        reason = str(e).splitlines()[0]
        raise BadInput(f"{what} {path} is not valid {path.suffix or 'YAML'}: {reason}") from e
    if not isinstance(document, dict):
        found = "is empty" if document is None else f"holds {shapes.kind_word(document)}"
        raise BadInput(
            f"{what} {path} {found}: it must hold one mapping (key: value lines, or a JSON object)"
        )
    return document


def snake_case(key: str) -> str:
    """`jobId`, `job-id` and `job_id` all name the field `job_id`."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).replace("-", "_").lower()
