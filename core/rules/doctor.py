"""The preflight's checks (`dispatch-doctor`), each a pure judgement of what was read.

Every check is one row: what was looked at, whether it passes, what was found, and the exact
step that fixes it. Nothing here reads the cluster; the step reads, these judge.
"""

from __future__ import annotations

import datetime
import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from dispatch_k8s.core.rules import shapes, wire

Status = Literal["pass", "warn", "fail"]
PASS: Final = "pass"
WARN: Final = "warn"
FAIL: Final = "fail"

CONTROLLERS_CONFIG_MAP: Final = "dispatch-k8s-controllers"
CONTROLLERS_NAMESPACE: Final = "dispatch-system"
# The admission controller: its Deployment's name as shipped, the app.kubernetes.io/name label
# every bundle and the chart give its pods (an overlay's namePrefix and the chart's release
# leave labels alone), and its Lease's name unless --lease-name says another.
CONTROLLER: Final = "dispatch-admission-controller"
NAME_LABEL: Final = "app.kubernetes.io/name"
LEASE_NAME_FLAG: Final = "--lease-name"
LEASE_NAMESPACE_FLAG: Final = "--lease-namespace"
LEASE_ENV: Final = {
    "DISPATCH_LEASE_NAME": LEASE_NAME_FLAG,
    "DISPATCH_LEASE_NAMESPACE": LEASE_NAMESPACE_FLAG,
}
STEPS_SERVICE_ACCOUNT: Final = "dispatch-steps"
ADMISSION_GROUP_VERSION: Final = "admissionregistration.k8s.io/v1"
CHECK_FAILED: Final = 8  # the preflight's own exit code: a check failed (docs/cli.md)


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One row of the preflight: what, whether it passes, what was found, and the fix."""

    name: str
    status: Status
    found: str
    fix: str = ""

    def as_record(self) -> dict[str, str]:
        """The row as printed by -o json and -o yaml."""
        return {"check": self.name, "status": self.status, "found": self.found, "fix": self.fix}


@dataclass(frozen=True, slots=True, kw_only=True)
class Ref:
    """A namespaced object's place: where an install put it."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


SHIPPED_PARAMETERS: Final = Ref(namespace=CONTROLLERS_NAMESPACE, name=CONTROLLERS_CONFIG_MAP)


@dataclass(frozen=True, slots=True, kw_only=True)
class Component:
    """An upstream controller the identity's path goes through."""

    key: str  # its entry in the dispatch-k8s-controllers ConfigMap
    title: str
    crd: str  # the CustomResourceDefinition it serves, which tells it is installed
    deployment: str  # the name its upstream install gives its Deployment
    tested: str  # the release the project is tested with (tests/cluster/versions.toml)
    also_tested: tuple[str, ...] = ()  # the other releases tested there (its alternatives)
    required: bool  # plain mode needs it; Kueue only Kueue mode


COMPONENTS: Final = (
    Component(
        key="trainer",
        title="Kubeflow Trainer",
        crd=f"trainjobs.{wire.TRAINER_GROUP}",
        deployment="kubeflow-trainer-controller-manager",
        tested="v2.3.0",
        also_tested=("v2.2.1",),
        required=True,
    ),
    Component(
        key="jobset",
        title="JobSet",
        crd=f"jobsets.{wire.JOBSET_GROUP}",
        deployment="jobset-controller-manager",
        tested="v0.12.0",
        required=True,
    ),
    Component(
        key="kueue",
        title="Kueue",
        crd=f"workloads.{wire.KUEUE_GROUP}",
        deployment="kueue-controller-manager",
        tested="v0.19.2",
        required=False,
    ),
)

# The policies each install holds (pipelines/policies/), by kind; raise-on-open only where the
# API server serves MutatingAdmissionPolicy v1 (Kubernetes 1.36 and later).
VALIDATING_POLICIES: Final = (
    "dispatch-k8s-guard-trainjobs",
    "dispatch-k8s-guard-ledger",
    "dispatch-k8s-ledger-trainjobs",
    "dispatch-k8s-guard-jobsets",
    "dispatch-k8s-guard-jobs",
    "dispatch-k8s-guard-pods",
    "dispatch-k8s-guard-snapshots",
)
MUTATING_POLICIES: Final = ("dispatch-k8s-raise-on-open",)

# What the steps' ServiceAccount must be allowed (pipelines/rbac/steps.yaml; a unit test keeps
# the two equal): (group, resource, verb), in the namespace but the last, cluster-wide.
STEP_ACCESS: Final = (
    (wire.TRAINER_GROUP, "trainjobs", "get"),
    (wire.TRAINER_GROUP, "trainjobs", "list"),
    (wire.TRAINER_GROUP, "trainjobs", "create"),
    (wire.TRAINER_GROUP, "trainjobs", "update"),
    (wire.TRAINER_GROUP, "trainingruntimes", "get"),
    (wire.JOBSET_GROUP, "jobsets", "get"),
    (wire.JOBSET_GROUP, "jobsets", "list"),
    (wire.KUEUE_GROUP, "workloads", "get"),
    (wire.KUEUE_GROUP, "workloads", "list"),
    (wire.KUEUE_GROUP, "workloads", "watch"),
    (wire.KUEUE_GROUP, "workloads/status", "patch"),
    ("batch", "jobs", "list"),
    ("", "pods", "list"),
    ("", "configmaps", "get"),
    ("", "configmaps", "create"),
    ("", "events", "create"),
    ("", "events", "list"),
)
STEP_CLUSTER_ACCESS: Final = ((wire.TRAINER_GROUP, "clustertrainingruntimes", "get"),)


def check_admission_apis(served: Iterable[str]) -> Check:
    """Which admission policies the API server runs, and so which policy files apply."""
    resources = set(served)
    validating = "validatingadmissionpolicies" in resources
    mutating = "mutatingadmissionpolicies" in resources
    if validating and mutating:
        return Check(
            name="admission-apis",
            status=PASS,
            found=f"{ADMISSION_GROUP_VERSION} serves ValidatingAdmissionPolicy and "
            "MutatingAdmissionPolicy: every file of pipelines/policies/ applies, and Kueue's "
            "policy mode: install config/kueue-policy (dist/install-kueue-policy.yaml), or "
            "config/kueue (check mode) to gate each admission with the AdmissionCheck",
        )
    if validating:
        return Check(
            name="admission-apis",
            status=PASS,
            found=f"{ADMISSION_GROUP_VERSION} serves ValidatingAdmissionPolicy, not "
            "MutatingAdmissionPolicy (Kubernetes 1.30-1.35): the guard refuses an opening "
            "without a raise instead of raising it; raise-on-open.yaml does not apply",
            fix="install every policy but raise-on-open.yaml (config/policies-guard-only), "
            "and for Kueue its check mode (config/kueue): policy mode needs the raise on open",
        )
    return Check(
        name="admission-apis",
        status=FAIL,
        found=f"{ADMISSION_GROUP_VERSION} serves no ValidatingAdmissionPolicy (Kubernetes "
        "before 1.30): no policy applies, only the audit detects a repeated R",
        fix="upgrade to Kubernetes 1.30 or later, or run dispatch-audit (its CronJob) and "
        "the admission controller's auditor",
    )


def deployment_version(deployment: Mapping[str, Any]) -> str:
    """A Deployment's release: its app.kubernetes.io/version label, else its image's tag."""
    labels = shapes.mapping(shapes.mapping(deployment.get("metadata")).get("labels"))
    label = labels.get("app.kubernetes.io/version")
    if isinstance(label, str) and label:
        return label
    for container in _containers(deployment):
        image = str(container.get("image", ""))
        name = image.split("@", 1)[0].rsplit("/", 1)[-1]
        if ":" in name:
            return name.rsplit(":", 1)[1]
    return "unknown"


def deployment_identity(deployment: Mapping[str, Any]) -> str:
    """The user a Deployment's pods act as: its ServiceAccount's name in the API server."""
    meta = shapes.mapping(deployment.get("metadata"))
    pod = shapes.at(deployment, "spec", "template", "spec")
    account = pod.get("serviceAccountName") or pod.get("serviceAccount") or "default"
    return f"system:serviceaccount:{meta.get('namespace', '')}:{account}"


def find_deployments(
    component: Component, deployments: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The Deployments of a component, in any namespace.

    Found by the name its upstream install gives it (a kustomize namePrefix kept).
    """
    return [
        dict(d)
        for d in deployments
        if str(shapes.mapping(d.get("metadata")).get("name", "")).endswith(component.deployment)
    ]


def check_component(
    component: Component, *, crd_found: bool, deployments: Sequence[Mapping[str, Any]]
) -> Check:
    """Whether a component is installed, and its release against the tested one."""
    name = component.key
    if not crd_found:
        return Check(
            name=name,
            status=FAIL if component.required else WARN,
            found=f"{component.title} is not installed (no CRD {component.crd})",
            fix=f"install {component.title} {component.tested}"
            + ("" if component.required else " for Kueue mode; plain mode does without it"),
        )
    if not deployments:
        return Check(
            name=name,
            status=WARN,
            found=f"{component.title}'s CRDs are installed, but no Deployment named "
            f"*{component.deployment} was found: its release and identity cannot be checked",
            fix=f"check that {component.title} runs, and under which ServiceAccount",
        )
    seen = sorted({deployment_version(d) for d in deployments})
    where = ", ".join(_where(d) for d in deployments)
    tested = (component.tested, *component.also_tested)
    if len(seen) != 1 or seen[0] not in tested:
        return Check(
            name=name,
            status=WARN,
            found=f"{component.title} {', '.join(seen)} ({where}); tested with "
            f"{' and '.join(tested)}",
            fix=f"run {component.title} {component.tested}, or check this release yourself",
        )
    return Check(name=name, status=PASS, found=f"{component.title} {seen[0]} ({where})")


def trusted(config_map: Mapping[str, Any] | None, key: str) -> list[str]:
    """The identities the path guard trusts for one controller (one a line)."""
    data = shapes.mapping(shapes.mapping(config_map).get("data"))
    return [line.strip() for line in str(data.get(key, "")).splitlines() if line.strip()]


def parameters_ref(bindings: Iterable[Mapping[str, Any]]) -> Ref:
    """Where the path guard reads whom it trusts: the ConfigMap its bindings name.

    Their paramRef follows an overlay's namespace and namePrefix and the chart's release
    namespace; the shipped place when no binding names one (the first, by namespace and name,
    if several do).
    """
    named = sorted(
        (str(ref.get("namespace")), str(ref.get("name")))
        for binding in bindings
        if (ref := shapes.at(binding, "spec", "paramRef")).get("namespace")
        and str(ref.get("name", "")).endswith(CONTROLLERS_CONFIG_MAP)
    )
    if not named:
        return SHIPPED_PARAMETERS
    namespace, name = named[0]
    return Ref(namespace=namespace, name=name)


def check_identity(
    component: Component,
    config_map: Mapping[str, Any] | None,
    deployments: Sequence[Mapping[str, Any]],
    *,
    parameters: Ref = SHIPPED_PARAMETERS,
) -> Check | None:
    """Whether the path guard trusts the identity the component actually runs as.

    `config_map` is the one at `parameters`, None when it is missing. None when there is
    nothing to compare (no Deployment found).
    """
    if not deployments:
        return None
    name = f"identity/{component.key}"
    if config_map is None:
        return Check(
            name=name,
            status=FAIL,
            found=f"ConfigMap {parameters} is missing: the path guard refuses every edit it "
            "matches, the controllers' own included",
            fix="kubectl apply -f pipelines/controller/00-namespace.yaml "
            "-f pipelines/policies/controllers.yaml"
            if parameters == SHIPPED_PARAMETERS
            else f"apply your install again: it makes ConfigMap {parameters}, which the path "
            "guard's bindings name",
        )
    listed = trusted(config_map, component.key)
    actual = sorted({deployment_identity(d) for d in deployments})
    missing = [identity for identity in actual if identity not in listed]
    if not missing:
        return Check(
            name=name,
            status=PASS,
            found=f"{component.title} runs as {', '.join(actual)}, which the path guard trusts",
        )
    if component.key == "kueue":  # listed for the record: no rule of the path guard trusts Kueue
        status: Status = WARN
    else:
        status = FAIL
    patch = {"data": {component.key: "\n".join([*listed, *missing]) + "\n"}}
    return Check(
        name=name,
        status=status,
        found=f"{component.title} runs as {', '.join(missing)}, which "
        f"{parameters} does not list under {component.key} "
        f"({', '.join(listed) or 'nothing'}): the path guard refuses its writes",
        fix=f"kubectl -n {parameters.namespace} patch configmap {parameters.name} "
        f"--type merge -p {shlex.quote(json.dumps(patch))}",
    )


def check_policies_installed(
    validating: Iterable[str],
    validating_bindings: Iterable[str],
    mutating: Iterable[str],
    mutating_bindings: Iterable[str],
    *,
    mutating_served: bool,
) -> Check:
    """Every policy of pipelines/policies/ that applies here is installed with its binding."""
    expected = [("ValidatingAdmissionPolicy", p, set(validating)) for p in VALIDATING_POLICIES]
    expected += [("binding", p, set(validating_bindings)) for p in VALIDATING_POLICIES]
    if mutating_served:
        expected += [("MutatingAdmissionPolicy", p, set(mutating)) for p in MUTATING_POLICIES]
        expected += [("binding", p, set(mutating_bindings)) for p in MUTATING_POLICIES]
    missing = [
        f"{what} {name}"
        for what, name, installed in expected
        if not any(i.endswith(name) for i in installed)  # an overlay's namePrefix kept
    ]
    if not missing:
        return Check(name="policies", status=PASS, found="every policy and binding is installed")
    return Check(
        name="policies",
        status=FAIL,
        found=f"missing: {', '.join(missing)}",
        fix="kubectl apply -f pipelines/policies/ (before 1.36: all but raise-on-open.yaml)",
    )


def check_probe(
    name: str, rule: str, refusal: str | None, *, namespace: str, by_admission: bool = False
) -> Check:
    """A policy's server-side dry run: refused with its rule means it acts in `namespace`.

    `refusal` is the API server's message, None when the dry run was accepted; `by_admission`
    tells a refusal by another admission check (a webhook) from one by RBAC or validation.
    Policies run before webhooks, so another check's refusal means the policy did not act.
    """
    expected = f"dispatch-k8s guard {rule}"
    if refusal is not None and expected in refusal:
        return Check(name=name, status=PASS, found=f"acts in {namespace}: refused with {rule}")
    if refusal is None or by_admission:
        seen = (
            "was accepted" if refusal is None else f"was refused only by another check ({refusal})"
        )
        return Check(
            name=name,
            status=FAIL,
            found=f"a dry run that {rule} refuses {seen} in {namespace}: the policy is not "
            "installed or not bound there",
            fix="kubectl apply -f pipelines/policies/; check the bindings' matchResources",
        )
    return Check(
        name=name,
        status=WARN,
        found=f"the dry run in {namespace} was refused, but not by {rule}: {refusal}",
        fix="run dispatch-doctor as a user who may create these objects, or check the refusal",
    )


def find_admission_check(checks: Iterable[Mapping[str, Any]], name: str) -> dict[str, Any] | None:
    """This project's AdmissionCheck `name`, or under an overlay's namePrefix.

    Only a check whose controllerName is this project's is one; None when there is none.
    """
    ours = [
        dict(c)
        for c in checks
        if shapes.at(c, "spec").get("controllerName") == wire.ADMISSION_CHECK_CONTROLLER
        and str(shapes.mapping(c.get("metadata")).get("name", "")).endswith(name)
    ]
    named = [c for c in ours if c["metadata"]["name"] == name]
    found = named or sorted(ours, key=lambda c: str(c["metadata"]["name"]))
    return found[0] if found else None


def check_admission_check(
    check: Mapping[str, Any] | None,
    cluster_queues: Iterable[Mapping[str, Any]],
    *,
    name: str,
    controller: Ref | None = None,
) -> Check:
    """The AdmissionCheck: present, Active, and which ClusterQueues list it.

    `controller` is the Deployment that keeps it Active, where one was found.
    """
    if check is None:
        return Check(
            name="admission-check",
            status=PASS,
            found=f"no AdmissionCheck {name}: plain mode, or Kueue without the dispatch check",
        )
    name = str(shapes.mapping(check.get("metadata")).get("name") or name)
    conditions = shapes.mappings(shapes.at(check, "status").get("conditions"))
    active = any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)
    queues = sorted(
        str(shapes.mapping(q.get("metadata")).get("name"))
        for q in cluster_queues
        if name in _listed_checks(q)
    )
    if not active:
        where = controller or Ref(namespace=CONTROLLERS_NAMESPACE, name=CONTROLLER)
        return Check(
            name="admission-check",
            status=FAIL,
            found=f"AdmissionCheck {name} is not Active: the ClusterQueues that list it "
            f"({', '.join(queues) or 'none'}) admit nothing",
            fix=f"kubectl -n {where.namespace} get deployment {where.name} "
            "(it keeps the check Active)",
        )
    if not queues:
        return Check(
            name="admission-check",
            status=WARN,
            found=f"AdmissionCheck {name} is Active, but no ClusterQueue lists it",
            fix="list it in the ClusterQueues' admissionChecksStrategy "
            "(pipelines/kueue/example-queues.yaml)",
        )
    return Check(
        name="admission-check",
        status=PASS,
        found=f"AdmissionCheck {name} is Active; listed by {', '.join(queues)}",
    )


def controller_deployments(deployments: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The admission controller's Deployments, in any namespace and under any name.

    Found by the label every bundle and the chart give their pods.
    """
    return [
        dict(d)
        for d in deployments
        if shapes.at(d, "spec", "template", "metadata", "labels").get(NAME_LABEL) == CONTROLLER
    ]


def deployment_ref(deployment: Mapping[str, Any]) -> Ref:
    """Where a Deployment is."""
    meta = shapes.mapping(deployment.get("metadata"))
    return Ref(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")))


def lease_ref(deployment: Mapping[str, Any]) -> Ref:
    """The Lease the controller's replicas contend for, as their settings resolve it.

    The container's --lease-name and --lease-namespace args, else its DISPATCH_LEASE_NAME and
    DISPATCH_LEASE_NAMESPACE env (the pod's own namespace by the Downward API, as shipped),
    else the controller's defaults.
    """
    pod_namespace = deployment_ref(deployment).namespace
    found = {LEASE_NAMESPACE_FLAG: CONTROLLERS_NAMESPACE, LEASE_NAME_FLAG: CONTROLLER}
    for container in _containers(deployment):
        for env in shapes.mappings(container.get("env")):
            flag = LEASE_ENV.get(str(env.get("name")))
            field = shapes.at(env, "valueFrom", "fieldRef").get("fieldPath")
            value = env.get("value")
            if flag and isinstance(value, str) and value:
                found[flag] = value
            elif flag == LEASE_NAMESPACE_FLAG and field == "metadata.namespace":
                found[flag] = pod_namespace
        args = [str(a) for a in container.get("args") or []]
        for index, arg in enumerate(args):  # the command line over the environment
            flag, equals, value = arg.partition("=")
            if flag in found:
                found[flag] = value if equals else "".join(args[index + 1 : index + 2])
    return Ref(namespace=found[LEASE_NAMESPACE_FLAG], name=found[LEASE_NAME_FLAG])


def check_controller(
    deployment: Mapping[str, Any] | None, lease: Mapping[str, Any] | None, *, now: float
) -> Check:
    """The admission controller's Deployment ready, and its Lease held and renewed."""
    if deployment is None:
        return Check(
            name="controller",
            status=PASS,
            found="the admission controller is not installed (plain mode, or the steps gate Kueue)",
        )
    status = shapes.mapping(deployment.get("status"))
    ready, wanted = (
        int(status.get("readyReplicas") or 0),
        int(shapes.mapping(deployment.get("spec")).get("replicas") or 0),
    )
    spec = shapes.mapping(shapes.mapping(lease).get("spec"))
    holder = str(spec.get("holderIdentity") or "")
    renewed = _seconds(spec.get("renewTime"))
    duration = float(spec.get("leaseDurationSeconds") or 0)
    held = bool(holder) and renewed is not None and renewed + duration >= now
    where = deployment_ref(deployment)
    found = f"{where}: {ready} of {wanted} replicas ready; Lease " + (
        f"held by {holder}" if held else "not held"
    )
    if ready == 0 or not held:
        return Check(
            name="controller",
            status=FAIL,
            found=found,
            fix=f"kubectl -n {where.namespace} logs deployment/{where.name}",
        )
    return Check(name="controller", status=PASS if ready == wanted else WARN, found=found)


def check_step_access(
    namespace: str, denied: Sequence[tuple[str, str, str]], *, account: str
) -> Check:
    """What the steps' ServiceAccount may do in `namespace`.

    `denied` are the (group, resource, verb) of STEP_ACCESS and STEP_CLUSTER_ACCESS refused.
    """
    user = f"system:serviceaccount:{namespace}:{account}"
    if not denied:
        return Check(name="steps-access", status=PASS, found=f"{user} may do what the steps do")
    told = ", ".join(
        f"{verb} {resource}" + (f".{group}" if group else "") for group, resource, verb in denied
    )
    return Check(
        name="steps-access",
        status=FAIL,
        found=f"{user} may not: {told}",
        fix=f"kubectl apply -n {namespace} -f pipelines/rbac/steps.yaml (and list {namespace} "
        "in its ClusterRoleBinding)",
    )


def exit_status(checks: Iterable[Check]) -> int:
    """0 when no check failed; else CHECK_FAILED (a warning alone does not fail it)."""
    return CHECK_FAILED if any(c.status == FAIL for c in checks) else 0


def _containers(deployment: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return shapes.mappings(shapes.at(deployment, "spec", "template", "spec").get("containers"))


def _where(deployment: Mapping[str, Any]) -> str:
    meta = shapes.mapping(deployment.get("metadata"))
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _listed_checks(queue: Mapping[str, Any]) -> set[str]:
    spec = shapes.at(queue, "spec")
    listed = spec.get("admissionChecks")
    names = {str(n) for n in listed} if isinstance(listed, list) else set()
    strategy = shapes.at(spec, "admissionChecksStrategy").get("admissionChecks")
    return names | {str(c.get("name")) for c in shapes.mappings(strategy)}


def _seconds(value: Any) -> float | None:
    """An RFC 3339 MicroTime as seconds since the epoch."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
