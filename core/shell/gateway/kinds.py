"""Every kind the project reads or writes, declared once: where the API serves it.

A path is built from the table and nothing else, so a kind's group, version or scope is
written in one place.
"""

from __future__ import annotations

import dataclasses
from typing import Final
from urllib.parse import quote

from dispatch_k8s.core.rules import wire


@dataclasses.dataclass(frozen=True, slots=True)
class Kind:
    """A collection the API serves: its kind, group, version, plural and scope."""

    name: str
    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(
        self, namespace: str | None = None, name: str | None = None, *, subresource: str = ""
    ) -> str:
        """The REST path of the collection (all namespaces without one), or of one object.

        Namespace and name are quoted as the generated client quotes path parameters
        (nothing kept), so a name holding `/` or `?` names no other object: it is not found.
        """
        path = "/api/v1" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            path = f"{path}/namespaces/{quote(namespace, safe='')}"
        path = f"{path}/{self.plural}"
        if name is not None:
            path = f"{path}/{quote(name, safe='')}"
        return f"{path}/{subresource}" if subresource else path

    def kubectl_name(self, name: str) -> str:
        """One object as kubectl's `-o name` prints it: `trainjob.trainer.kubeflow.org/NAME`."""
        resource = f"{self.name.lower()}.{self.group}" if self.group else self.name.lower()
        return f"{resource}/{name}"

    def describe(self, namespace: str | None, name: str) -> str:
        """How an error names one object: `Kind namespace/name`, or `Kind name` unscoped."""
        return f"{self.name} {namespace}/{name}" if self.namespaced else f"{self.name} {name}"


TRAINJOB: Final = Kind("TrainJob", wire.TRAINER_GROUP, wire.TRAINER_VERSION, "trainjobs")
TRAINING_RUNTIME: Final = Kind(
    "TrainingRuntime", wire.TRAINER_GROUP, wire.TRAINER_VERSION, "trainingruntimes"
)
CLUSTER_TRAINING_RUNTIME: Final = Kind(
    "ClusterTrainingRuntime",
    wire.TRAINER_GROUP,
    wire.TRAINER_VERSION,
    "clustertrainingruntimes",
    namespaced=False,
)
JOBSET: Final = Kind("JobSet", wire.JOBSET_GROUP, wire.JOBSET_VERSION, "jobsets")
JOB: Final = Kind("Job", "batch", "v1", "jobs")
POD: Final = Kind("Pod", "", "v1", "pods")
WORKLOAD: Final = Kind("Workload", wire.KUEUE_GROUP, wire.KUEUE_VERSION, "workloads")
ADMISSION_CHECK: Final = Kind(
    "AdmissionCheck", wire.KUEUE_GROUP, wire.KUEUE_VERSION, "admissionchecks", namespaced=False
)
LEASE: Final = Kind("Lease", "coordination.k8s.io", "v1", "leases")
EVENT: Final = Kind("Event", "", "v1", "events")
CONFIG_MAP: Final = Kind("ConfigMap", "", "v1", "configmaps")

CLUSTER_QUEUE: Final = Kind(
    "ClusterQueue", wire.KUEUE_GROUP, wire.KUEUE_VERSION, "clusterqueues", namespaced=False
)
# Read by the preflight (dispatch-doctor) only: what is installed, and as whom it runs.
DEPLOYMENT: Final = Kind("Deployment", "apps", "v1", "deployments")
CUSTOM_RESOURCE_DEFINITION: Final = Kind(
    "CustomResourceDefinition",
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    namespaced=False,
)
VALIDATING_POLICY: Final = Kind(
    "ValidatingAdmissionPolicy",
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicies",
    namespaced=False,
)
VALIDATING_POLICY_BINDING: Final = Kind(
    "ValidatingAdmissionPolicyBinding",
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicybindings",
    namespaced=False,
)
MUTATING_POLICY: Final = Kind(
    "MutatingAdmissionPolicy",
    "admissionregistration.k8s.io",
    "v1",
    "mutatingadmissionpolicies",
    namespaced=False,
)
MUTATING_POLICY_BINDING: Final = Kind(
    "MutatingAdmissionPolicyBinding",
    "admissionregistration.k8s.io",
    "v1",
    "mutatingadmissionpolicybindings",
    namespaced=False,
)

RUNTIMES: Final = {kind.name: kind for kind in (TRAINING_RUNTIME, CLUSTER_TRAINING_RUNTIME)}
# Reviews are created and answered in their status, never kept: the metrics' authentication
# and authorization (core/rules/access.py).
TOKEN_REVIEW: Final = Kind(
    "TokenReview", "authentication.k8s.io", "v1", "tokenreviews", namespaced=False
)
SUBJECT_ACCESS_REVIEW: Final = Kind(
    "SubjectAccessReview", "authorization.k8s.io", "v1", "subjectaccessreviews", namespaced=False
)


def resource_of(path: str) -> str:
    """The resource a path built by `Kind.path` names, without namespace or name.

    `trainjobs`, `workloads/status`: a metric's label, so a few values, never one per object.
    """
    parts = path.split("?", 1)[0].strip("/").split("/")
    parts = parts[2:] if parts[0] == "api" else parts[3:]  # after api/v1, apis/GROUP/VERSION
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]  # in a namespace (the namespace itself is `namespaces`)
    if not parts:
        return ""
    return f"{parts[0]}/{parts[2]}" if len(parts) > 2 else parts[0]
