"""charts/dispatch-k8s, rendered by the real helm: the checked-in chart is what config/ generates,
`helm lint` finds nothing to warn of, for each choice `helm template` renders exactly the objects
kustomize renders for the same choice (from config/'s overlays or a user's overlay on
config/kueue) but for the chart's standard labels, and everything the chart puts in a namespace,
and every reference to it, follows the release's namespace."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from release import chart, dist
from tests.cluster import kube
from tests.support import tools
from tests.support.policies import HARNESS_CONTROLLERS
from tests.support.shipped import REPO, default_image

CONFIG_NAMESPACE: Final = "dispatch-system"  # the controller's namespace in config/
# Values -> the overlay rendering the same choice.
# kueue.mode auto is policy mode wherever the MutatingAdmissionPolicy goes in.
CHECK: Final = "kueue.mode=check"
OVERLAYS: Final = {
    "defaults": ([], "kueue-policy"),
    "check": ([CHECK], "kueue"),
    "plain": (["kueue.enabled=false"], "plain"),
    "guard-only": (["policies=guard-only"], "policies-guard-only"),
    "all-on-1.33": (["policies=all", "--kube-version=1.33.0"], "kueue-policy"),
    "all-check-on-1.33": ([CHECK, "policies=all", "--kube-version=1.33.0"], "kueue"),
    "auto-on-1.33": (["--kube-version=1.33.0"], "policies-guard-only"),
    "auto-on-1.36": (["--kube-version=1.36.0"], "kueue-policy"),
    "policy-on-1.36": (["kueue.mode=policy", "--kube-version=1.36.0"], "kueue-policy"),
    "check-on-1.36": ([CHECK, "--kube-version=1.36.0"], "kueue"),
    "monitoring": ([CHECK, "monitoring.enabled=true"], "monitoring"),
    "argo": ([CHECK, "argo.enabled=true"], "argo"),
    "tekton": ([CHECK, "tekton.enabled=true"], "tekton"),
}
# The other values, all at once, and a user's overlay on config/kueue that says the same.
NAMES: Final = [
    "image.repository=registry.example/team/dispatch",
    "image.tag=9.9",
    "kueue.admissionCheck=team-check",
]
DIGEST: Final = "sha256:" + "0123456789abcdef" * 4
VALUES: Final = [
    CHECK,
    *NAMES,
    f"image.digest={DIGEST}",
    "image.pullPolicy=Always",
    "imagePullSecrets[0].name=registry",
    "nodeSelector.pool=system",
    "tolerations[0].key=dedicated",
    "tolerations[0].operator=Exists",
    "affinity=null",
    "topologySpreadConstraints[0].maxSkew=1",
    "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
    "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
    "priorityClassName=system-cluster-critical",
    "podAnnotations.team=platform",
    "podLabels.cost-center=ml",
    "controller.extraArgs={--lease-seconds=30}",
    "controller.extraEnv[0].name=TZ",
    "controller.extraEnv[0].value=UTC",
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
images:
  - name: dispatch-k8s
    newName: registry.example/team/dispatch
    newTag: '9.9'
    digest: '{digest}'
replicas: [{{name: dispatch-admission-controller, count: 3}}]
patches:
  - target: {{kind: AdmissionCheck, name: dispatch-admission}}
    patch: '[{{"op": "replace", "path": "/metadata/name", "value": "team-check"}}]'
  - target: {{kind: Deployment, name: dispatch-admission-controller}}
    patch: |
      - op: add
        path: /spec/template/metadata/annotations
        value: {{team: platform}}
      - op: add
        path: /spec/template/metadata/labels/cost-center
        value: ml
      - op: remove
        path: /spec/template/spec/affinity
      - op: add
        path: /spec/template/spec/nodeSelector
        value: {{pool: system}}
      - op: add
        path: /spec/template/spec/tolerations
        value: [{{key: dedicated, operator: Exists}}]
      - op: add
        path: /spec/template/spec/topologySpreadConstraints
        value:
          - maxSkew: 1
            topologyKey: topology.kubernetes.io/zone
            whenUnsatisfiable: ScheduleAnyway
      - op: add
        path: /spec/template/spec/priorityClassName
        value: system-cluster-critical
      - op: add
        path: /spec/template/spec/imagePullSecrets
        value: [{{name: registry}}]
      - op: add
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: Always
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {{name: TZ, value: UTC}}
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --namespaces=team-a,team-b
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --on-refusal=retry
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --log-level=debug
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --lease-seconds=30
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
    assert chart.checked_in() == chart.files(kustomize=tools.kustomize()), (
        "charts/dispatch-k8s drifted: run scripts/render-dist"
    )


def split(values: list[str]) -> tuple[list[str], list[str]]:
    """`values` as (the --set values, helm's own flags such as --kube-version)."""
    return [v for v in values if not v.startswith("--")], [v for v in values if v.startswith("--")]


def as_config(values: list[str], helm_home: Path) -> dict[kube.Key, Any]:
    """`helm template` in config/'s layout (chart.CONFIG_LAYOUT), as config/ renders objects
    (chart.as_config)."""
    sets, args = split(values)
    text = tools.template([*chart.CONFIG_LAYOUT, *sets], home=helm_home, args=args)
    return tools.as_config(text)


# Each choice apart: in lint mode helm logs a template's `fail` instead of failing.
@pytest.mark.parametrize(
    "values", [*(vs for vs, _ in OVERLAYS.values()), VALUES], ids=[*OVERLAYS, "other-values"]
)
def test_helm_lint_is_clean(values: list[str], helm_home: Path) -> None:
    sets, args = split(values)
    sets = [arg for value in sets for arg in ("--set", value)]
    out = tools.run_helm("lint", "--strict", str(chart.CHART), *sets, *args, home=helm_home)
    assert "0 chart(s) failed" in out
    # The one INFO line left: the project has no icon to show.
    assert [line for line in out.splitlines() if line.startswith("[")] == [
        "[INFO] Chart.yaml: icon is recommended"
    ]


@pytest.mark.parametrize(("values", "overlay"), OVERLAYS.values(), ids=OVERLAYS.keys())
def test_each_choice_renders_what_its_overlay_renders(
    values: list[str], overlay: str, helm_home: Path
) -> None:
    assert as_config(values, helm_home) == chart.by_key(
        dist.build(dist.CONFIG / overlay, kustomize=tools.kustomize())
    )


def test_the_other_values_render_what_a_users_overlay_renders(
    helm_home: Path, tmp_path: Path
) -> None:
    # kustomize takes a base by a relative path only.
    base = os.path.relpath(dist.CONFIG / "kueue", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(USER_OVERLAY.format(base=base, digest=DIGEST))
    expected = chart.by_key(dist.build(tmp_path, kustomize=tools.kustomize()))
    rendered = as_config(VALUES, helm_home)
    assert rendered == expected
    assert rendered != as_config([], helm_home)


def test_everything_namespaced_and_every_reference_follows_the_release_namespace(
    helm_home: Path,
) -> None:
    text = tools.template(
        ["argo.enabled=true", "tekton.enabled=true"], home=helm_home, namespace="team-a"
    )
    objects = list(chart.by_key(text).values())
    namespaced = [o for o in objects if "namespace" in o["metadata"]]
    assert len(namespaced) > 10
    assert {o["metadata"]["namespace"] for o in namespaced} == {"team-a"}
    subjects = [s for o in objects for s in o.get("subjects", []) if "namespace" in s]
    refs = [o["spec"]["paramRef"] for o in objects if "paramRef" in o.get("spec", {})]
    params = [p for p in refs if "namespace" in p]
    # A paramRef with no namespace reads the request's own namespace (the ledger's records).
    assert all("selector" in p for p in refs if p not in params)
    assert subjects
    assert params
    assert {s["namespace"] for s in subjects} | {p["namespace"] for p in params} == {"team-a"}
    # helm install --create-namespace makes the release's namespace; the chart does not.
    assert "Namespace" not in {o["kind"] for o in objects}
    assert CONFIG_NAMESPACE not in text


def test_a_namespace_value_moves_the_controller_and_steps_namespace_the_steps(
    helm_home: Path,
) -> None:
    values = ["namespace=dispatch", "steps.namespace=team-a", "createNamespace=true"]
    objects = chart.by_key(tools.template(values, home=helm_home, namespace="ops", with_tests=True))
    by_namespace: dict[str, set[str]] = {}
    for _, kind, ns, _ in objects:
        by_namespace.setdefault(ns, set()).add(kind)
    assert by_namespace["dispatch"] >= {"Deployment", "ConfigMap", "PodDisruptionBudget"}
    assert by_namespace["team-a"] >= {"ServiceAccount", "Role", "RoleBinding", "Pod"}
    assert set(by_namespace) == {"", "dispatch", "team-a"}
    (namespace,) = [o for k, o in objects.items() if k[1] == "Namespace"]
    assert namespace["metadata"]["name"] == "dispatch"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_every_object_has_the_standard_labels_and_the_name_overrides_apply(
    helm_home: Path,
) -> None:
    values = ["argo.enabled=true", "tekton.enabled=true", "monitoring.enabled=true"]
    objects = chart.by_key(tools.template(values, home=helm_home))
    standard = tools.release_labels("dispatch-k8s")
    for k, o in objects.items():
        labels = o["metadata"]["labels"]
        # The Service keeps the name label its ServiceMonitor selects it by.
        own = {"app.kubernetes.io/name"} if k[1] == "Service" else set()
        assert {n: v for n, v in labels.items() if n in standard and n not in own} == {
            n: v for n, v in standard.items() if n not in own
        }, k
    overridden = chart.by_key(
        tools.template(
            ["nameOverride=dispatch", "fullnameOverride=ml-dispatch"],
            home=helm_home,
            with_tests=True,
        )
    )
    names = {o["metadata"]["labels"]["app.kubernetes.io/name"] for o in overridden.values()}
    assert names == {"dispatch"}
    (test_pod,) = [o for o in overridden.values() if tools.is_hook(o)]
    assert test_pod["metadata"]["name"] == "ml-dispatch-test"


@pytest.mark.parametrize(
    ("values", "budget"),
    [
        ([], True),
        (["controller.replicas=1"], False),
        (["controller.replicas=1", "controller.podDisruptionBudget=true"], True),
        (["controller.replicas=3", "controller.podDisruptionBudget=false"], False),
    ],
    ids=["two-replicas", "one-replica", "one-replica-asked", "three-replicas-refused"],
)
def test_the_disruption_budget_is_there_only_at_more_than_one_replica_or_when_asked(
    values: list[str], budget: bool, helm_home: Path
) -> None:
    kinds = {kind for _, kind, _, _ in chart.by_key(tools.template(values, home=helm_home))}
    assert ("PodDisruptionBudget" in kinds) is budget


def test_policy_mode_without_the_mutating_policy_fails_the_install(helm_home: Path) -> None:
    with pytest.raises(RuntimeError, match=r"kueue\.mode=policy needs the MutatingAdmissionPolicy"):
        tools.template(["kueue.mode=policy", "policies=guard-only"], home=helm_home)


def test_the_helm_test_pod_runs_a_dry_run_audit_as_the_steps(helm_home: Path) -> None:
    values = ["steps.namespace=team-a"]
    objects = chart.by_key(tools.template(values, home=helm_home, with_tests=True))
    (pod,) = [o for o in objects.values() if tools.is_hook(o)]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["metadata"]["namespace"] == "team-a"
    (account,) = [k for k in objects if k[1] == "ServiceAccount" and k[2] == "team-a"]
    assert pod["spec"]["serviceAccountName"] == account[3]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == [
        "dispatch-audit",
        "--all",
        "--dry-run=client",
        "--namespace=team-a",
    ]
    assert container["image"] == f"{default_image()}"


def test_the_notes_say_what_was_installed_and_the_next_command(helm_home: Path) -> None:
    def notes(*args: str) -> str:
        out = tools.run_helm(
            "install",
            "rel",
            str(chart.CHART),
            "--dry-run=client",
            "-n",
            "team-a",
            *args,
            home=helm_home,
        )
        return out[out.index("NOTES:") :]

    policy = notes()
    assert "Kueue's policy mode" in policy
    assert "admissioncheck" not in policy
    kueue = notes("--set", CHECK)
    assert "release rel in team-a" in kueue
    assert "the AdmissionCheck dispatch-admission" in kueue
    assert "helm test rel -n team-a" in kueue
    assert "Every policy" in kueue
    assert "kubectl dispatch doctor looks for the controller" in kueue
    layout = [arg for value in chart.CONFIG_LAYOUT for arg in ("--set", value)]
    assert "kubectl dispatch doctor -n default --check dispatch-admission" in notes(*layout)
    old = notes("--set", "kueue.enabled=false", "--set", "policies=guard-only")
    assert "Plain mode" in old
    assert "guard-only policies" in old


def renamed(value: Any, names: dict[str, str]) -> Any:
    """`value` with every string that is a key of `names` replaced by its value."""
    if isinstance(value, dict):
        return {k: renamed(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v, names) for v in value]
    return names.get(value, value) if isinstance(value, str) else value


def test_the_argo_and_tekton_steps_default_to_the_image_and_check_chosen(helm_home: Path) -> None:
    steps = ["argo.enabled=true", "tekton.enabled=true"]
    defaults = chart.by_key(tools.template(steps, home=helm_home))
    names = {
        default_image(): "registry.example/team/dispatch:9.9",
        "dispatch-admission": "team-check",
    }
    expected = {kube.key(o): o for o in renamed(list(defaults.values()), names)}
    assert expected != defaults
    assert chart.by_key(tools.template([*steps, *NAMES], home=helm_home)) == expected


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        (["policies=none"], "policies"),
        (["controller.replica=1"], "replica"),
        (["controllerIdentities.trainers={someone}"], "trainers"),
        (["controllerIdentities.trainer={}"], "trainer/0.: minLength"),
        (["monitoring.enabled=true", "kueue.enabled=false"], "monitoring.enabled needs kueue"),
        (["image.digest=latest"], "digest"),
        (["image.pullPolicy=Sometimes"], "pullPolicy"),
        (["namespace=Team A"], "namespace"),
        (["controller.podDisruptionBudget=maybe"], "podDisruptionBudget"),
    ],
    ids=[
        "unknown-policies",
        "misspelt-value",
        "misspelt-controller",
        "empty-username",
        "monitoring-without-controller",
        "digest-not-a-digest",
        "unknown-pull-policy",
        "namespace-not-a-label",
        "unknown-budget",
    ],
)
def test_values_that_cannot_install_are_refused(
    values: list[str], refusal: str, helm_home: Path
) -> None:
    with pytest.raises(RuntimeError, match=refusal):
        tools.template(values, home=helm_home)


def test_the_local_clusters_values_name_its_controllers(helm_home: Path) -> None:
    values = REPO / "tests" / "up" / "controllers-values.yaml"
    identities = yaml.safe_load(values.read_text())["controllerIdentities"]
    assert identities == {key: [user] for key, user in HARNESS_CONTROLLERS.items()}
    out = tools.run_helm("lint", "--strict", str(chart.CHART), "-f", str(values), home=helm_home)
    assert "0 chart(s) failed" in out
