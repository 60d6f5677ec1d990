"""What the engines' webhooks and controllers would check, and a CRD schema cannot: every
reference in the shipped Argo and Tekton manifests points at something that exists.

Neither engine runs here (only their CRDs are installed), so these checks stand in for Argo's
template validation and Tekton's admission webhook.
"""

from __future__ import annotations

import re
from typing import Any, Final

import pytest

from tests.support import render
from tests.support.render import ARGO_REFERENCE, TEKTON_REFERENCE

pytestmark = pytest.mark.pipelines
Template = dict[str, Any]
# Variables Argo provides that the shipped templates use.
ARGO_GLOBALS: Final = frozenset({"workflow.namespace"})


def argo_library() -> dict[tuple[str, str], Template]:
    """(WorkflowTemplate name, template name) -> template, for templateRef."""
    return {
        (document["metadata"]["name"], template["name"]): template
        for _, document, template in render.argo_templates()
        if document["kind"] == "WorkflowTemplate"
    }


def inputs_of(template: Template) -> tuple[set[str], set[str]]:
    """(every input parameter, the required ones: no default)."""
    parameters = template.get("inputs", {}).get("parameters") or []
    names = {p["name"] for p in parameters}
    return names, {p["name"] for p in parameters if "default" not in p and "value" not in p}


def outputs_of(template: Template) -> set[str]:
    return {p["name"] for p in template.get("outputs", {}).get("parameters") or []}


def strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for value in node.values() for s in strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in strings(value)]
    return []


def test_argo_references_resolve() -> None:
    library = argo_library()
    checked = 0
    for path, document, template in render.argo_templates():
        spec = document["spec"].get("workflowSpec", document["spec"])
        local = {t["name"]: t for t in spec["templates"]}
        workflow_parameters = {p["name"] for p in spec.get("arguments", {}).get("parameters", [])}
        declared, _ = inputs_of(template)
        where = f"{path.name}: {template['name']}"
        steps = [step for group in template.get("steps") or [] for step in group]
        step_outputs: dict[str, set[str]] = {}
        for step in steps:
            ref = step.get("templateRef")
            target = (
                library.get((ref["name"], ref["template"])) if ref else local.get(step["template"])
            )
            assert target is not None, f"{where}: step {step['name']} calls nothing shipped"
            given = {p["name"] for p in step.get("arguments", {}).get("parameters") or []}
            known, required = inputs_of(target)
            assert given <= known, f"{where}/{step['name']}: unknown inputs {given - known}"
            assert required <= given, f"{where}/{step['name']}: missing {required - given}"
            step_outputs[step["name"]] = outputs_of(target)
        for text in strings({k: v for k, v in template.items() if k != "name"}):
            for reference in ARGO_REFERENCE.findall(text):
                reference = reference.strip()
                parts = reference.split(".")
                if reference in ARGO_GLOBALS:
                    pass
                elif parts[:2] == ["inputs", "parameters"]:
                    assert parts[2] in declared, f"{where}: undeclared input {reference}"
                elif parts[:2] == ["workflow", "parameters"]:
                    assert parts[2] in workflow_parameters, f"{where}: no workflow {reference}"
                elif parts[0] == "steps":
                    outputs = step_outputs.get(parts[1])
                    assert outputs is not None, f"{where}: no step {parts[1]} for {reference}"
                    if parts[2:4] == ["outputs", "parameters"]:
                        assert parts[4] in outputs, f"{where}: no output {reference}"
                    else:
                        assert parts[2:] == ["exitCode"], f"{where}: {reference}"
                else:
                    raise AssertionError(f"{where}: unexpected reference {reference}")
                checked += 1
    assert checked > 50


def test_tekton_references_resolve() -> None:
    tasks = render.tekton_tasks()
    for name, pipeline in render.tekton_pipelines().items():
        spec = pipeline["spec"]
        parameters = {p["name"] for p in spec.get("params") or []}
        by_name = {task["name"]: task for task in spec["tasks"]}
        for task in spec["tasks"]:
            where = f"Pipeline {name}, task {task['name']}"
            target = tasks.get(task["taskRef"]["name"])
            assert target is not None, f"{where}: no Task {task['taskRef']['name']}"
            given = {p["name"] for p in task.get("params") or []}
            declared = target["spec"].get("params") or []
            known = {p["name"] for p in declared}
            required = {p["name"] for p in declared if "default" not in p}
            assert given <= known, f"{where}: unknown params {given - known}"
            assert required <= given, f"{where}: missing params {required - given}"
            for after in task.get("runAfter") or []:
                assert after in by_name, f"{where}: runAfter {after} is no task"
        for text in strings({"tasks": spec["tasks"], "results": spec.get("results")}):
            for reference in TEKTON_REFERENCE.findall(text):
                parts = reference.split(".")
                if parts[0] == "params":
                    assert parts[1] in parameters, f"Pipeline {name}: no param {reference}"
                    continue
                assert parts[0] == "tasks", f"{name}: {reference}"
                assert parts[2] == "results", f"{name}: {reference}"
                producer = by_name.get(parts[1])
                assert producer is not None, f"Pipeline {name}: no task {parts[1]}"
                results = tasks[producer["taskRef"]["name"]]["spec"]["results"]
                assert parts[3] in {r["name"] for r in results}, f"{name}: no {reference}"


def test_tekton_names_are_valid() -> None:
    # Tekton's webhook refuses parameter and result names outside these patterns.
    name = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]*$")
    for task in render.tekton_tasks().values():
        for item in [*task["spec"]["params"], *task["spec"].get("results", [])]:
            assert name.match(item["name"]), item["name"]
