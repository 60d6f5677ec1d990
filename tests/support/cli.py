"""The steps' real command lines: what each console script accepts, parsed by its own parser."""

from __future__ import annotations

import importlib
import os
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final, get_type_hints

from dispatch_k8s.core.shell.settings import StepSettings, load_settings
from dispatch_k8s.steps.start_settings import StartSettings
from tests.support.render import Invocation
from tests.support.shipped import REPO

# Helper containers that are not steps: the Argo `exit` template and Tekton's write-request
# step run the image's Python on a fixed one-line program.
HELPERS: Final = frozenset({"python3"})
CONTROLLER: Final = "dispatch-admission-controller"  # a Deployment (pipelines/controller/)
# Read-only commands a person runs, never a pipeline's step.
INTERACTIVE: Final = frozenset({"dispatch-status", "dispatch-doctor", "kubectl-dispatch"})


def console_scripts() -> dict[str, str]:
    """pyproject's [project.scripts]: script name -> "module:function"."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    scripts: dict[str, str] = project["scripts"]
    return scripts


def step_scripts() -> set[str]:
    """The console scripts that are steps a pipeline runs: not the controller nor a person's."""
    return set(console_scripts()) - {CONTROLLER} - INTERACTIVE


def settings_class(script: str) -> type[StepSettings]:
    """The settings class a console script parses into: its step's `run` parameter type."""
    target = console_scripts().get(script)
    if target is None:
        raise AssertionError(f"{script} is not a console script of this project")
    module = importlib.import_module(target.partition(":")[0])
    hints = get_type_hints(module.run)
    cls = hints["settings"]
    assert isinstance(cls, type)
    assert issubclass(cls, StepSettings)
    return cls


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """Exactly `env` for the DISPATCH_* settings, whatever the test process has."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("DISPATCH_")}
    for key in saved:
        del os.environ[key]
    os.environ.update(env)
    try:
        yield
    finally:
        for key in env:
            os.environ.pop(key, None)
        os.environ.update(saved)


def parse(invocation: Invocation, scratch: Path) -> StepSettings:
    """Parse an invocation with its step's own settings parser (BadInput when it refuses).

    A start request file is read too: its content is written to `scratch` and validated as
    the step would validate it.
    """
    script, *argv = invocation.argv
    cls = settings_class(script)
    with environment(invocation.env):
        settings = load_settings(cls, prog=script, argv=argv)
        if isinstance(settings, StartSettings) and settings.request_file is not None:
            content = invocation.files.get(str(settings.request_file))
            assert content is not None, f"{invocation.where}: nothing mounted at the request file"
            copy = scratch / "request.yaml"
            copy.write_text(content)
            settings.model_copy(update={"request_file": copy}).start_request()
    return settings
