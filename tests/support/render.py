"""Render the shipped pipelines with sample parameters into the commands their pods would run.

Argo `{{...}}` and Tekton `$(...)` references are substituted the way each engine does for the
variables these manifests use; any other reference fails the render, so a typo cannot hide.
Kubernetes Jobs need no rendering beyond their Downward API env and ConfigMap files.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tests.support.shipped import PIPELINES, Manifest, documents

ARGO: Final = PIPELINES / "argo"
TEKTON: Final = PIPELINES / "tekton"
JOBS: Final = PIPELINES / "jobs"
SAMPLE_NAMESPACE: Final = "team-a"
TEKTON_RESULTS: Final = "/tekton/results"
ARGO_OUTPUTS: Final = "/tmp/outputs"
# A start request as users write one (docs/cli.md: The start request), in YAML.
SAMPLE_REQUEST: Final = """\
job_id: train-42
generation: 3
submission: 7
attempt: 2
image: registry.example/trainer:1
command: [python, -c, "print('a, b')"]
args: [--lr, "0.1"]
runtime_name: dispatch-torch-distributed
queue: training
"""
# Sample values for every parameter the templates take without a default.
SAMPLES: Final = {
    "request": SAMPLE_REQUEST,
    "trainjob": "train-42-9e00a155",
    "workload": "trainjob-train-42-9e00a155-1a2b3",
    "workload-resource-version": "12345",
    "admission": "1",
    "step": "admit",
    "exit-code": "6",
}
# The Kueue gates loop (bin/dispatch-kueue-gates) runs the steps itself: its invocations are
# the step calls in its text, its shell variables filled from its flags and, for what admit
# wrote, sample values.
GATES: Final = "dispatch-kueue-gates"
GATES_SCRIPT: Final = PIPELINES.parent / "bin" / GATES
GATES_FLAGS: Final = {
    "namespace": "namespace",
    "name": "name",
    "check": "check",
    "wait-seconds": "wait_seconds",
    "pause-seconds": "pause_seconds",
}
GATES_SAMPLES: Final = {
    "outputs": "/tmp/dispatch-kueue-gates",
    "workload": SAMPLES["workload"],
    "version": SAMPLES["workload-resource-version"],
    "admission": SAMPLES["admission"],
}
SHELL_VARIABLE: Final = re.compile(r'"?\$([a-z_]+)"?')
ARGO_REFERENCE: Final = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
TEKTON_REFERENCE: Final = re.compile(r"\$\(([^()]+)\)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Invocation:
    """One container as a pod would run it: argv, env, and files mounted into it."""

    where: str
    argv: list[str]
    env: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)  # container path -> content


def substitute(text: str, pattern: re.Pattern[str], resolve: Callable[[str], str]) -> str:
    """Replace every reference; `resolve` raises for one it does not know."""
    return pattern.sub(lambda match: resolve(match.group(1).strip()), text)


def _parameter_values(declared: list[Manifest], where: str) -> dict[str, str]:
    values = {}
    for parameter in declared:
        name = parameter["name"]
        if name in SAMPLES:
            values[name] = SAMPLES[name]
        elif "default" in parameter or "value" in parameter:
            values[name] = str(parameter.get("value", parameter.get("default")))
        else:
            raise AssertionError(f"{where}: no sample for required parameter {name!r}")
    return values


def _env(container: Manifest, render: Callable[[str], str]) -> dict[str, str]:
    env = {}
    for variable in container.get("env") or []:
        if "value" in variable:
            env[variable["name"]] = render(str(variable["value"]))
        elif variable["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[variable["name"]] = SAMPLE_NAMESPACE
        else:
            raise AssertionError(f"env {variable['name']}: unexpected source {variable}")
    return env


def _gates_argvs(argv: list[str], where: str) -> list[list[str]]:
    """The step calls dispatch-kueue-gates makes when run with `argv`."""
    variables = dict(GATES_SAMPLES)
    for word in argv[1:]:
        flag, equals, value = word.removeprefix("--").partition("=")
        assert equals, f"{where}: {GATES} takes --flag=value, not {word!r}"
        assert flag in GATES_FLAGS, f"{where}: {GATES} has no flag {word!r}"
        variables[GATES_FLAGS[flag]] = value

    def sample(match: re.Match[str]) -> str:
        assert match.group(1) in variables, f"{where}: {GATES} sets no ${match.group(1)}"
        return variables[match.group(1)]

    return [
        shlex.split(SHELL_VARIABLE.sub(sample, line))
        for line in GATES_SCRIPT.read_text().replace("\\\n", " ").splitlines()
        if line.strip().startswith("dispatch-")
    ]


def expanded(invocation: Invocation) -> list[Invocation]:
    """The invocation, or for the gates loop the step calls it makes."""
    if invocation.argv[0] != GATES:
        return [invocation]
    return [
        Invocation(
            where=f"{invocation.where}, {argv[0]}",
            argv=argv,
            env=invocation.env,
            files=invocation.files,
        )
        for argv in _gates_argvs(invocation.argv, invocation.where)
    ]


def _argv(container: Manifest, render: Callable[[str], str], where: str) -> list[str]:
    command = container.get("command")
    assert command, f"{where}: no command: an image ENTRYPOINT would be looked up instead"
    return [render(str(word)) for word in [*command, *(container.get("args") or [])]]


# --- Argo ---------------------------------------------------------------------------------


def argo_templates() -> Iterator[tuple[Path, Manifest, Manifest]]:
    """(file, WorkflowTemplate or CronWorkflow, template) for every template shipped."""
    for path in sorted(ARGO.glob("*.yaml")):
        for document in documents(path):
            spec = document["spec"]
            spec = spec.get("workflowSpec", spec)  # a CronWorkflow wraps a workflow spec
            for template in spec["templates"]:
                yield path, document, template


def argo_invocation(path: Path, template: Manifest) -> Invocation:
    """The container of one Argo template, rendered with the sample parameters."""
    where = f"{path.relative_to(PIPELINES)}: template {template['name']}"
    inputs = template.get("inputs", {})
    values = _parameter_values(inputs.get("parameters") or [], where)

    def resolve(reference: str) -> str:
        if reference == "workflow.namespace":
            return SAMPLE_NAMESPACE
        kind, _, name = reference.rpartition(".")
        if kind == "inputs.parameters" and name in values:
            return values[name]
        raise AssertionError(f"{where}: cannot resolve {{{{{reference}}}}}")

    def render(text: str) -> str:
        return substitute(text, ARGO_REFERENCE, resolve)

    container = template["container"]
    files = {
        artifact["path"]: render(artifact["raw"]["data"])
        for artifact in inputs.get("artifacts") or []
        if "raw" in artifact
    }
    return Invocation(
        where=where,
        argv=_argv(container, render, where),
        env=_env(container, render),
        files=files,
    )


def argo_invocations() -> list[Invocation]:
    """Every container template shipped for Argo, rendered."""
    return [
        step_call
        for path, _, template in argo_templates()
        if "container" in template
        for step_call in expanded(argo_invocation(path, template))
    ]


# --- Tekton -------------------------------------------------------------------------------


def tekton_tasks() -> dict[str, Manifest]:
    """The shipped Tasks, by name."""
    return {
        task["metadata"]["name"]: task
        for task in documents(TEKTON / "tasks.yaml")
        if task["kind"] == "Task"
    }


def tekton_pipelines() -> dict[str, Manifest]:
    """The shipped Pipelines, by name."""
    return {
        pipeline["metadata"]["name"]: pipeline
        for pipeline in documents(TEKTON / "pipelines.yaml")
        if pipeline["kind"] == "Pipeline"
    }


def tekton_invocations(task: Manifest) -> list[Invocation]:
    """Every step of one Task, rendered with the sample parameters."""
    spec = task["spec"]
    values = _parameter_values(spec.get("params") or [], task["metadata"]["name"])
    results = {result["name"] for result in spec.get("results") or []}
    found = []
    written: dict[str, str] = {}  # files earlier steps wrote to shared volumes
    for step in spec["steps"]:
        where = f"tekton/tasks.yaml: Task {task['metadata']['name']}, step {step['name']}"

        def resolve(reference: str, where: str = where) -> str:
            if reference == "context.taskRun.namespace":
                return SAMPLE_NAMESPACE
            parts = reference.split(".")
            if parts[0] == "params" and len(parts) == 2 and parts[1] in values:
                return values[parts[1]]
            if parts[0] == "results" and parts[2:] == ["path"] and parts[1] in results:
                return f"{TEKTON_RESULTS}/{parts[1]}"
            raise AssertionError(f"{where}: cannot resolve $({reference})")

        def render(text: str, resolve: Callable[[str], str] = resolve) -> str:
            return substitute(text, TEKTON_REFERENCE, resolve)

        env = _env(step, render)
        argv = _argv(step, render, where)
        found += expanded(Invocation(where=where, argv=argv, env=env, files=dict(written)))
        if argv[:2] == ["python3", "-c"] and "REQUEST" in env:
            # The write-request step: later steps see the request at the path it writes
            # (test_invocations runs its program to check it does).
            written[argv[-1]] = env["REQUEST"]
    return found


# --- Kubernetes Jobs ----------------------------------------------------------------------


def _pod_spec(document: Manifest) -> Manifest | None:
    if document["kind"] == "Job":
        spec: Manifest = document["spec"]["template"]["spec"]
        return spec
    if document["kind"] == "CronJob":
        spec = document["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        return spec
    return None


def job_invocations() -> list[Invocation]:
    """The step container of every shipped Job and CronJob, with its ConfigMap files."""
    found = []
    config_maps = {
        d["metadata"]["name"]: d
        for path in sorted(JOBS.glob("*.yaml"))
        for d in documents(path)
        if d["kind"] == "ConfigMap"
    }
    for path in sorted(JOBS.glob("*.yaml")):
        for document in documents(path):
            pod = _pod_spec(document)
            if pod is None:
                continue
            where = f"{path.relative_to(PIPELINES)}: {document['kind']}"
            volumes = {volume["name"]: volume for volume in pod.get("volumes") or []}
            for container in pod["containers"]:
                files: dict[str, str] = {}
                for mount in container.get("volumeMounts") or []:
                    source = volumes[mount["name"]].get("configMap")
                    if source:
                        data = config_maps[source["name"]]["data"]
                        files |= {f"{mount['mountPath']}/{key}": v for key, v in data.items()}
                found.append(
                    Invocation(
                        where=where,
                        argv=_argv(container, str, where),
                        env=_env(container, str),
                        files=files,
                    )
                )
    return found


def pod_specs() -> Iterator[tuple[str, Mapping[str, Any] | None, list[Manifest]]]:
    """(where, pod-level securityContext, containers) of everything shipped that runs a pod.

    Tekton has no pod-level context in a Task (it belongs to the run), so its steps carry
    the whole context through the Task's stepTemplate.
    """
    for path, _, template in argo_templates():
        for kind in ("container", "resource"):
            if kind in template:
                containers = [template["container"]] if kind == "container" else []
                where = f"{path.relative_to(PIPELINES)}: template {template['name']}"
                yield where, template.get("securityContext"), containers
    for name, task in tekton_tasks().items():
        template = task["spec"].get("stepTemplate", {})
        steps = [{**template, **step} for step in task["spec"]["steps"]]
        yield f"tekton/tasks.yaml: Task {name}", None, steps
    for path in sorted(JOBS.glob("*.yaml")):
        for document in documents(path):
            pod = _pod_spec(document)
            if pod is not None:
                where = f"{path.relative_to(PIPELINES)}: {document['kind']}"
                yield where, pod.get("securityContext"), pod["containers"]
