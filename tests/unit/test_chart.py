"""charts/dispatch-k8s, rendered by the real helm: the checked-in chart is what config/ generates,
`helm lint` finds nothing to warn of, and for each choice `helm template` renders exactly the
objects kustomize renders for the same choice, from config/'s overlays or a user's overlay on
config/kueue."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from tests.cluster import kube
from tests.support import chart, dist
from tests.support.policies import HARNESS_CONTROLLERS
from tests.support.shipped import REPO, default_image

# Values -> the overlay rendering the same choice.
OVERLAYS: Final = {
    "defaults": ([], "kueue"),
    "plain": (["kueue.enabled=false"], "plain"),
    "guard-only": (["policies=guard-only"], "policies-guard-only"),
    "monitoring": (["monitoring.enabled=true"], "monitoring"),
    "argo": (["argo.enabled=true"], "argo"),
    "tekton": (["tekton.enabled=true"], "tekton"),
}
# The other values, all at once, and a user's overlay on config/kueue that says the same.
NAMES: Final = [
    "image.repository=registry.example/team/dispatch",
    "image.tag=9.9",
    "kueue.admissionCheck=team-check",
]
VALUES: Final = [
    *NAMES,
    "controller.replicas=3",
    "controller.namespaces={team-a,team-b}",
    "controller.onRefusal=retry",
    "controller.logLevel=debug",
    "controller.resources.requests.cpu=200m",
    "controller.resources.limits.memory=1Gi",
    "controllerIdentities.trainer={system:serviceaccount:team:trainer,team-trainer}",
]
USER_OVERLAY: Final = """\
resources: [{base}]
images: [{{name: dispatch-k8s, newName: registry.example/team/dispatch, newTag: '9.9'}}]
replicas: [{{name: dispatch-admission-controller, count: 3}}]
patches:
  - target: {{kind: AdmissionCheck, name: dispatch-admission}}
    patch: '[{{"op": "replace", "path": "/metadata/name", "value": "team-check"}}]'
  - target: {{kind: Deployment, name: dispatch-admission-controller}}
    patch: |
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --namespaces=team-a,team-b
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --on-refusal=retry
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --log-level=debug
      - op: replace
        path: /spec/template/spec/containers/0/resources/requests/cpu
        value: 200m
      - op: replace
        path: /spec/template/spec/containers/0/resources/limits/memory
        value: 1Gi
  - target: {{kind: ConfigMap, name: dispatch-k8s-controllers}}
    patch: |
      - op: replace
        path: /data/trainer
        value: "system:serviceaccount:team:trainer\\nteam-trainer\\n"
"""


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


def test_the_checked_in_chart_is_what_config_generates() -> None:
    assert chart.checked_in() == chart.files(), (
        "charts/dispatch-k8s drifted: run scripts/render-dist"
    )


# Each choice apart: in lint mode helm logs a template's `fail` instead of failing.
@pytest.mark.parametrize(
    "values", [*(vs for vs, _ in OVERLAYS.values()), VALUES], ids=[*OVERLAYS, "other-values"]
)
def test_helm_lint_is_clean(values: list[str], helm_home: Path) -> None:
    sets = [arg for value in values for arg in ("--set", value)]
    out = chart.run_helm("lint", "--strict", str(chart.CHART), *sets, home=helm_home)
    assert "0 chart(s) failed" in out
    # The one INFO line left: the project has no icon to show.
    assert [line for line in out.splitlines() if line.startswith("[")] == [
        "[INFO] Chart.yaml: icon is recommended"
    ]


@pytest.mark.parametrize(("values", "overlay"), OVERLAYS.values(), ids=OVERLAYS.keys())
def test_each_choice_renders_what_its_overlay_renders(
    values: list[str], overlay: str, helm_home: Path
) -> None:
    rendered = chart.by_key(chart.template(values, home=helm_home))
    assert rendered == chart.by_key(dist.build(dist.CONFIG / overlay))


def test_the_other_values_render_what_a_users_overlay_renders(
    helm_home: Path, tmp_path: Path
) -> None:
    # kustomize takes a base by a relative path only.
    base = os.path.relpath(dist.CONFIG / "kueue", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(USER_OVERLAY.format(base=base))
    expected = chart.by_key(dist.build(tmp_path))
    rendered = chart.by_key(chart.template(VALUES, home=helm_home))
    assert rendered == expected
    assert rendered != chart.by_key(chart.template([], home=helm_home))


def renamed(value: Any, names: dict[str, str]) -> Any:
    """`value` with every string that is a key of `names` replaced by its value."""
    if isinstance(value, dict):
        return {k: renamed(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v, names) for v in value]
    return names.get(value, value) if isinstance(value, str) else value


def test_the_argo_and_tekton_steps_default_to_the_image_and_check_chosen(helm_home: Path) -> None:
    steps = ["argo.enabled=true", "tekton.enabled=true"]
    defaults = chart.by_key(chart.template(steps, home=helm_home))
    names = {
        default_image(): "registry.example/team/dispatch:9.9",
        "dispatch-admission": "team-check",
    }
    expected = {kube.key(o): o for o in renamed(list(defaults.values()), names)}
    assert expected != defaults
    assert chart.by_key(chart.template([*steps, *NAMES], home=helm_home)) == expected


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        (["policies=none"], "policies"),
        (["controller.replica=1"], "replica"),
        (["controllerIdentities.trainers={someone}"], "trainers"),
        (["controllerIdentities.trainer={}"], "trainer/0.: minLength"),
        (["monitoring.enabled=true", "kueue.enabled=false"], "monitoring.enabled needs kueue"),
    ],
    ids=[
        "unknown-policies",
        "misspelt-value",
        "misspelt-controller",
        "empty-username",
        "monitoring-without-controller",
    ],
)
def test_values_that_cannot_install_are_refused(
    values: list[str], refusal: str, helm_home: Path
) -> None:
    with pytest.raises(RuntimeError, match=refusal):
        chart.template(values, home=helm_home)


def test_the_local_clusters_values_name_its_controllers(helm_home: Path) -> None:
    values = REPO / "tests" / "up" / "controllers-values.yaml"
    identities = yaml.safe_load(values.read_text())["controllerIdentities"]
    assert identities == {key: [user] for key, user in HARNESS_CONTROLLERS.items()}
    out = chart.run_helm("lint", "--strict", str(chart.CHART), "-f", str(values), home=helm_home)
    assert "0 chart(s) failed" in out
