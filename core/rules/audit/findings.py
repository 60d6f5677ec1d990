"""What the audit finds: one sign that A or J may have been reset, and its kind."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FindingKind(StrEnum):
    """What a finding is about: a short stable code for results and logs."""

    JOBSET_UID = "jobset-uid"  # J may have been reset: the JobSet was replaced
    ADMISSION_FLOOR = "admission-floor"  # the floor itself is missing or garbage
    RUNTIME_PATCH = "runtime-patch"  # A in this project's runtime patch is missing, garbage, low
    POD_ADMISSION = "pod-admission"  # a live pod's A is missing, garbage or low
    REPEATED_R = "repeated-r"  # an execution began with the R of the one recorded before it
    LOWER_R = "lower-r"  # a live pod runs with an R below the one recorded
    RESTARTED_IN_PLACE = "restarted-in-place"  # the kubelet reran the trainer container
    DUPLICATE_POD = "duplicate-pod"  # two pods for one slot under one A, J and JobSet
    STALE_POD = "stale-pod"  # a running job's pod whose A is not the patch's
    JOBSET_SPEC = "jobset-spec"  # the live JobSet holds a setting the runtime rules refuse
    RUNTIME_CHANGED = "runtime-changed"  # the runtime was edited, replaced or deleted since start
    FOREIGN_PATCH = "foreign-patch"  # another runtime-patch entry sets what the identity reads
    JOB_SPEC = "job-spec"  # a child Job's spec is not its JobSet template's: scaled or edited
    JOB_IDENTITY = "job-identity"  # a child Job's template carries a J the JobSet did not count
    POD_IDENTITY = "pod-identity"  # a pod's A or J is not what its Job or JobSet holds
    ORPHANED = "orphaned"  # a Job or pod runs the trainer outside the JobSet's count of J
    ZERO_R = "zero-r"  # an execution began with R = 0: before any raise of A
    RESTART_BELOW = "restart-below-highest"  # J below the highest recorded, A not raised past it
    UNRAISED_OPENING = (
        "unraised-opening"  # open at a generation no raise covers (core.rules.opening)
    )
    RECORD_ERASED = "record-erased"  # a record that bounds R moved back (core.rules.erasure)
    UNEARNED_RECORD = "unearned-record"  # a raise's record where no raise was (core.rules.opening)
    REMADE = "remade"  # a spent identity's TrainJob made again outside start (core.rules.ledger)


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One sign that A or J may have been reset, told in one line a person can act on."""

    kind: FindingKind
    reason: str  # names the object, field and value

    def __str__(self) -> str:
        return self.reason
