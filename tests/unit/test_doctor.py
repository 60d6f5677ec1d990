"""The preflight's checks (core/rules/doctor.py) on plain dicts: each passes on what is right,
and fails, with its fix, on what is broken that way."""

from __future__ import annotations

import datetime
import json
import shlex
import tomllib
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from dispatch_k8s.core.rules import doctor, wire

REPO: Final = Path(__file__).resolve().parents[2]
JOBSET: Final = next(c for c in doctor.COMPONENTS if c.key == "jobset")
KUEUE: Final = next(c for c in doctor.COMPONENTS if c.key == "kueue")
TRAINER: Final = next(c for c in doctor.COMPONENTS if c.key == "trainer")


def deployment(namespace: str, name: str, *, account: str, image: str = "x:v1") -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {
            "template": {"spec": {"serviceAccountName": account, "containers": [{"image": image}]}}
        },
    }


def shipped_controllers() -> dict[str, Any]:
    path = REPO / "pipelines" / "policies" / "controllers.yaml"
    (found,) = [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "ConfigMap"]
    return dict(found)


def test_admission_apis_say_which_policy_files_apply() -> None:
    both = doctor.check_admission_apis(["validatingadmissionpolicies", "mutatingadmissionpolicies"])
    assert (both.status, "config/kueue-policy" in both.found) == (doctor.PASS, True)
    guard_only = doctor.check_admission_apis(["validatingadmissionpolicies"])
    assert (guard_only.status, "raise-on-open.yaml does not apply" in guard_only.found) == (
        doctor.PASS,
        True,
    )
    assert "config/kueue-policy" not in guard_only.found + (guard_only.fix or "")
    assert "check mode (config/kueue)" in (guard_only.fix or "")
    assert doctor.check_admission_apis([]).status == doctor.FAIL


def test_a_component_missing_fails_kueue_missing_warns() -> None:
    assert doctor.check_component(TRAINER, crd_found=False, deployments=[]).status == doctor.FAIL
    assert doctor.check_component(KUEUE, crd_found=False, deployments=[]).status == doctor.WARN


def test_a_component_found_is_judged_by_its_release() -> None:
    tested = f"registry.k8s.io/jobset/jobset:{JOBSET.tested}"
    right = deployment("jobset-system", "jobset-controller-manager", account="a", image=tested)
    assert doctor.check_component(JOBSET, crd_found=True, deployments=[right]).status == doctor.PASS
    old = deployment("jobset-system", "jobset-controller-manager", account="a", image="j:v0.9.0")
    judged = doctor.check_component(JOBSET, crd_found=True, deployments=[old])
    assert (judged.status, "v0.9.0" in judged.found) == (doctor.WARN, True)
    unseen = doctor.check_component(JOBSET, crd_found=True, deployments=[])
    assert unseen.status == doctor.WARN


@pytest.mark.parametrize("release", [TRAINER.tested, *TRAINER.also_tested])
def test_each_tested_release_of_trainer_passes(release: str) -> None:
    image = f"ghcr.io/kubeflow/trainer/trainer-controller-manager:{release}"
    found = deployment(
        "kubeflow-system", "kubeflow-trainer-controller-manager", account="a", image=image
    )
    judged = doctor.check_component(TRAINER, crd_found=True, deployments=[found])
    assert (judged.status, judged.found.startswith(f"Kubeflow Trainer {release} ")) == (
        doctor.PASS,
        True,
    )


def test_deployments_are_found_by_their_upstream_name_with_a_prefix() -> None:
    found = doctor.find_deployments(
        JOBSET,
        [
            deployment("kubeflow-system", "jobset-controller-manager", account="a"),
            deployment("team", "my-jobset-controller-manager", account="b"),
            deployment("team", "jobset-controller-manager-copy", account="c"),
        ],
    )
    assert [d["metadata"]["namespace"] for d in found] == ["kubeflow-system", "team"]


@pytest.mark.parametrize(
    "namespace", ["jobset-system", "kubeflow-system"], ids=["jobset-release", "trainer-manager"]
)
def test_the_shipped_identities_trust_jobset_in_both_upstream_layouts(namespace: str) -> None:
    """JobSet's own release installs it in jobset-system; Trainer's manifests/overlays/manager
    in kubeflow-system. The shipped defaults must trust both, or nothing trains."""
    running = deployment(
        namespace, "jobset-controller-manager", account="jobset-controller-manager"
    )
    judged = doctor.check_identity(JOBSET, shipped_controllers(), [running])
    assert judged is not None
    assert judged.status == doctor.PASS, judged.found


def test_an_identity_the_guard_does_not_trust_fails_with_the_patch_that_fixes_it() -> None:
    config_map = {
        "data": {"jobset": "system:serviceaccount:jobset-system:jobset-controller-manager\n"}
    }
    running = deployment("ml-platform", "jobset-controller-manager", account="jobset")
    judged = doctor.check_identity(JOBSET, config_map, [running])
    assert judged is not None
    assert judged.status == doctor.FAIL
    assert "system:serviceaccount:ml-platform:jobset" in judged.found
    words = shlex.split(judged.fix)
    assert words[:7] == [
        "kubectl",
        "-n",
        "dispatch-system",
        "patch",
        "configmap",
        "dispatch-k8s-controllers",
        "--type",
    ]
    patched = {"data": {**config_map["data"], **json.loads(words[-1])["data"]}}
    fixed = doctor.check_identity(JOBSET, patched, [running])
    assert fixed is not None
    assert fixed.status == doctor.PASS


def test_no_controllers_config_map_fails_and_kueue_untrusted_only_warns() -> None:
    running = deployment("jobset-system", "jobset-controller-manager", account="a")
    missing = doctor.check_identity(JOBSET, None, [running])
    assert missing is not None
    assert missing.status == doctor.FAIL
    kueue = deployment("other", "kueue-controller-manager", account="k")
    judged = doctor.check_identity(KUEUE, shipped_controllers(), [kueue])
    assert judged is not None
    assert judged.status == doctor.WARN
    assert doctor.check_identity(JOBSET, shipped_controllers(), []) is None


def test_policies_installed_name_what_is_missing() -> None:
    every = list(doctor.VALIDATING_POLICIES)
    ok = doctor.check_policies_installed(every, every, [], [], mutating_served=False)
    assert ok.status == doctor.PASS
    no_map = doctor.check_policies_installed(every, every, [], [], mutating_served=True)
    assert no_map.status == doctor.FAIL
    assert "MutatingAdmissionPolicy dispatch-k8s-raise-on-open" in no_map.found
    unbound = doctor.check_policies_installed(every, every[1:], [], [], mutating_served=False)
    assert "binding dispatch-k8s-guard-trainjobs" in unbound.found


def test_a_probe_passes_only_when_refused_by_its_rule() -> None:
    refused = "403 Forbidden: ... dispatch-k8s guard create-suspended: a TrainJob ..."
    assert doctor.check_probe("p", "create-suspended", refused, namespace="n").status == "pass"
    assert doctor.check_probe("p", "create-suspended", None, namespace="n").status == "fail"
    other = doctor.check_probe("p", "create-suspended", "403 Forbidden: RBAC", namespace="n")
    assert other.status == doctor.WARN
    webhook = 'admission webhook "vtrainjob.kb.io" denied the request: runtime not found'
    judged = doctor.check_probe("p", "create-suspended", webhook, namespace="n", by_admission=True)
    assert judged.status == doctor.FAIL, "policies run before webhooks: the guard did not act"


def test_the_admission_check_active_and_listed() -> None:
    active = {"status": {"conditions": [{"type": "Active", "status": "True"}]}}
    queue = {
        "metadata": {"name": "cq"},
        "spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": "dispatch-admission"}]}},
    }
    name = "dispatch-admission"
    assert doctor.check_admission_check(None, [], name=name).status == doctor.PASS
    assert doctor.check_admission_check(active, [queue], name=name).status == doctor.PASS
    assert doctor.check_admission_check(active, [], name=name).status == doctor.WARN
    assert doctor.check_admission_check({"status": {}}, [queue], name=name).status == doctor.FAIL


def test_the_controller_ready_and_its_lease_renewed() -> None:
    now = datetime.datetime(2026, 12, 6, 12, 0, tzinfo=datetime.UTC)
    ready = {"spec": {"replicas": 2}, "status": {"readyReplicas": 2}}

    def lease(renewed: datetime.datetime) -> dict[str, Any]:
        spec = {
            "holderIdentity": "pod-a",
            "leaseDurationSeconds": 15,
            "renewTime": renewed.isoformat().replace("+00:00", "Z"),
        }
        return {"spec": spec}

    fresh = doctor.check_controller(ready, lease(now), now=now.timestamp())
    assert (fresh.status, "held by pod-a" in fresh.found) == (doctor.PASS, True)
    stale = now - datetime.timedelta(seconds=60)
    assert doctor.check_controller(ready, lease(stale), now=now.timestamp()).status == "fail"
    assert doctor.check_controller(None, None, now=now.timestamp()).status == doctor.PASS


def binding(namespace: str, name: str) -> dict[str, Any]:
    return {"spec": {"paramRef": {"namespace": namespace, "name": name}}}


def controller(namespace: str, name: str, *, args: list[str], env: list[Any]) -> dict[str, Any]:
    pod = {"containers": [{"name": "controller", "args": args, "env": env}]}
    labels = {doctor.NAME_LABEL: doctor.CONTROLLER}
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"replicas": 2, "template": {"metadata": {"labels": labels}, "spec": pod}},
        "status": {"readyReplicas": 0},
    }


SHIPPED_ENV: Final = [
    {
        "name": "DISPATCH_LEASE_NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    }
]


def test_the_guard_s_parameters_are_found_where_its_bindings_name_them() -> None:
    """An overlay's namespace and namePrefix, or the chart's release namespace, move the
    ConfigMap; the bindings name where it went. With no binding, the shipped place."""
    ledger: dict[str, Any] = {"spec": {"paramRef": {"selector": {}}}}  # it names none
    moved = doctor.parameters_ref([ledger, binding("team-x", "p-dispatch-k8s-controllers")])
    assert (moved.namespace, moved.name) == ("team-x", "p-dispatch-k8s-controllers")
    assert doctor.parameters_ref([ledger]) == doctor.SHIPPED_PARAMETERS
    running = deployment("ml-platform", "jobset-controller-manager", account="jobset")
    judged = doctor.check_identity(JOBSET, {"data": {}}, [running], parameters=moved)
    assert judged is not None
    assert shlex.split(judged.fix)[:6] == [
        "kubectl",
        "-n",
        "team-x",
        "patch",
        "configmap",
        "p-dispatch-k8s-controllers",
    ]
    missing = doctor.check_identity(JOBSET, None, [running], parameters=moved)
    assert missing is not None
    assert "team-x/p-dispatch-k8s-controllers is missing" in missing.found


def test_the_controller_is_found_by_its_pods_label_and_its_lease_as_its_settings_resolve() -> None:
    renamed = controller("team-x", "p-dispatch-admission-controller", args=[], env=SHIPPED_ENV)
    other = deployment("team-x", "dispatch-admission-controller-not", account="a")
    assert doctor.controller_deployments([other, renamed]) == [renamed]
    assert doctor.lease_ref(renamed) == doctor.Ref(
        namespace="team-x", name="dispatch-admission-controller"
    )
    no_env = controller("ops", "c", args=[], env=[])
    assert doctor.lease_ref(no_env) == doctor.Ref(
        namespace="dispatch-system", name="dispatch-admission-controller"
    )
    literal = [{"name": "DISPATCH_LEASE_NAME", "value": "from-env"}, *SHIPPED_ENV]
    flagged = controller("ops", "c", args=["--lease-name", "mine", "--lease-namespace=x"], env=[])
    assert doctor.lease_ref(flagged) == doctor.Ref(namespace="x", name="mine")
    assert doctor.lease_ref(controller("ops", "c", args=[], env=literal)) == doctor.Ref(
        namespace="ops", name="from-env"
    )
    judged = doctor.check_controller(renamed, None, now=0.0)
    assert judged.status == doctor.FAIL
    assert judged.found.startswith("team-x/p-dispatch-admission-controller: 0 of 2")
    assert judged.fix == "kubectl -n team-x logs deployment/p-dispatch-admission-controller"


def test_the_admission_check_is_found_under_a_name_prefix_by_its_controller_name() -> None:
    def check(name: str, controller: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"controllerName": controller}}

    ours, theirs = (
        check("p-dispatch-admission", wire.ADMISSION_CHECK_CONTROLLER),
        check("dispatch-admission", "example.com/other"),
    )
    assert doctor.find_admission_check([theirs, ours], "dispatch-admission") == ours
    assert doctor.find_admission_check([theirs], "dispatch-admission") is None
    judged = doctor.check_admission_check(
        ours, [], name="dispatch-admission", controller=doctor.Ref(namespace="x", name="p-c")
    )
    assert judged.found.startswith("AdmissionCheck p-dispatch-admission is not Active")
    assert judged.fix.startswith("kubectl -n x get deployment p-c ")


def test_policies_installed_under_a_name_prefix_are_found() -> None:
    every = [f"p-{name}" for name in doctor.VALIDATING_POLICIES]
    judged = doctor.check_policies_installed(every, every, [], [], mutating_served=False)
    assert judged.status == doctor.PASS, judged.found


def test_the_steps_access_names_what_is_denied() -> None:
    assert doctor.check_step_access("team", [], account="dispatch-steps").status == doctor.PASS
    denied = doctor.check_step_access(
        "team", [("trainer.kubeflow.org", "trainjobs", "update")], account="dispatch-steps"
    )
    assert denied.status == doctor.FAIL
    assert "update trainjobs.trainer.kubeflow.org" in denied.found


def test_the_steps_access_is_what_the_shipped_rbac_grants() -> None:
    """STEP_ACCESS is the shipped Role's rules, STEP_CLUSTER_ACCESS its ClusterRole's."""
    documents = list(yaml.safe_load_all((REPO / "pipelines" / "rbac" / "steps.yaml").read_text()))

    def granted(kind: str) -> set[tuple[str, str, str]]:
        (role,) = [d for d in documents if d["kind"] == kind]
        return {
            (group, resource, verb)
            for rule in role["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }

    assert set(doctor.STEP_ACCESS) == granted("Role")
    assert set(doctor.STEP_CLUSTER_ACCESS) == granted("ClusterRole")


def test_the_tested_releases_are_the_pinned_ones() -> None:
    pins = tomllib.loads((REPO / "tests" / "cluster" / "versions.toml").read_text())
    assert {c.key: (c.tested, *c.also_tested) for c in doctor.COMPONENTS} == {
        key: (pins[key]["version"], *pins[key].get("alternatives", ()))
        for key in ("trainer", "jobset", "kueue")
    }


def test_only_a_failed_check_fails_the_preflight() -> None:
    passed = doctor.Check(name="a", status=doctor.PASS, found="")
    warned = doctor.Check(name="b", status=doctor.WARN, found="")
    failed = doctor.Check(name="c", status=doctor.FAIL, found="")
    assert doctor.exit_status([passed, warned]) == 0
    assert doctor.exit_status([passed, failed]) == doctor.CHECK_FAILED
