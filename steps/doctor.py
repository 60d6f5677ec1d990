"""`dispatch-doctor`: the preflight, read-only.

What is installed, as whom it runs, and what is wrong: one row per check with the step that
fixes it (core/rules/doctor.py judges).

It writes nothing: the policies are probed with server-side dry runs (dryRun=All), which the
API server admits or refuses as it would the write, and persists none of.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Annotated, Any, Final, Literal

import yaml

from dispatch_k8s.core.rules import doctor, wire
from dispatch_k8s.core.rules.doctor import Check
from dispatch_k8s.core.rules.errors import DispatchError
from dispatch_k8s.core.shell import runner
from dispatch_k8s.core.shell.gateway import Gateway, kinds
from dispatch_k8s.core.shell.gateway.api_errors import is_admission_denial, is_webhook_failure
from dispatch_k8s.core.shell.settings import (
    ClusterSettings,
    Namespace,
    ObjectName,
    doc,
    load_settings,
)

STEP: Final = "doctor"
PROBE: Final = "dispatch-doctor-probe"


class DoctorSettings(ClusterSettings):
    """`dispatch-doctor`: check an install, read-only."""

    namespace: Annotated[
        Namespace | None,
        doc(
            "The namespace the policies are probed in and the steps' rights checked in.",
            metavar="NAMESPACE",
            default="the kubeconfig context's namespace, else (in a pod) the "
            "ServiceAccount's namespace, else default",
        ),
    ] = None

    # A table, as kubectl get prints, where the steps print a result: a format of its own.
    output: Annotated[
        Literal["table", "json", "yaml"],
        doc(
            "table (one row per check: CHECK, STATUS, FOUND, FIX), json (one object per "
            "check, one a line) or yaml (one document per check).",
            metavar="table|json|yaml",
            default="table",
        ),
    ] = "table"
    service_account: Annotated[
        ObjectName,
        doc(
            "The steps' ServiceAccount in --namespace, whose rights are checked.",
            metavar="NAME",
            default=doctor.STEPS_SERVICE_ACCOUNT,
        ),
    ] = doctor.STEPS_SERVICE_ACCOUNT
    check: Annotated[
        ObjectName,
        doc(
            "The name of this project's AdmissionCheck, as the ClusterQueues list it.",
            metavar="NAME",
            default="dispatch-admission",
        ),
    ] = "dispatch-admission"


def run(settings: DoctorSettings) -> list[Check]:
    """Every check, in the order a platform engineer would fix them."""
    gateway = Gateway.connect(kubeconfig=settings.kubeconfig, context=settings.context)
    probing = Gateway.connect(
        kubeconfig=settings.kubeconfig, context=settings.context, dry_run="server"
    )
    namespace = settings.namespace or settings.default_namespace()
    served = gateway.served_resources("admissionregistration.k8s.io", "v1")
    checks = [doctor.check_admission_apis(served)]
    deployments = list(gateway.list_items(kinds.DEPLOYMENT, None))
    # The install wherever an overlay or the chart's release put it: the ConfigMap the path
    # guard's bindings name, the controller's Deployments by their pods' label.
    bindings = (
        list(gateway.list_items(kinds.VALIDATING_POLICY_BINDING, None))
        if "validatingadmissionpolicybindings" in served
        else []
    )
    parameters = doctor.parameters_ref(bindings)
    config_map = gateway.find(kinds.CONFIG_MAP, parameters.namespace, parameters.name)
    for component in doctor.COMPONENTS:
        found = doctor.find_deployments(component, deployments)
        crd = gateway.find(kinds.CUSTOM_RESOURCE_DEFINITION, None, component.crd)
        checks.append(
            doctor.check_component(component, crd_found=crd is not None, deployments=found)
        )
        identity = doctor.check_identity(component, config_map, found, parameters=parameters)
        if identity is not None:
            checks.append(identity)
    if "validatingadmissionpolicies" in served:
        bound = [str(b["metadata"]["name"]) for b in bindings]
        checks.append(_installed(gateway, bound, mutating="mutatingadmissionpolicies" in served))
        checks.extend(_probes(probing, namespace))
    controllers = doctor.controller_deployments(deployments)
    keeper = doctor.deployment_ref(controllers[0]) if controllers else None
    checks.append(_admission_check(gateway, settings.check, keeper))
    if not controllers:
        checks.append(doctor.check_controller(None, None, now=time.time()))
    for controller in controllers:
        where = doctor.lease_ref(controller)
        lease = gateway.find(kinds.LEASE, where.namespace, where.name)
        checks.append(doctor.check_controller(controller, lease, now=time.time()))
    checks.append(_step_access(gateway, namespace, settings.service_account))
    return checks


def _names(gateway: Gateway, kind: kinds.Kind) -> list[str]:
    return [str(item["metadata"]["name"]) for item in gateway.list_items(kind, None)]


def _installed(gateway: Gateway, bindings: list[str], *, mutating: bool) -> Check:
    return doctor.check_policies_installed(
        _names(gateway, kinds.VALIDATING_POLICY),
        bindings,
        _names(gateway, kinds.MUTATING_POLICY) if mutating else [],
        _names(gateway, kinds.MUTATING_POLICY_BINDING) if mutating else [],
        mutating_served=mutating,
    )


def _probes(probing: Gateway, namespace: str) -> Iterator[Check]:
    """Each guard's dry run, of an object it refuses, in `namespace`."""
    managed = {wire.MANAGED_BY_LABEL: wire.MANAGED_BY}
    marked = {wire.ADMISSION_ANNOTATION: "0"}
    pod = {"containers": [{"name": "probe", "image": PROBE}], "restartPolicy": "Never"}
    meta = {"name": PROBE, "namespace": namespace}
    probes: list[tuple[str, str, kinds.Kind, dict[str, Any]]] = [
        (
            "probe/guard",
            "create-suspended",
            kinds.TRAINJOB,
            {
                "apiVersion": f"{wire.TRAINER_GROUP}/{wire.TRAINER_VERSION}",
                "kind": "TrainJob",
                "metadata": {**meta, "labels": managed},
                "spec": {"runtimeRef": {"name": PROBE}, "suspend": False},
            },
        ),
        (
            "probe/ledger",
            "keep-ledger",
            kinds.CONFIG_MAP,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    **meta,
                    "name": f"dispatch-ledger-{PROBE}",
                    "labels": {**managed, wire.LEDGER_LABEL: wire.LEDGER_CLAIM},
                },
                "immutable": False,
            },
        ),
        (
            "probe/path-guard",
            "job-create",
            kinds.JOB,
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": meta,
                "spec": {"template": {"metadata": {"annotations": marked}, "spec": pod}},
            },
        ),
        (
            "probe/pods",
            "pod-create",
            kinds.POD,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {**meta, "annotations": marked},
                "spec": pod,
            },
        ),
    ]
    for name, rule, kind, body in probes:
        try:
            probing.create(kind, body)
        except DispatchError as e:  # by admission, or before it (RBAC, validation)
            told = str(e)
            # A webhook that could not be called refuses too (failurePolicy Fail), after the
            # policies, as one that answers does: they let the probe through.
            by_admission = is_admission_denial(told) or is_webhook_failure(told)
            yield doctor.check_probe(
                name, rule, told, namespace=namespace, by_admission=by_admission
            )
        else:
            yield doctor.check_probe(name, rule, None, namespace=namespace)


def _admission_check(gateway: Gateway, name: str, controller: doctor.Ref | None) -> Check:
    if not gateway.served_resources(wire.KUEUE_GROUP, wire.KUEUE_VERSION):
        return doctor.check_admission_check(None, [], name=name)
    found = doctor.find_admission_check(gateway.list_items(kinds.ADMISSION_CHECK, None), name)
    queues = list(gateway.list_items(kinds.CLUSTER_QUEUE, None)) if found is not None else []
    return doctor.check_admission_check(found, queues, name=name, controller=controller)


def _step_access(gateway: Gateway, namespace: str, account: str) -> Check:
    user = f"system:serviceaccount:{namespace}:{account}"
    groups = [
        "system:serviceaccounts",
        f"system:serviceaccounts:{namespace}",
        "system:authenticated",
    ]
    denied = []
    wanted = [(access, namespace) for access in doctor.STEP_ACCESS]
    wanted += [(access, "") for access in doctor.STEP_CLUSTER_ACCESS]
    for (group, resource, verb), where in wanted:
        plural, _, subresource = resource.partition("/")
        attributes = {"group": group, "resource": plural, "verb": verb}
        if subresource:
            attributes["subresource"] = subresource
        if where:
            attributes["namespace"] = where
        spec = {"user": user, "groups": groups, "resourceAttributes": attributes}
        answer = gateway.review(kinds.SUBJECT_ACCESS_REVIEW, spec)
        if answer.get("status", {}).get("allowed") is not True:
            denied.append((group, resource, verb))
    return doctor.check_step_access(namespace, denied, account=account)


def render(checks: list[Check], form: str) -> str:
    """The checks as a table, JSON lines or YAML documents."""
    records = [check.as_record() for check in checks]
    if form == "json":
        return "".join(json.dumps(record) + "\n" for record in records)
    if form == "yaml":
        return "".join("---\n" + yaml.safe_dump(record, sort_keys=False) for record in records)
    headers = {"check": "CHECK", "status": "STATUS", "found": "FOUND", "fix": "FIX"}
    rows = [headers, *({**r, "status": r["status"].upper()} for r in records)]
    widths = {key: max(len(row[key]) for row in rows) for key in ("check", "status")}
    lines = []
    for row in rows:
        line = f"{row['check']:<{widths['check']}}  {row['status']:<{widths['status']}}  "
        line += row["found"]
        if row["fix"] and row is not headers:
            line += f"\n{'':<{widths['check'] + widths['status'] + 4}}fix: {row['fix']}"
        lines.append(line)
    return "\n".join(lines) + "\n"


ABOUT = (
    "Read-only preflight of an install: APIs, controllers and their identities, policies (dry\n"
    f"runs), the AdmissionCheck, the controller, the steps' rights; exit {doctor.CHECK_FAILED} "
    "if a check fails."
)
EXAMPLE = """\
dispatch-doctor -n team-a
kubectl dispatch doctor -n team-a -o json
"""


def main() -> None:
    """The console script: settings, logs on stderr, the checks on stdout."""

    def body() -> int:
        settings = load_settings(
            DoctorSettings, prog=f"dispatch-{STEP}", argv=sys.argv[1:], about=ABOUT, example=EXAMPLE
        )
        runner.configure_logging(STEP, level=settings.log_level)
        checks = run(settings)
        sys.stdout.write(render(checks, settings.output))
        return doctor.exit_status(checks)

    runner.guarded(STEP, body)
