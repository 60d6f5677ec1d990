"""`dispatch-admission-controller`'s settings: what it gates and audits, and where it serves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import Field, ModelWrapValidatorHandler, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from dispatch_k8s.core.rules import lease
from dispatch_k8s.core.rules.gate import KUEUE_BACKOFF
from dispatch_k8s.core.shell.settings import ClusterSettings, Namespace, ObjectName, doc

# The bounds of the fields that say how many or how often (each a constraint of its field), told
# together in one line whichever is broken.
BOUNDS: Final = (
    "--workers, --audit-workers, --kube-api-burst, --backoff-base-seconds and "
    "--backoff-max-seconds must be at least 1, --resync-seconds above 0, --kube-api-qps and "
    "--backoff-limit-count 0 or more and --lease-seconds at least 3"
)
_OUT_OF_BOUNDS: Final = frozenset({"greater_than", "greater_than_equal"})


class ControllerSettings(ClusterSettings):
    """`dispatch-admission-controller`: gate every Workload of this project's checks, audit."""

    namespaces: Annotated[
        list[Namespace],
        doc(
            "Gate the Workloads (and audit the TrainJobs) of these namespaces only (repeat the "
            "flag, or a comma-separated list); the controller then lists and watches each "
            "namespace, and needs Workload (and auditor) RBAC only there.",
            metavar="NAMESPACE",
            default="every namespace",
        ),
    ] = Field(default_factory=list)
    workers: Annotated[
        int,
        Field(ge=1),
        doc(
            "How many Workloads are gated at once (each Workload by one worker at a time).",
            metavar="N",
        ),
    ] = 4
    resync_seconds: Annotated[
        float,
        Field(gt=0),
        doc(
            "How often every Workload (and, auditing, every managed TrainJob, JobSet, Job and "
            "pod) is listed and looked at again, whatever the watch said.",
            metavar="SECONDS",
        ),
    ] = 60.0
    gate: Annotated[
        bool,
        doc(
            "Gate the Workloads of this project's AdmissionChecks (check mode): raise A once "
            "per reservation, then approve it. --no-gate is policy mode (docs/install.md: "
            "Kueue: policy mode or check mode): no ClusterQueue lists the check, the "
            "MutatingAdmissionPolicy raise-on-open raises A in Kueue's own opening, and the "
            "controller runs the auditor only, which then also tells each raise it sees "
            "(AdmissionRaised) and deactivates the Workload of a TrainJob flagged foreign "
            "(needs update on workloads); needs --audit.",
            default="on",
        ),
    ] = True
    audit: Annotated[
        bool,
        doc(
            "Audit every TrainJob labelled app.kubernetes.io/managed-by=dispatch-k8s as it, "
            "its JobSet, Jobs or pods change (the audit dispatch-audit makes): record each "
            "J and execution as it begins, flag findings foreign with a Warning Event, never "
            "stop a job; needs the auditor's RBAC (list and watch TrainJobs, JobSets, Jobs and "
            "pods). --no-audit turns it off.",
            default="on",
        ),
    ] = True
    audit_workers: Annotated[
        int,
        Field(ge=1),
        doc(
            "How many TrainJobs are audited at once (each TrainJob by one worker at a time).",
            metavar="N",
        ),
    ] = 2
    other_workloads: Annotated[
        Literal["approve", "leave"],
        doc(
            "A Workload of the check that is not a dispatch-managed TrainJob (a plain Job, "
            "another team's TrainJob): `approve` marks the check Ready at once, with a "
            "message saying nothing was raised; `leave` leaves it Pending for someone else.",
            metavar="approve|leave",
        ),
    ] = "approve"
    on_refusal: Annotated[
        Literal["reject", "retry", "wait"],
        doc(
            "What a reservation of a dispatch TrainJob that no wait can approve gets (the job "
            "flagged foreign, MultiKueue, a garbled counter, R past its bound, another check "
            "setting A): `reject` sets the check Rejected (Kueue deactivates the Workload and "
            "releases its quota; a person fixes the job and deletes the Workload, which Kueue "
            "makes again: one made active again stays stuck on Kueue v0.19.2, "
            "kubernetes-sigs/kueue#14309); `retry` sets Retry (Kueue releases the quota and "
            "queues the Workload again after a delay that doubles at each retry, as Kueue's "
            "ProvisioningRequest check backs off: --backoff-base-seconds, "
            "--backoff-max-seconds; Rejected once --backoff-limit-count retries were refused); "
            "`wait` leaves it Pending, holding the quota. The reason is the check's message "
            'either way, and the state it replaced (Previously: "Pending").',
            metavar="reject|retry|wait",
        ),
    ] = "reject"
    backoff_base_seconds: Annotated[
        int,
        Field(ge=1),
        doc(
            "With --on-refusal retry, the first retry's delay; retry n waits base·2^(n-1) "
            "seconds (Kueue's backoffBaseSeconds).",
            metavar="SECONDS",
        ),
    ] = KUEUE_BACKOFF.base_seconds
    backoff_max_seconds: Annotated[
        int,
        Field(ge=1),
        doc(
            "With --on-refusal retry, the longest delay between retries (Kueue's "
            "backoffMaxSeconds).",
            metavar="SECONDS",
        ),
    ] = KUEUE_BACKOFF.max_seconds
    backoff_limit_count: Annotated[
        int,
        Field(ge=0),
        doc(
            "With --on-refusal retry, how many retries a reservation's refusal gets; the "
            "refusal after the last sets Rejected (Kueue's backoffLimitCount).",
            metavar="N",
        ),
    ] = KUEUE_BACKOFF.limit_count
    kube_api_qps: Annotated[
        float,
        Field(ge=0),
        doc(
            "Requests a second the leader's work sends the API server at most, over all its "
            "threads (a token bucket, as client-go's); 0 turns the limit off. The Lease's "
            "renewals are never held back by it.",
            metavar="QPS",
        ),
    ] = 100.0
    kube_api_burst: Annotated[
        int,
        Field(ge=1),
        doc(
            "Requests sent at once, beyond --kube-api-qps, after a quiet spell.",
            metavar="N",
        ),
    ] = 200
    address: Annotated[
        str,
        doc(
            "Where /metrics (Prometheus), /healthz and /readyz are served, HOST:PORT.",
            metavar="HOST:PORT",
        ),
    ] = "127.0.0.1:8080"
    metrics_address: Annotated[
        str,
        doc(
            "Serve /metrics here over TLS instead of on --address, each scrape's bearer token "
            "reviewed by the API server and its user allowed get on /metrics (RBAC "
            "nonResourceURLs), as controller-runtime's secure metrics; needs create on "
            "tokenreviews and subjectaccessreviews.",
            metavar="HOST:PORT",
            default="none: /metrics on --address, plain HTTP",
        ),
    ] = ""
    metrics_cert_dir: Annotated[
        Path | None,
        doc(
            "tls.crt and tls.key for --metrics-address (cert-manager's layout).",
            metavar="DIR",
            default="a certificate made at start, signed by its own key",
        ),
    ] = None
    lease_namespace: Annotated[
        Namespace,
        doc(
            "The namespace of the leader-election Lease (the controller's own).",
            metavar="NAMESPACE",
        ),
    ] = "dispatch-system"
    lease_name: Annotated[
        ObjectName, doc("The name of the leader-election Lease.", metavar="NAME")
    ] = "dispatch-admission-controller"
    identity: Annotated[
        str,
        doc(
            "This replica's name in the Lease (the pod's name in the shipped Deployment).",
            metavar="NAME",
            default="the host name and a random suffix",
        ),
    ] = ""
    lease_seconds: Annotated[
        int,
        Field(ge=3),
        doc(
            "How long a Lease not renewed stays with its holder before another replica takes "
            f"it; the leader tries to renew it every {lease.RETRY_SHARE} of it and stops "
            f"leading {lease.RENEW_DEADLINE_SHARE} of it after the start of its last renewal.",
            metavar="SECONDS",
        ),
    ] = 15

    @model_validator(mode="after")
    def _does_something(self) -> ControllerSettings:
        """Policy mode is the auditor: a controller that neither gates nor audits does nothing."""
        if not self.gate and not self.audit:
            raise ValueError("--no-gate needs --audit: policy mode runs the auditor only")
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _bounds_told_together(
        cls, data: Any, handler: ModelWrapValidatorHandler[ControllerSettings]
    ) -> ControllerSettings:
        """Every value out of its bounds is told as BOUNDS, once any other error is fixed."""
        try:
            return handler(data)
        except ValidationError as e:
            others = [
                InitErrorDetails(
                    type=item["type"], loc=item["loc"], input=item["input"], ctx=item.get("ctx", {})
                )
                for item in e.errors()
                if item["type"] not in _OUT_OF_BOUNDS
            ]
            if others:  # told as they were before the bounds were checked
                raise ValidationError.from_exception_data(e.title, others) from None
            raise ValueError(BOUNDS) from e
