"""`dispatch-approve`: Kueue gate 2: mark this project's check Ready for admit's reservation."""

from __future__ import annotations

from typing import Annotated

from loguru import logger

from dispatch_k8s.core.rules import decisions, trainjob, workload
from dispatch_k8s.core.rules.errors import PreconditionFailed, Refused
from dispatch_k8s.core.shell import clock, runner
from dispatch_k8s.core.shell.gateway import kinds
from dispatch_k8s.core.shell.gateway.kubeconfig import DEFAULT_NAMESPACE
from dispatch_k8s.core.shell.settings import (
    CHECK_DOC,
    NAMESPACE_DEFAULT,
    Namespace,
    NamespacedSettings,
    ObjectName,
    WritingSettings,
    doc,
)


class ApproveSettings(NamespacedSettings, WritingSettings):
    """`dispatch-approve`: mark the check Ready for the reservation admit raised A for."""

    namespace: Annotated[
        Namespace, doc("The Workload's namespace.", metavar="NAMESPACE", default=NAMESPACE_DEFAULT)
    ] = DEFAULT_NAMESPACE
    workload: Annotated[
        ObjectName,
        doc(
            "The Workload dispatch-admit raised A for (its `workload` result).",
            metavar="NAME",
            default="required",
        ),
    ]
    workload_resource_version: Annotated[
        str,
        doc(
            "The Workload's resourceVersion dispatch-admit read (its `workloadResourceVersion` "
            "result): the approval is preconditioned on it, so it lands on that very "
            "reservation or not at all (exit 3).",
            metavar="VERSION",
            default="required",
        ),
    ]
    admission: Annotated[
        int,
        doc(
            "The A dispatch-admit raised (its `admission` result); it must equal the "
            "TrainJob's admission floor.",
            metavar="A",
            default="required",
        ),
    ]
    check: Annotated[ObjectName, CHECK_DOC] = "dispatch-admission"


def run(settings: ApproveSettings) -> runner.Result:
    """Read the Workload and its TrainJob, check A was raised for it, approve once, report."""
    gateway = runner.connect(settings)
    current = gateway.read_workload(settings.namespace, settings.workload)
    version = current["metadata"]["resourceVersion"]
    if version != settings.workload_resource_version:
        raise PreconditionFailed(
            f"Workload {settings.workload} changed since admit read it (resourceVersion "
            f"{settings.workload_resource_version} -> {version}): run admit again"
        )
    owner = workload.owner_trainjob(current)
    if owner is None:
        raise Refused(f"Workload {settings.workload} is controlled by no TrainJob")
    job = gateway.read_trainjob(settings.namespace, owner)
    refusal = workload.decide_approval(
        current, job, check=settings.check, admission=settings.admission
    )
    if refusal is not None:
        raise trainjob.refusal_error(refusal)
    body = workload.build_approval(
        current,
        check=settings.check,
        resource_version=decisions.ResourceVersion(settings.workload_resource_version),
        message=workload.approval_message(settings.admission),
        now=clock.now(),
    )
    written = gateway.apply_workload_status(body, manager=workload.CHECK_MANAGER)
    logger.bind(workload=settings.workload, admission=settings.admission).info("approved")
    return {
        "workload": settings.workload,
        "resourceVersion": written["metadata"]["resourceVersion"],
        **runner.unsent(gateway),
    }


ABOUT = (
    "Kueue gate 2: mark this project's AdmissionCheck Ready on the Workload, only for the very\n"
    "reservation dispatch-admit raised A for (preconditioned on the resourceVersion it read)."
)
EXAMPLE = """\
dispatch-approve --namespace team-a --workload "$(cat /tmp/out/workload)" \\
    --workload-resource-version "$(cat /tmp/out/workloadResourceVersion)" \\
    --admission "$(cat /tmp/out/admission)"
"""


def acted_on(settings: ApproveSettings, _: runner.Result) -> str:
    """`-o name`: the Workload approved."""
    return kinds.WORKLOAD.kubectl_name(settings.workload)


main = runner.entrypoint(
    run, ApproveSettings, step="approve", about=ABOUT, example=EXAMPLE, acted_on=acted_on
)
