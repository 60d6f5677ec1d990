"""A setting's flag, its env variable, and its --help entry."""

from __future__ import annotations

from typing import Any, Final

from pydantic import Field

DISTRIBUTION: Final = "dispatch-k8s"
ENV_PREFIX: Final = "DISPATCH_"
# Fields whose env variable is not DISPATCH_<FIELD>, and the release from which DISPATCH_<FIELD>,
# read with a warning while the new name is unset, is no longer read (docs/cli.md: The start
# request). DISPATCH_ATTEMPT is what every training pod sees (core/rules/prologue.py): a start
# run in one would take the pod's for its own --attempt.
ENV_NAMES: Final = {"attempt": ("DISPATCH_START_ATTEMPT", "0.3.0")}


def doc(text: str, *, metavar: str = "", default: str = "") -> Any:
    """A flag's --help entry: what it means, its value's name, and its default in words."""
    return Field(description=text, json_schema_extra={"metavar": metavar, "default_text": default})


VERBOSE: Final = "-v"  # kubectl's short verbosity flag: here, --log-level debug
# kubectl's short flags that name a field, each shown beside its long flag in --help.
SHORT_FLAGS: Final = {"namespace": "-n", "selector": "-l", "output": "-o", "watch": "-w"}


def env_name(field: str) -> str:
    """The environment variable that sets a field: DISPATCH_<FIELD>, unless ENV_NAMES says."""
    return ENV_NAMES[field][0] if field in ENV_NAMES else f"{ENV_PREFIX}{field.upper()}"


def flag_name(field: str) -> str:
    """The flag that sets a field: --<field in kebab-case>."""
    return "--" + field.replace("_", "-")
