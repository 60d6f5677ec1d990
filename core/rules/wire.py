"""Wire strings: every key, label and name this project reads or writes, defined once."""

from __future__ import annotations

from typing import Final

DOMAIN: Final = "dispatch.phpboyscout.uk"

# On the trainer pod template, inside this project's runtime patch: A.
ADMISSION_ANNOTATION: Final = f"{DOMAIN}/admission"
# On the TrainJob: the highest A ever written, so a rewritten patch cannot lower A.
ADMISSION_FLOOR_ANNOTATION: Final = f"{DOMAIN}/admission-floor"
# On the TrainJob: the JobSet UID first seen, to detect a reset of J.
JOBSET_UID_ANNOTATION: Final = f"{DOMAIN}/jobset-uid"
# On the TrainJob: the last metadata.generation at which the job may be opened without a
# raise in the same request, written by every raise (pipelines/policies/ read it).
OPEN_UNTIL_GENERATION_ANNOTATION: Final = f"{DOMAIN}/open-until-generation"
# On the TrainJob: the Kueue reservation the last raise was made for ("<Workload UID>
# <QuotaReserved time>"), so an approval can be tied to a raise made for it.
RAISED_FOR_ANNOTATION: Final = f"{DOMAIN}/raised-for"
# On the TrainJob: the highest J seen on any of its JobSets, so a raise after a reset of J
# still gives an R above every R the job has had.
HIGHEST_RESTART_ANNOTATION: Final = f"{DOMAIN}/highest-restart"
# On the TrainJob: the execution the audit last saw (its R and one of its pods), so a later
# execution that repeats that R is noticed where the policies are not installed.
LAST_EXECUTION_ANNOTATION: Final = f"{DOMAIN}/last-execution"
# On the TrainJob: "true" once the audit found a reset; only a person removes it.
FOREIGN_ANNOTATION: Final = f"{DOMAIN}/foreign"
# On the TrainJob: the findings behind the foreign flag, for the person who decides.
FOREIGN_CAUSE_ANNOTATION: Final = f"{DOMAIN}/foreign-cause"
FOREIGN: Final = "true"
# On a Workload the auditor deactivated in policy mode: why (the TrainJob's foreign flag).
DEACTIVATED_ANNOTATION: Final = f"{DOMAIN}/deactivated-because"
# On the TrainJob: the identity of the start request, so a repeated start is recognised.
JOB_ID_ANNOTATION: Final = f"{DOMAIN}/job-id"
GENERATION_ANNOTATION: Final = f"{DOMAIN}/generation"
SUBMISSION_ANNOTATION: Final = f"{DOMAIN}/submission"
ATTEMPT_ANNOTATION: Final = f"{DOMAIN}/attempt"
REQUEST_DIGEST_ANNOTATION: Final = f"{DOMAIN}/request-digest"
# On the TrainJob: the runtime as start read it ("<UID> <generation> <digest of its spec>";
# jobs started before the digest have the first two), so the audit can tell a runtime, or the
# copy of it Trainer builds the job from, edited or replaced since (its restart settings may no
# longer pass the rules).
RUNTIME_SEEN_ANNOTATION: Final = f"{DOMAIN}/runtime"
# On the TrainJob: the restart mechanisms the runtime allowed as start read it (its
# allow-rank-restart and allow-restarts annotations), comma-separated, empty for none: the audit
# judges the live JobSet and child Jobs against them, not against what the runtime, or its copy,
# says now (its annotations are outside the spec digest above).
RUNTIME_ALLOWS_ANNOTATION: Final = f"{DOMAIN}/runtime-allows"
# Trainer v2.3.0 and later build a TrainJob from a copy of its runtime taken at the first
# reconcile, kept as YAML under this key in the ConfigMap <trainjob><suffix> of the job's
# namespace, controller-owned by the TrainJob (kubeflow/trainer pkg/runtime/core/snapshot.go);
# v2.2.1 takes no copy and builds from the runtime as it is.
RUNTIME_SNAPSHOT_SUFFIX: Final = "-runtime-snapshot"
RUNTIME_SNAPSHOT_KEY: Final = "runtime"
# On a (Cluster)TrainingRuntime: its owner allows rank replacement without A or J moving,
# by every waivable mechanism ("true"), or by the mechanisms listed in the second.
ALLOW_RANK_RESTART_ANNOTATION: Final = f"{DOMAIN}/allow-rank-restart"
ALLOW_RESTARTS_ANNOTATION: Final = f"{DOMAIN}/allow-restarts"
# The ledger: ConfigMaps that outlive the TrainJob and keep which identities (JobID, G, N)
# were started in a namespace, so a TrainJob deleted and made again cannot begin at A = 0.
# The label says which record it is: the claim (made before the TrainJob) or the record that
# the TrainJob was created (made after it, with its UID). pipelines/policies/ledger.yaml
# matches on it.
LEDGER_LABEL: Final = f"{DOMAIN}/ledger"
LEDGER_CLAIM: Final = "claim"
LEDGER_CREATED: Final = "created"
# Manager of this project's entry in spec.runtimePatches.
PATCH_MANAGER: Final = f"{DOMAIN}/adapter"

# Environment handed to the prologue, and what it hands the job.
ENV_EPOCH_PREFIX: Final = "DISPATCH_K8S_EPOCH_PREFIX"
ENV_TOKEN_PREFIX: Final = "DISPATCH_K8S_TOKEN_PREFIX"
ENV_WORKDIR: Final = "DISPATCH_K8S_WORKDIR"
ENV_ADMISSION: Final = "DISPATCH_K8S_ADMISSION"
ENV_RESTART: Final = "DISPATCH_K8S_RESTART"
ENV_EPOCH: Final = "DISPATCH_EPOCH"
ENV_ATTEMPT: Final = "DISPATCH_ATTEMPT"
RESERVED_ENV_PREFIX: Final = "DISPATCH_"
PROLOGUE_NAME: Final = "dispatch-prologue"  # $0 of the prologue: shows in ps and messages

# On every TrainJob start makes: the admission policies match on it.
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "dispatch-k8s"

# Trainer (Trainer's source).
TRAINER_GROUP: Final = "trainer.kubeflow.org"
TRAINER_VERSION: Final = "v1alpha1"
ANCESTOR_LABEL: Final = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER: Final = "trainer"
TRAINER_CONTAINER: Final = "node"
MPI_WORKER_JOB: Final = "node"
# The TrainJob condition Trainer sets from spec.suspend at every reconcile, and the reason of
# the Warning Event it posts when it cannot write the JobSet (core/rules/carried.py).
TRAINER_SUSPENDED_CONDITION: Final = "Suspended"
TRAINER_FAILED_REASON: Final = "TrainJobResourcesCreationFailed"

# JobSet (JobSet's source).
JOBSET_GROUP: Final = "jobset.x-k8s.io"
JOBSET_VERSION: Final = "v1alpha2"
RESTART_ATTEMPT_KEY: Final = "jobset.sigs.k8s.io/restart-attempt"
JOBSET_NAME_KEY: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_KEY: Final = "jobset.sigs.k8s.io/jobset-uid"
# Which replicated job a pod runs (JobSet's source).
REPLICATED_JOB_NAME_KEY: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_KEY: Final = "jobset.sigs.k8s.io/job-index"
# Kubernetes Indexed Jobs: which completion index a pod runs.
COMPLETION_INDEX_KEY: Final = "batch.kubernetes.io/job-completion-index"

# Kueue (Kueue's source).
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
KUEUE_JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
ADMISSION_CHECK_CONTROLLER: Final = f"{DOMAIN}/admission"
MULTIKUEUE_MANAGER: Final = "kueue.x-k8s.io/multikueue"
