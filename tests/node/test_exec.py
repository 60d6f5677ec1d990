"""`pods/exec`, which the built-in `edit` role grants, on the real node (issue 43, part 6): the
limit docs/policies.md (The trust boundary) states, shown as it is so that a fix turns it red.

A process started with `kubectl exec` in a running trainer pod gets the container's
environment as the pod spec gives it, the `DISPATCH_K8S_*` inputs among them; run through the
prologue the container's own command holds, it prints the running execution's
`DISPATCH_EPOCH` and `DISPATCH_ATTEMPT`. No object changes, so the audit exits 0, and the
admission controller's auditor, running beside throughout, audits the job again after the exec
and finds it clean: detection cannot see an exec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until
from tests.support.cluster_under_test import Cluster
from tests.support.executions import RUNS, SHOW, Printed, pods, printed, start_flags
from tests.support.kubectl import run_kubectl
from tests.support.lifecycle import DEADLINE, Step, read_trainjob, run_stage
from tests.support.replicas import replicas
from tests.support.step_identity import service_account_token, token_kubeconfig

pytestmark = [pytest.mark.node, pytest.mark.cluster, pytest.mark.policies("all")]
AUDITS = "dispatch_admission_audits_total"  # the auditor's passes, by outcome
EDITOR = "editor"  # with the built-in ClusterRole `edit`'s rules, as a team usually has


def aggregated_rules(rbac: client.RbacAuthorizationV1Api, name: str) -> list[Any]:
    """The rules of ClusterRole `name` as the clusterrole-aggregation controller assembles them
    (the local plane does not run it): its own, and those of every ClusterRole it selects."""
    role = rbac.read_cluster_role(name)
    rules = list(role.rules or [])
    aggregation = role.aggregation_rule
    for selector in (aggregation.cluster_role_selectors or []) if aggregation else []:
        labels = ",".join(f"{k}={v}" for k, v in (selector.match_labels or {}).items())
        for selected in rbac.list_cluster_role(label_selector=labels).items:
            selected_name = str(selected.metadata.name) if selected.metadata else name
            if selected_name != name:
                rules += aggregated_rules(rbac, selected_name)
    return [rule for rule in rules if not rule.non_resource_urls]  # a Role holds no URLs


def editor_kubeconfig(
    api_client: client.ApiClient, namespace: str, admin_kubeconfig: Path, work: Path
) -> Path:
    """A kubeconfig of a ServiceAccount with the built-in `edit` role's rules in `namespace`."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    meta = client.V1ObjectMeta(name=EDITOR)
    client.CoreV1Api(api_client).create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=meta)
    )
    rules = aggregated_rules(rbac, "edit")
    assert any("pods/exec" in (rule.resources or []) for rule in rules), "edit grants pods/exec"
    rbac.create_namespaced_role(namespace, client.V1Role(metadata=meta, rules=rules))
    binding = client.V1RoleBinding(
        metadata=meta,
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=EDITOR),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name=EDITOR, namespace=namespace)],
    )
    rbac.create_namespaced_role_binding(namespace, binding)
    token = service_account_token(api_client, namespace, EDITOR)
    return token_kubeconfig(admin_kubeconfig, token, work / f"{EDITOR}.kubeconfig")


def test_an_exec_in_a_running_trainer_pod_prints_the_execution_s_epoch_and_attempt(
    step: Step,
    namespace: str,
    real_node_runtime: str,
    api_client: client.ApiClient,
    control_plane: Cluster,
    tmp_path: Path,
) -> None:
    started = step("start", *start_flags(namespace, real_node_runtime, train=RUNS, job_id="exec"))
    assert started.code == 0, started.error
    name = started.result["name"]
    target = ("--namespace", namespace, "--name", name)
    with replicas(control_plane.kubeconfig, namespace, tmp_path, "auditor") as (auditor,):
        seen, inputs, execution = _exec_in_the_running_pod(
            step, namespace, name, api_client, control_plane, tmp_path
        )
        # The auditor's resync audits the job again after the exec: nothing changed, it is clean.
        clean = auditor.metric(AUDITS, 'outcome="clean"')
        wait_until(
            lambda: auditor.metric(AUDITS, 'outcome="clean"') > clean or None,
            what=f"the auditor to audit {name} again after the exec",
            timeout=DEADLINE,
        )
        assert auditor.metric(AUDITS, 'outcome="flagged"') == 0, "the auditor flagged nothing"
    assert inputs.split() == ["1", "0"], "the exec sees the DISPATCH_K8S_* inputs: A = 1, J = 0"
    assert seen.split() == [str(execution.epoch), execution.attempt], (
        "the exec printed the running execution's DISPATCH_EPOCH and DISPATCH_ATTEMPT"
    )
    annotations = read_trainjob(client.CustomObjectsApi(api_client), namespace, name)["metadata"][
        "annotations"
    ]
    assert wire.FOREIGN_ANNOTATION not in annotations, annotations
    audit = run_stage(step, "audit", *target)
    assert audit.code == 0, f"no object changed, so the audit sees nothing: {audit.error}"


def _exec_in_the_running_pod(
    step: Step,
    namespace: str,
    name: str,
    api_client: client.ApiClient,
    control_plane: Cluster,
    tmp_path: Path,
) -> tuple[str, str, Printed]:
    """Open the job; as the editor, exec the prologue (and the inputs) in its trainer pod: what
    each exec printed, and the execution the pod's own process printed."""
    assert run_stage(step, "unsuspend", "--namespace", namespace, "--name", name).code == 0
    core = client.CoreV1Api(api_client)
    execution = printed(core, namespace, name, restart=0, admission=1)
    (pod,) = [p for p in pods(core, namespace, name) if p["metadata"]["name"] == execution.pod]
    (trainer,) = [c for c in pod["spec"]["containers"] if c["name"] == wire.TRAINER_CONTAINER]
    shell, flag, prologue, argv0 = trainer["command"][:4]  # as the pod spec shows anyone
    kubeconfig = editor_kubeconfig(api_client, namespace, control_plane.kubeconfig, tmp_path)
    exec_argv = (shell, flag, prologue, argv0, "/bin/sh", "-c", SHOW)
    seen = run_kubectl(
        *("exec", "--namespace", namespace, execution.pod, "-c", wire.TRAINER_CONTAINER, "--"),
        *exec_argv,
        kubeconfig=kubeconfig,
    )
    inputs = run_kubectl(
        *("exec", "--namespace", namespace, execution.pod, "-c", wire.TRAINER_CONTAINER, "--"),
        *("/bin/sh", "-c", f'printf \'%s %s\\n\' "${wire.ENV_ADMISSION}" "${wire.ENV_RESTART}"'),
        kubeconfig=kubeconfig,
    )
    return seen, inputs, execution
