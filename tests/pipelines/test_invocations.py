"""The shipped pipelines call the steps the way the steps' own CLI accepts, and say the same
things about outputs, retries, images and pod security (no cluster needed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from dispatch_k8s.core.rules.errors import BadInput
from dispatch_k8s.core.shell.settings import TrainJobSettings
from dispatch_k8s.steps.start_settings import StartSettings
from tests.support import cli, render
from tests.support.environment import host_env
from tests.support.render import ARGO_OUTPUTS, SAMPLE_NAMESPACE, TEKTON_RESULTS, Invocation
from tests.support.shipped import default_image, manifest_files

pytestmark = pytest.mark.pipelines
INVOCATIONS: Final = [
    *render.argo_invocations(),
    *(step for task in render.tekton_tasks().values() for step in render.tekton_invocations(task)),
    *render.job_invocations(),
]
STEP_INVOCATIONS: Final = [i for i in INVOCATIONS if i.argv[0] not in cli.HELPERS]
# Changed since read; transient (docs/pipelines.md: Exit codes and retries).
RETRIED: Final = frozenset({3, 75})


def ids(invocations: list[Invocation]) -> list[str]:
    return [invocation.where for invocation in invocations]


@pytest.mark.parametrize("invocation", STEP_INVOCATIONS, ids=ids(STEP_INVOCATIONS))
def test_each_step_invocation_parses_with_the_steps_own_cli(
    invocation: Invocation, tmp_path: Path
) -> None:
    settings = cli.parse(invocation, tmp_path)
    if isinstance(settings, TrainJobSettings | StartSettings):
        # Every step acts in the namespace its pod runs in: the service account's Role is there.
        assert settings.namespace == SAMPLE_NAMESPACE


def test_every_step_is_shipped_for_argo_tekton_and_jobs() -> None:
    scripts = cli.step_scripts()
    for engine, invocations in (
        ("argo", render.argo_invocations()),
        (
            "tekton",
            [s for t in render.tekton_tasks().values() for s in render.tekton_invocations(t)],
        ),
        ("jobs", render.job_invocations()),
    ):
        shipped = {i.argv[0] for i in invocations if i.argv[0] not in cli.HELPERS}
        assert shipped == scripts, f"{engine}: steps missing or unknown: {shipped ^ scripts}"


def run_helper(helper: Invocation, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", helper.argv[2], *args],
        env=host_env(helper.env),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_helper_containers_do_what_the_pipelines_rely_on(tmp_path: Path) -> None:
    helpers = {i.where: i for i in INVOCATIONS if i.argv[0] in cli.HELPERS}
    assert len(helpers) == 1, list(helpers)  # Tekton `write-request`
    writer = helpers["tekton/tasks.yaml: Task dispatch-start, step write-request"]
    written = run_helper(writer, str(tmp_path / "request.yaml"))
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "request.yaml").read_text() == render.SAMPLE_REQUEST


@pytest.mark.parametrize("invocation", STEP_INVOCATIONS[:3], ids=ids(STEP_INVOCATIONS[:3]))
def test_an_unknown_flag_fails_the_parse(invocation: Invocation, tmp_path: Path) -> None:
    wrong = Invocation(
        where=invocation.where, argv=[*invocation.argv, "--no-such-flag=1"], env=invocation.env
    )
    with pytest.raises(BadInput, match="no-such-flag"):
        cli.parse(wrong, tmp_path)


def test_a_misspelt_flag_in_a_template_is_caught(tmp_path: Path) -> None:
    """The check reads the template itself: a renamed flag there fails it."""
    text = (render.ARGO / "steps.yaml").read_text()
    assert "--workload-resource-version=" in text
    mangled = yaml.safe_load(text.replace("--workload-resource-version=", "--workload-rv="))
    approve = next(t for t in mangled["spec"]["templates"] if t["name"] == "approve")
    with pytest.raises(BadInput, match="workload-rv"):
        cli.parse(render.argo_invocation(render.ARGO / "steps.yaml", approve), tmp_path)


def test_a_bad_sample_request_is_refused(tmp_path: Path) -> None:
    """The start request file the pipelines hand over is validated, not just its flag."""
    start = next(i for i in STEP_INVOCATIONS if i.argv[0] == "dispatch-start")
    path = next(iter(start.files))
    broken = Invocation(
        where=start.where,
        argv=start.argv,
        env=start.env,
        files={path: start.files[path].replace("submission: 7", "submission: 1000000")},
    )
    with pytest.raises(BadInput, match="submission"):
        cli.parse(broken, tmp_path)


def step_templates() -> list[tuple[str, dict[str, Any]]]:
    """The Argo templates of one step each (the gates loop is tested on its own)."""
    found = []
    for _, _, template in render.argo_templates():
        command = template.get("container", {}).get("command") or []
        if command and command[0].startswith("dispatch-") and command[0] != render.GATES:
            found.append((command[0], template))
    return found


def test_the_gates_loop_is_never_retried_by_the_engines() -> None:
    """It goes round on what passes itself; its exit is for a person."""
    gates = [t for _, _, t in render.argo_templates() if t.get("name") == "kueue-gates"]
    assert gates
    assert all("retryStrategy" not in t for t in gates)
    task = render.tekton_tasks()["dispatch-kueue-gates"]
    assert [s["command"] for s in task["spec"]["steps"]] == [[render.GATES]]


def test_argo_outputs_are_the_result_files_with_empty_defaults() -> None:
    for script, template in step_templates():
        assert f"--outputs-dir={ARGO_OUTPUTS}" in template["container"]["args"], script
        outputs = template["outputs"]["parameters"]
        assert outputs, f"{script}: no outputs"
        for parameter in outputs:
            source = parameter["valueFrom"]
            assert source["path"] == f"{ARGO_OUTPUTS}/{parameter['name']}", script
            # A failed step writes no files; without a default Argo fails the node anyway.
            assert source["default"] == "", f"{script}: {parameter['name']} needs default ''"


def test_tekton_results_are_the_result_files() -> None:
    for name, task in render.tekton_tasks().items():
        if any(s["command"] == [render.GATES] for s in task["spec"]["steps"]):
            continue  # the gates loop keeps its steps' outputs to itself, in /tmp
        steps = [s for s in task["spec"]["steps"] if s["command"][0].startswith("dispatch-")]
        assert len(steps) == 1, name
        assert f"--outputs-dir={TEKTON_RESULTS}" in steps[0]["args"], name
        assert task["spec"]["results"], f"{name}: no results"


def retried_codes(expression: str) -> set[int]:
    return {int(code) for code in re.findall(r"\d+", expression)}


def test_argo_retries_3_and_75_and_never_6() -> None:
    for script, template in step_templates():
        strategy = template["retryStrategy"]
        codes = retried_codes(strategy["expression"])
        assert 6 not in codes, f"{script} retries a refusal"
        assert codes <= RETRIED, f"{script} retries {codes}"
        assert "exitCode" in strategy["expression"]
        assert int(strategy["limit"]) > 0
        # approve's 3 means the reservation moved on: only a new admit helps (kueue.yaml).
        assert codes == ({75} if script == "dispatch-approve" else RETRIED), script


def test_tekton_never_retries_because_it_cannot_look_at_exit_codes() -> None:
    for name, pipeline in render.tekton_pipelines().items():
        for task in pipeline["spec"]["tasks"]:
            assert "retries" not in task, f"{name}/{task['name']}: would retry exit 6 too"


def test_jobs_rerun_only_on_3_and_75() -> None:
    for path in sorted(render.JOBS.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document["kind"] not in ("Job", "CronJob"):
                continue
            spec = document["spec"]
            spec = spec["jobTemplate"]["spec"] if document["kind"] == "CronJob" else spec
            fail_job = spec["podFailurePolicy"]["rules"][0]
            assert fail_job["action"] == "FailJob"
            codes = fail_job["onExitCodes"]
            assert codes["operator"] == "NotIn", path.name
            assert set(codes["values"]) == set(RETRIED), path.name
            assert spec["backoffLimit"] > 0
            assert spec["template"]["spec"]["restartPolicy"] == "Never"


def test_every_pod_is_restricted() -> None:
    checked = 0
    for where, pod, containers in render.pod_specs():
        pod = pod or {}
        for container in containers or [{}]:
            context = container.get("securityContext", {})
            merged = {**pod, **context}
            assert merged.get("runAsNonRoot") is True, where
            assert merged.get("seccompProfile") == {"type": "RuntimeDefault"}, where
            if container:
                assert context.get("allowPrivilegeEscalation") is False, where
                assert context.get("readOnlyRootFilesystem") is True, where
                assert context.get("capabilities") == {"drop": ["ALL"]}, where
            checked += 1
    assert checked >= 20


def test_every_image_is_the_tag_build_sh_makes() -> None:
    pattern = re.compile(r"dispatch-k8s:[\w.-]*\w")
    images = {m for path in manifest_files() for m in pattern.findall(path.read_text())}
    assert images == {default_image()}
