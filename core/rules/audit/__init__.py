"""The audit (docs/design.md §2, "Resets are detected"): findings and the one write.

Deciding only: the TrainJob, its JobSet and its pods come in as read; findings and the TrainJob
annotations to write go out. A reset is reported, never repaired: the audit flags the TrainJob
foreign so a person decides, and never stops, deletes or edits the job's spec.

`findings` says what a finding is; `checks` looks at one object as read, `trackers` across the
objects an audit is fed, and `job_audit.JobAudit` feeds both one TrainJob's objects; `record` is
what the audit's one update writes; `projections`, what the controller's store keeps of what
the audit reads.
"""

from dispatch_k8s.core.rules.audit.findings import Finding, FindingKind
from dispatch_k8s.core.rules.audit.job_audit import UNREAD, JobAudit, Unread
from dispatch_k8s.core.rules.audit.projections import (
    POD_ANNOTATIONS_READ,
    POD_LABELS_READ,
    POD_METADATA_READ,
    job_as_audited,
    pod_as_audited,
    snapshot_as_audited,
)
from dispatch_k8s.core.rules.audit.record import (
    CAUSE_SEPARATOR,
    MAX_CAUSE_CHARS,
    MAX_EVENTS,
    Execution,
    Observed,
    build_cause,
    decide_annotations,
    with_annotations,
)

__all__ = [
    "CAUSE_SEPARATOR",
    "MAX_CAUSE_CHARS",
    "MAX_EVENTS",
    "POD_ANNOTATIONS_READ",
    "POD_LABELS_READ",
    "POD_METADATA_READ",
    "UNREAD",
    "Execution",
    "Finding",
    "FindingKind",
    "JobAudit",
    "Observed",
    "Unread",
    "build_cause",
    "decide_annotations",
    "job_as_audited",
    "pod_as_audited",
    "snapshot_as_audited",
    "with_annotations",
]
