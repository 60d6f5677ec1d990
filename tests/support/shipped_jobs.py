"""The shipped step Jobs of pipelines/jobs/ run on the real node as a user runs them: filled in
where each manifest says to fill in, changed where the node forces it (executions.on_the_node)
and nowhere else. Each pod that ran is compared with the pod its filled-in manifest makes,
admitted by the API server in a namespace enforcing Pod Security `restricted`."""

from __future__ import annotations

import contextlib
import copy
import json
import secrets
from collections.abc import Iterator
from typing import Any, Final

import yaml
from kubernetes import client

from tests.cluster import kube
from tests.cluster.engine import BUSYBOX
from tests.cluster.engines import loopback_api_env
from tests.cluster.node import TOLERATION
from tests.cluster.wait import wait_until
from tests.support.executions import DEADLINE, IDENTITY, RUNS, on_the_node
from tests.support.lifecycle import as_dict
from tests.support.node_controller import comparable, differences
from tests.support.render import JOBS
from tests.support.shipped import documents
from tests.support.step_identity import SERVICE_ACCOUNT

# What the pod that ran may differ in from the pod its manifest makes: the node forces the
# first three (on_the_node); the scheduler sets the last on every cluster.
FORCED: Final = frozenset({"hostNetwork", "tolerations", "containers[0].env", "nodeName"})
# The request the start Job reads, filled in as the ConfigMap's comment says: a request of
# this machine's (its image is on the node, its command prints the execution until stopped,
# its work dir one the image has: busybox has no /workspace).
REQUEST: Final[dict[str, Any]] = {
    "job_id": IDENTITY.job_id,
    "generation": IDENTITY.generation,
    "submission": IDENTITY.submission,
    "attempt": IDENTITY.attempt,
    "image": BUSYBOX,
    "command": ["/bin/sh", "-c", RUNS],
    "workdir": "/",
}
RESTRICTED: Final = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


@contextlib.contextmanager
def restricted_namespace(api: client.ApiClient) -> Iterator[str]:
    """A namespace that enforces Pod Security `restricted`, with the steps' ServiceAccount
    (the ServiceAccount admission plugin refuses a pod whose account is missing)."""
    core = client.CoreV1Api(api)
    name = f"restricted-{secrets.token_hex(3)}"
    meta = client.V1ObjectMeta(name=name, labels=RESTRICTED)
    core.create_namespace(client.V1Namespace(metadata=meta))
    try:
        account = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=SERVICE_ACCOUNT))
        core.create_namespaced_service_account(name, account)
        yield name
    finally:
        core.delete_namespace(name)


def started_request(runtime: str, queued: dict[str, str] | None = None) -> dict[str, Any]:
    """pipelines/jobs/start-request.yaml with REQUEST filled in and `runtime` named; queued in
    Kueue with `queued` (KueueSetup.queued_request's fields)."""
    (config_map,) = documents(JOBS / "start-request.yaml")
    request = yaml.safe_load(config_map["data"]["request.yaml"])
    request.update(REQUEST, runtime_name=runtime)
    if queued is not None:
        request.update(
            queue=queued["queue"], resources_per_node=json.loads(queued["resources_per_node"])
        )
    config_map["data"]["request.yaml"] = yaml.safe_dump(request)
    return config_map


def filled(job: dict[str, Any], **values: str) -> dict[str, Any]:
    """The shipped Job with each env var of `values` given its value, as its comment says."""
    job = copy.deepcopy(job)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    for env in container["env"]:
        if env["name"] in values:
            assert "value" in env, f"{env['name']} is filled in only where it is a literal"
            env["value"] = values.pop(env["name"])
    assert not values, f"the manifest has no {sorted(values)}"
    return job


def with_args(job: dict[str, Any], **values: str) -> dict[str, Any]:
    """The shipped Job with each `--flag=value` of its container's args given the value of
    `values` named as the flag (dashes as underscores), as its comment says to fill them in."""
    job = copy.deepcopy(job)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    args = []
    for arg in container["args"]:
        flag, equals, _ = arg.partition("=")
        key = flag.removeprefix("--").replace("-", "_")
        args.append(f"{flag}={values.pop(key)}" if equals and key in values else arg)
    assert not values, f"the manifest has no {sorted(values)}"
    container["args"] = args
    return job


def from_cron_job(cron_job: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """One run of a CronJob as `kubectl create job --from=cronjob/NAME` makes it: its
    jobTemplate, owned by the CronJob as `stored`."""
    template = copy.deepcopy(cron_job["spec"]["jobTemplate"])
    owner = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "name": stored["metadata"]["name"],
        "uid": stored["metadata"]["uid"],
        "controller": True,
    }
    metadata = {
        **template.get("metadata", {}),
        "generateName": f"{cron_job['metadata']['name']}-manual-",
        "ownerReferences": [owner],
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": template["spec"]}


def results(log: str) -> list[dict[str, Any]]:
    """The result lines a step printed on stdout: its pod's log holds stderr too, where its
    log lines are JSON with a level (core/shell/runner.py)."""
    lines = [dict(json.loads(line)) for line in log.splitlines() if line.startswith("{")]
    return [line for line in lines if "level" not in line]


class ShippedJobs:
    """Runs filled-in shipped Jobs on the node in `namespace`, each pod checked against the
    one its manifest makes where `restricted` (restricted_namespace) is enforced."""

    def __init__(self, api: client.ApiClient, namespace: str, *, restricted: str, port: int):
        self.api, self.namespace, self.restricted, self.port = api, namespace, restricted, port
        self.core, self.batch = client.CoreV1Api(api), client.BatchV1Api(api)

    def run(self, job: dict[str, Any]) -> str:
        """Run `job` (filled in) with the node's changes alone; its pod's log once it succeeded.

        Before: the pod the filled-in Job makes is admitted where `restricted` is enforced.
        After: the pod that ran differs from it in the FORCED fields alone, each as forced."""
        template = job["spec"]["template"]
        admitted = kube.dry_run(self.api, _pod(template), namespace=self.restricted)
        on_node = copy.deepcopy(job)
        on_node["spec"]["template"]["spec"] = on_the_node(template["spec"], self.port)
        name = kube.apply(self.api, on_node, namespace=self.namespace)["metadata"]["name"]

        def finished() -> dict[str, Any] | None:
            status = as_dict(self.batch.read_namespaced_job(name, self.namespace)).get("status")
            return status if status and (status.get("succeeded") or status.get("failed")) else None

        status = wait_until(finished, what=f"Job {name} to finish", timeout=DEADLINE)
        listed = as_dict(
            self.core.list_namespaced_pod(self.namespace, label_selector=f"job-name={name}")
        )
        (ran,) = listed["items"]
        log = str(self.core.read_namespaced_pod_log(ran["metadata"]["name"], self.namespace))
        assert status.get("succeeded") == 1, log
        assert "Traceback" not in log, log
        self._as_shipped(admitted["spec"], ran["spec"])
        return log

    def _as_shipped(self, admitted: dict[str, Any], ran: dict[str, Any]) -> None:
        found = differences(comparable(admitted), comparable(ran))
        assert set(found) == FORCED, {k: v for k, v in found.items() if k not in FORCED}
        assert ran["hostNetwork"] is True
        assert ran["tolerations"] == [TOLERATION, *admitted["tolerations"]]
        (shipped_container,), (ran_container,) = admitted["containers"], ran["containers"]
        assert ran_container["env"] == [*shipped_container["env"], *loopback_api_env(self.port)]


def _pod(template: dict[str, Any]) -> dict[str, Any]:
    """The pod a Job's `template` makes (its name generated)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**copy.deepcopy(template.get("metadata", {})), "generateName": "as-shipped-"},
        "spec": copy.deepcopy(template["spec"]),
    }
