"""Kueue objects a test needs for Kueue mode: flavor, admission check, queues, priorities."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from dispatch_k8s.core.rules import wire
from tests.cluster.wait import wait_until

KUEUE: Final = (wire.KUEUE_GROUP, wire.KUEUE_VERSION)
API_VERSION: Final = "/".join(KUEUE)


def now() -> str:
    """A Kubernetes timestamp for the present second."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(obj: dict[str, Any], kind: str) -> str | None:
    """The status of condition `kind`, None when absent."""
    for item in obj.get("status", {}).get("conditions") or []:
        if item.get("type") == kind:
            return str(item.get("status"))
    return None


def check_state(workload: dict[str, Any], check: str) -> str | None:
    """The state of admission check `check` on the Workload, None when it lists no such check."""
    states = workload.get("status", {}).get("admissionChecks") or []
    return next((str(s["state"]) for s in states if s["name"] == check), None)


def reserved_at(workload: dict[str, Any]) -> str | None:
    """When the Workload's quota was reserved (QuotaReserved's time), None when it is not."""
    for item in workload.get("status", {}).get("conditions") or []:
        if item["type"] == "QuotaReserved" and item["status"] == "True":
            return str(item["lastTransitionTime"])
    return None


def workload_versions(
    custom: client.CustomObjectsApi, namespace: str, name: str, *, timeout: float
) -> Iterator[dict[str, Any]]:
    """Every version of one Workload as the API server sends it, for up to `timeout` s: a
    watch, not a poll, so each step of a test follows Kueue's write as closely as the API
    server allows."""
    stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
        custom.list_namespaced_custom_object,
        *KUEUE,
        namespace,
        "workloads",
        field_selector=f"metadata.name={name}",
        timeout_seconds=int(timeout),
    )
    for event in stream:
        yield event["object"]


def next_version(
    versions: Iterator[dict[str, Any]], wanted: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """The next of `versions` that is `wanted`; fails when the watch ends before it."""
    for version in versions:
        if wanted(version):
            return version
    raise AssertionError(f"the watch ended before {what}")


@dataclass(slots=True)
class KueueSetup:
    """Cluster-scoped Kueue objects made for one test; `delete` removes them."""

    custom: client.CustomObjectsApi
    namespace: str
    created: list[tuple[str, str]] = field(default_factory=list)
    # The AdmissionCheck's name where steps that name none (the shipped Jobs) must find it by
    # their default; else one of the test's own.
    check_name: str | None = None
    # The AdmissionCheck is an install's (a bundle's): the setup lists it and never makes it.
    check_installed: bool = False

    @property
    def check(self) -> str:
        """The AdmissionCheck of this project's controller for the test's ClusterQueue."""
        return self.check_name or f"{self.namespace}-check"

    @property
    def local_queue(self) -> str:
        """The LocalQueue in the test's namespace."""
        return "queue"

    def queued_request(self) -> dict[str, str]:
        """Start-request fields that queue a one-CPU TrainJob in this setup's LocalQueue."""
        return {"queue": self.local_queue, "resources_per_node": '{"requests":{"cpu":"1"}}'}

    def _create(self, plural: str, kind: str, name: str, spec: dict[str, Any] | None) -> None:
        body: dict[str, Any] = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}}
        if spec is not None:
            body["spec"] = spec
        self.custom.create_cluster_custom_object(*KUEUE, plural, body)
        self.created.append((plural, name))

    def flavor(self, name: str = "flavor") -> str:
        """The cluster-wide name of one of this setup's ResourceFlavors."""
        return f"{self.namespace}-{name}"

    @property
    def holding_check(self) -> str:
        """A second AdmissionCheck that no controller serves: it stays Pending for ever."""
        return f"{self.namespace}-hold"

    def _install_check(self, name: str, controller: str) -> None:
        self._create("admissionchecks", "AdmissionCheck", name, {"controllerName": controller})
        # The check's controller keeps it Active; without that the ClusterQueue is inactive.
        # This project installs the check once and marks it Active (docs/kueue.md: The steps in
        # Kueue mode).
        self.custom.patch_cluster_custom_object_status(
            *KUEUE,
            "admissionchecks",
            name,
            {
                "status": {
                    "conditions": [
                        {
                            "type": "Active",
                            "status": "True",
                            "reason": "Active",
                            "message": "dispatch-k8s admit/approve steps",
                            "lastTransitionTime": now(),
                        }
                    ]
                }
            },
        )

    def install(
        self,
        *,
        cpu: str,
        priorities: dict[str, int] | None = None,
        flavors: tuple[str, ...] = ("flavor",),
        check_on_flavors: tuple[str, ...] | None = None,
        with_check: bool = True,
        holding: bool = False,
    ) -> None:
        """A ClusterQueue gated by this project's AdmissionCheck: `cpu` nominal quota in each
        of `flavors` (tried in order), the check on all of them or on `check_on_flavors`;
        `with_check=False` makes the same ClusterQueue without any check. `holding` adds the
        `holding_check` too, so a reservation our check approves is never admitted."""
        cluster_queue = f"{self.namespace}-cq"
        if with_check and not self.check_installed:
            self._install_check(self.check, wire.ADMISSION_CHECK_CONTROLLER)
        if holding:
            self._install_check(self.holding_check, "example.invalid/never-ready")
        for flavor in flavors:
            self._create("resourceflavors", "ResourceFlavor", self.flavor(flavor), None)
        for name, value in (priorities or {}).items():
            body = {
                "apiVersion": API_VERSION,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
            self.custom.create_cluster_custom_object(*KUEUE, "workloadpriorityclasses", body)
            self.created.append(("workloadpriorityclasses", name))
        check: dict[str, Any] = {"name": self.check}
        if check_on_flavors is not None:
            check["onFlavors"] = [self.flavor(flavor) for flavor in check_on_flavors]
        checks = [check, *([{"name": self.holding_check}] if holding else [])]
        self._create(
            "clusterqueues",
            "ClusterQueue",
            cluster_queue,
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": self.namespace}
                },
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {
                                "name": self.flavor(flavor),
                                "resources": [{"name": "cpu", "nominalQuota": cpu}],
                            }
                            for flavor in flavors
                        ],
                    }
                ],
                "preemption": {"withinClusterQueue": "LowerPriority"},
                **({"admissionChecksStrategy": {"admissionChecks": checks}} if with_check else {}),
            },
        )
        self.custom.create_namespaced_custom_object(
            *KUEUE,
            self.namespace,
            "localqueues",
            {
                "apiVersion": API_VERSION,
                "kind": "LocalQueue",
                "metadata": {"name": self.local_queue, "namespace": self.namespace},
                "spec": {"clusterQueue": cluster_queue},
            },
        )

        def active() -> bool | None:
            queue = self.custom.get_cluster_custom_object(*KUEUE, "clusterqueues", cluster_queue)
            assert isinstance(queue, dict)
            return condition(queue, "Active") == "True" or None

        wait_until(active, what=f"ClusterQueue {cluster_queue} to be Active", timeout=120)

    def delete(self) -> None:
        """Remove what `install` made, newest first."""
        for plural, name in reversed(self.created):
            try:
                self.custom.delete_cluster_custom_object(*KUEUE, plural, name)
            except ApiException as e:
                if e.status != 404:
                    raise

    def set_active(self, trainjob_uid: str, *, active: bool) -> None:
        """Deactivate (Kueue evicts and suspends the job) or reactivate a TrainJob's Workload."""
        workload = self.workload_of(trainjob_uid)
        assert workload is not None, f"no Workload of TrainJob {trainjob_uid}"
        self.custom.patch_namespaced_custom_object(
            *KUEUE,
            self.namespace,
            "workloads",
            workload["metadata"]["name"],
            {"spec": {"active": active}},
        )

    def workload_of(self, trainjob_uid: str) -> dict[str, Any] | None:
        """The Workload Kueue made for a TrainJob, found by its job-uid label."""
        listed = self.custom.list_namespaced_custom_object(
            *KUEUE,
            self.namespace,
            "workloads",
            label_selector=f"{wire.KUEUE_JOB_UID_LABEL}={trainjob_uid}",
        )
        assert isinstance(listed, dict)
        items: list[dict[str, Any]] = listed["items"]
        return items[0] if items else None
