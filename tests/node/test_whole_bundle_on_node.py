"""dist/install.yaml installed whole, as `kubectl apply --server-side -f` installs it, on a control
plane of this module's own with the real node: its policies bound cluster-wide, the steps'
ServiceAccount and RBAC (cluster-wide for the runtimes) in `default`, the path guard's
parameters in dispatch-system under Pod Security `restricted`, and its runtimes, all unchanged.
Then a job through what it installed, as a platform engineer's user runs one: the shipped start
and unsuspend Jobs as the installed `dispatch-steps` (tests/support/shipped_jobs.py), and the
training process on the node prints R = 1. With the shipped default parameters the upstream
controllers' every write goes through (Trainer's JobSet, JobSet's Job, the Job controller's
pods), and no request of theirs is refused by RBAC.

The plane is the module's own: the bundle binds its policies in every namespace, which the
session's plane, whose tests choose theirs per namespace, must not have.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Final

import pytest
from kubernetes import client, config

from release import dist
from tests.cluster import kube
from tests.cluster.harness import ControlPlane
from tests.support.cluster_under_test import EXISTING_CLUSTER_ENV
from tests.support.executions import TRAINER, api_port, expected, node_runtime, printed
from tests.support.lifecycle import as_dict
from tests.support.render import JOBS
from tests.support.shipped import documents
from tests.support.shipped_jobs import (
    RESTRICTED,
    ShippedJobs,
    filled,
    restricted_namespace,
    results,
    started_request,
)
from tests.support.step_identity import SERVICE_ACCOUNT

pytestmark = [pytest.mark.node, pytest.mark.cluster, pytest.mark.images]

BUNDLE: Final = dist.DIST / "install.yaml"
# Where the bundle puts the steps' ServiceAccount and Role: the namespace a user runs them in.
STEPS_NAMESPACE: Final = "default"


@pytest.fixture(scope="module")
def bundle_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane with the node, of this module's own."""
    if os.environ.get(EXISTING_CLUSTER_ENV):
        pytest.skip("installs a bundle cluster-wide on a local control plane of its own")
    with ControlPlane(tmp_path_factory.mktemp("bundle-plane"), node=True) as plane:
        yield plane


def test_the_plain_bundle_installed_whole_runs_a_job_through_the_shipped_jobs(
    bundle_plane: ControlPlane, step_image: str
) -> None:
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(bundle_plane.kubeconfig)
    )
    with contextlib.closing(api), restricted_namespace(api) as restricted:
        bundle = dist.objects(BUNDLE.read_text())
        for o in bundle:
            kube.apply(api, o, namespace=None)
        (namespace,) = [o for o in bundle if o["kind"] == "Namespace"]
        stored = as_dict(client.CoreV1Api(api).read_namespace(namespace["metadata"]["name"]))
        assert RESTRICTED.items() <= stored["metadata"]["labels"].items(), "as shipped"
        (account,) = [o for o in bundle if o["kind"] == "ServiceAccount"]
        assert (account["metadata"]["name"], account["metadata"]["namespace"]) == (
            SERVICE_ACCOUNT,
            STEPS_NAMESPACE,
        )

        assert bundle_plane.node is not None
        bundle_plane.node.import_images([step_image])
        runtime = node_runtime()  # the bundle's torch runtime, its pods on the node
        client.CustomObjectsApi(api).create_cluster_custom_object(
            *TRAINER, "clustertrainingruntimes", runtime
        )
        port = api_port(bundle_plane.kubeconfig)
        jobs = ShippedJobs(api, STEPS_NAMESPACE, restricted=restricted, port=port)

        kube.apply(api, started_request(runtime["metadata"]["name"]), namespace=STEPS_NAMESPACE)
        (start,) = documents(JOBS / "start.yaml")
        (started,) = results(jobs.run(start))
        assert started["outcome"] == "created", started
        name = str(started["name"])
        (unsuspend,) = documents(JOBS / "unsuspend.yaml")
        (opened,) = results(jobs.run(filled(unsuspend, DISPATCH_NAME=name)))
        assert opened["admission"] == 1, opened
        first = printed(client.CoreV1Api(api), STEPS_NAMESPACE, name, restart=0, admission=1)
        assert (first.epoch, first.attempt) == expected(1, 0)
    assert bundle_plane.refused_by_rbac() == []
