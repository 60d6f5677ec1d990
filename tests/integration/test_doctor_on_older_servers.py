"""dispatch-doctor on API servers that serve fewer admission policies than v1.36: a cluster of
Kubernetes 1.30 to 1.35 (ValidatingAdmissionPolicy, no MutatingAdmissionPolicy) and one before
1.30 (neither), each a control plane of its own with those kinds turned off
(tests/cluster/harness.py, `served_policies`). Each check the older server makes fail is shown
failing with its row, its fix and the exit code docs/cli.md gives, and, where the fix is an
install, passing once the fix is applied as written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from kubernetes import client, config

from dispatch_k8s.core.rules import doctor
from release import dist
from tests.cluster import kube
from tests.cluster.harness import ControlPlane, ServedPolicies
from tests.cluster.wait import wait_until
from tests.support import tools
from tests.support.cluster_under_test import EXISTING_CLUSTER_ENV
from tests.support.diagnosed import diagnosed, jobset_deployment
from tests.support.shipped import Manifest

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

NAMESPACE: Final = "doctor-older"
# Where JobSet's own release runs it (the plane's layout has it): the shipped parameters
# trust it there.
JOBSET_NAMESPACE: Final = "jobset-system"


@contextlib.contextmanager
def _older_plane(run_dir: Path, served: ServedPolicies) -> Iterator[client.ApiClient]:
    """A plane of its own whose API server serves `served`, with a namespace to diagnose and
    JobSet's Deployment as its own release has it (replicas 0: what the doctor reads)."""
    if os.environ.get(EXISTING_CLUSTER_ENV):
        pytest.skip("turns admission APIs off on a local control plane of its own")
    with ControlPlane(run_dir, served_policies=served) as plane:
        api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(plane.kubeconfig)
        )
        with contextlib.closing(api):
            namespace = client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE))
            client.CoreV1Api(api).create_namespace(namespace)
            kube.apply(api, jobset_deployment(JOBSET_NAMESPACE), namespace=JOBSET_NAMESPACE)
            yield api


def _apply(api: client.ApiClient, objects: list[Manifest]) -> None:
    for o in objects:
        kube.apply(api, o, namespace=None)


def test_before_1_36_the_doctor_says_to_leave_raise_on_open_out_and_the_guard_only_bundle_passes(
    tmp_path: Path,
) -> None:
    with _older_plane(tmp_path / "plane", "validating") as api:
        kubeconfig = tmp_path / "plane" / "kubeconfig"
        code, rows = diagnosed(kubeconfig, NAMESPACE)
        assert code == doctor.CHECK_FAILED
        row = rows["admission-apis"]
        assert row["status"] == "pass", row
        assert "not MutatingAdmissionPolicy (Kubernetes 1.30-1.35)" in row["found"], row
        assert row["fix"] == (
            "install every policy but raise-on-open.yaml (config/policies-guard-only), "
            "and for Kueue its check mode (config/kueue): policy mode needs the raise on open"
        )
        # Nothing of the install yet: every ValidatingAdmissionPolicy is missing, and the
        # raise on open, which this server cannot hold, is not asked for.
        row = rows["policies"]
        assert row["status"] == "fail", row
        for policy in doctor.VALIDATING_POLICIES:
            assert f"ValidatingAdmissionPolicy {policy}" in row["found"], row
        assert "raise-on-open" not in row["found"], row
        assert row["fix"] == (
            "kubectl apply -f pipelines/policies/ (before 1.36: all but raise-on-open.yaml)"
        )
        row = rows["identity/jobset"]
        assert row["status"] == "fail", row
        assert row["found"].startswith("ConfigMap dispatch-system/dispatch-k8s-controllers is "), (
            row
        )
        assert row["fix"] == (
            "kubectl apply -f pipelines/controller/00-namespace.yaml "
            "-f pipelines/policies/controllers.yaml"
        )

        # The bundle of every policy cannot be installed here: the raise on open's kind is not
        # served, which is what the row says.
        plain = dist.objects((dist.DIST / "install.yaml").read_text())
        (raise_on_open, *_) = [o for o in plain if o["kind"] == "MutatingAdmissionPolicy"]
        with pytest.raises(LookupError, match="serves no MutatingAdmissionPolicy"):
            kube.apply(api, raise_on_open, namespace=None)

        # As the fix says: config/policies-guard-only, built as a user builds it.
        guard_only = dist.build(dist.CONFIG / "policies-guard-only", kustomize=tools.kustomize())
        _apply(api, dist.objects(guard_only))
        probes = ("probe/guard", "probe/ledger", "probe/path-guard", "probe/pods")

        # The API server acts on a new policy within seconds, not at once (its informer): a
        # doctor run at once saw a probe let through (seen once in CI).
        def acting() -> tuple[int, dict[str, dict[str, str]]] | None:
            code, fixed = diagnosed(kubeconfig, NAMESPACE)
            return (code, fixed) if all(fixed[p]["status"] == "pass" for p in probes) else None

        code, fixed = wait_until(acting, what="the guard-only policies to act", timeout=60)
        assert fixed["admission-apis"] == rows["admission-apis"]
        assert fixed["policies"]["status"] == "pass", fixed["policies"]
        assert fixed["identity/jobset"]["status"] == "pass", fixed["identity/jobset"]
        # Still failing, rightly: no node runs the controller's pods, so nothing keeps the
        # AdmissionCheck Active; the bundle gives the steps' RBAC to `default`, not here.
        failed = {name for name, row in fixed.items() if row["status"] == "fail"}
        assert failed == {"controller", "admission-check", "steps-access"}, fixed
        assert code == doctor.CHECK_FAILED


def test_before_1_30_no_policy_applies_and_the_doctor_fails_with_the_audit_as_its_fix(
    tmp_path: Path,
) -> None:
    with _older_plane(tmp_path / "plane", "none") as api:
        kubeconfig = tmp_path / "plane" / "kubeconfig"
        code, rows = diagnosed(kubeconfig, NAMESPACE)
        assert code == doctor.CHECK_FAILED
        row = rows["admission-apis"]
        assert row["status"] == "fail", row
        assert "serves no ValidatingAdmissionPolicy (Kubernetes before 1.30)" in row["found"], row
        assert row["fix"] == (
            "upgrade to Kubernetes 1.30 or later, or run dispatch-audit (its CronJob) and the "
            "admission controller's auditor"
        )
        # No policy can be installed, so none is looked for or probed.
        assert not [name for name in rows if name == "policies" or name.startswith("probe/")]
        policies = client.AdmissionregistrationV1Api(api)
        with pytest.raises(client.ApiException) as refused:
            policies.list_validating_admission_policy()
        assert refused.value.status == 404

        # Trainer gone (the plane is this test's own): its row fails with the install to make.
        (trainer,) = [c for c in doctor.COMPONENTS if c.key == "trainer"]
        extensions = client.ApiextensionsV1Api(api)
        extensions.delete_custom_resource_definition(trainer.crd)
        named = f"metadata.name={trainer.crd}"
        wait_until(
            lambda: (
                not extensions.list_custom_resource_definition(field_selector=named).items or None
            ),
            what=f"CRD {trainer.crd} deleted",
            timeout=60,
        )
        code, rows = diagnosed(kubeconfig, NAMESPACE)
        assert code == doctor.CHECK_FAILED
        row = rows["trainer"]
        assert (row["status"], row["found"]) == (
            "fail",
            f"Kubeflow Trainer is not installed (no CRD {trainer.crd})",
        ), row
        assert row["fix"] == "install Kubeflow Trainer v2.3.0", row
