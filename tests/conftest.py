"""Fixtures shared by every test that needs a cluster.

`control_plane` starts the local control plane once per pytest run (tests/cluster/harness.py), or,
when DISPATCH_TEST_KUBECONFIG names a kubeconfig, uses that cluster instead (docs/design.md §4).
`namespace` gives each test a fresh namespace and deletes it afterwards. The shipped admission
policies are installed once (tests/support/policies.py) and apply in every test's namespace unless
the test is marked `@pytest.mark.policies("guard")` (the ValidatingAdmissionPolicies only) or
`@pytest.mark.policies("none")`.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from types import FrameType
from typing import Final, NoReturn

import pytest
from hypothesis import settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.cluster import binaries, extras, seaweedfs
from tests.cluster.harness import ControlPlane
from tests.cluster.wait import wait_until
from tests.support import policies, tools
from tests.support.cluster_under_test import EXISTING_CLUSTER_ENV, Cluster
from tests.support.shipped import install_runtime

# No per-example deadline: tests assert behaviour, not speed (benchmarks measure that), and a
# deadline trips at random on two busy cores.
settings.register_profile("dispatch", deadline=None)
settings.load_profile("dispatch")

_PLANE: Final = pytest.StashKey[ControlPlane]()
_ABSENT: Final = pytest.StashKey[list[str]]()  # control-plane components not built yet
_NAME_UNSAFE: Final = re.compile(r"[^a-z0-9-]+")
_TESTS: Final = Path(__file__).resolve().parent
# The version matrix's other cells (docs/install.md, Supported versions) run these, marked
# `matrix` here (`pytest -m matrix`), where the default cell runs every suite: what the
# Kubernetes and Trainer releases decide. The policies are the API server's code (CEL,
# admission), the adversarial matrix and the rest of the real node are the kubelet's and
# Trainer's path to the container, Kueue mode is Kueue's TrainJob integration against the
# Trainer beside it, and the runtime snapshot is what Trainer v2.3.0 added.
MATRIX: Final = tuple(
    _TESTS / path
    for path in (
        "integration/test_policies.py",
        "integration/test_policies_create.py",
        "integration/test_policies_path.py",
        "integration/test_policy_mode.py",
        "integration/test_kueue_mode.py",
        "integration/test_kueue_lifetime.py",
        "integration/test_kueue_requests.py",
        "integration/test_runtime_snapshot.py",
        "node",
    )
)


def _interrupted(_signal: int, _frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt


def pytest_configure() -> None:
    """A SIGTERM (a CI timeout, `kill`) ends the run as Ctrl-C does: pytest then tears the
    session down, so the control plane stops and the node removes its containers, mounts and
    cgroups and puts the sysctls back. Left to its default, SIGTERM ends pytest at once and
    leaves them on the host."""
    signal.signal(signal.SIGTERM, _interrupted)


@pytest.fixture(scope="session")
def control_plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """One control plane for the whole run, or the cluster DISPATCH_TEST_KUBECONFIG names."""
    existing = os.environ.get(EXISTING_CLUSTER_ENV)
    if existing:
        yield Cluster(kubeconfig=Path(existing), plane=None)
        return
    # With the node: its taint keeps every pod off it but those of runtimes that tolerate it
    # (tests/node), so the tests that play the kubelet still find their pods unscheduled.
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"), node=True)
    plane.start()  # raises with the component logs if anything fails to become ready
    request.config.stash[_PLANE] = plane
    try:
        yield Cluster(kubeconfig=plane.kubeconfig, plane=plane)
        # The upstream controllers run with their own RBAC: a right it does not grant them is
        # a defect of the design or the harness, whichever test's writes met it.
        denied = plane.refused_by_rbac()
        assert not denied, "RBAC refused the upstream controllers:\n" + "\n".join(
            f"{e['user']['username']} {e['verb']} {e['requestURI']}" for e in denied
        )
    finally:
        del request.config.stash[_PLANE]
        plane.stop()


@pytest.fixture(scope="session")
def api_client(control_plane: Cluster) -> Iterator[client.ApiClient]:
    """A Kubernetes API client for the cluster under test."""
    # kubernetes.config is not annotated (only kubernetes.client is).
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(control_plane.kubeconfig)
    )
    with contextlib.closing(api):
        yield api


@pytest.fixture(scope="session")
def admission_policies(api_client: client.ApiClient, control_plane: Cluster) -> None:
    """pipelines/policies/ installed, bound to the test namespaces, and acting: trusting the
    local control plane's controllers, or on an existing cluster the shipped (upstream) ones."""
    identities = policies.HARNESS_CONTROLLERS if control_plane.plane is not None else None
    policies.install(api_client, install_runtime(api_client), controllers=identities)


def _namespace_name(test_name: str) -> str:
    base = _NAME_UNSAFE.sub("-", test_name.lower()).strip("-")[:40].rstrip("-")
    return f"{base}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(
    request: pytest.FixtureRequest, api_client: client.ApiClient, admission_policies: None
) -> Iterator[str]:
    """A fresh namespace named after the test, where the policies it is marked with apply
    (default: all); deleted (not awaited) afterwards."""
    core = client.CoreV1Api(api_client)
    name = _namespace_name(request.node.name)
    marker = request.node.get_closest_marker("policies")
    applied: policies.Policies = marker.args[0] if marker else "all"
    core.create_namespace(policies.namespace_body(name, applied))
    # The ServiceAccount admission plugin refuses pods until the namespace's `default`
    # ServiceAccount exists (kube-controller-manager makes it within milliseconds).
    wait_until(
        lambda: (
            core.list_namespaced_service_account(name, field_selector="metadata.name=default").items
            or None
        ),
        what=f"ServiceAccount {name}/default",
        timeout=60,
    )
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except ApiException as e:
            if e.status != 404:
                raise


def _needs_plane(item: pytest.Item) -> bool:
    """The session's control plane, or one of the test's own (marked `cluster`)."""
    uses_session_plane = "control_plane" in getattr(item, "fixturenames", ())
    return uses_session_plane or item.get_closest_marker("cluster") is not None


def _runs_engines(item: pytest.Item) -> bool:
    """A test on Argo's or Tekton's controllers, whose binaries build after the control plane's."""
    return "engines" in getattr(item, "fixturenames", ())


def _runs_release_tools(item: pytest.Item) -> bool:
    """A test of a module that runs kustomize or helm (tests/support/tools.py), which
    scripts/setup builds after the control plane's binaries: run after the plane's tests, by
    when they are built, it does not build them at once beside the plane and hold it up."""
    module = item.getparent(pytest.Module)
    return module is not None and getattr(module.obj, "tools", None) is tools


def _stores(item: pytest.Item) -> bool:
    """A test of the checkpoint library against SeaweedFS (tests/storage), built last."""
    return item.get_closest_marker("storage") is not None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--part",
        metavar="K/N",
        help="run only the Kth of N parts of the selected tests: every Nth from the Kth, in run "
        "order (tests/lanes.py splits the node suite so)",
    )


def _part(value: str) -> tuple[int, int]:
    k, _, n = value.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise pytest.UsageError(f"--part {value}: expected K/N with 1 <= K <= N")
    return int(k), int(n)


def _in_matrix(item: pytest.Item) -> bool:
    """A test of the suites the version matrix's other cells run (MATRIX)."""
    return any(item.path == suite or suite in item.path.parents for suite in MATRIX)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests that need no cluster first, each group in its collected order: on a new
    machine they run while the control plane's binaries build in the background; then those on
    the plane; those that run kustomize or helm, which build after the plane; those on
    the Argo and Tekton engines, which build after those two; the storage suite last, as
    SeaweedFS is the last binary that background build makes (scripts/setup's order). MATRIX's
    are marked `matrix`. With --part K/N, only every Nth of them from the Kth: a matrix's cells
    alternate between the parts."""
    for item in filter(_in_matrix, items):
        item.add_marker(pytest.mark.matrix)
    items.sort(
        key=lambda item: (
            _stores(item),
            _runs_engines(item),
            _runs_release_tools(item),
            _needs_plane(item),
        )
    )
    if (value := config.getoption("--part")) is not None:
        k, n = _part(value)
        config.hook.pytest_deselected(items=[t for i, t in enumerate(items) if i % n != k - 1])
        items[:] = items[k - 1 :: n]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse at once when the local control plane is needed and Go, to build it, is not."""
    if os.environ.get(EXISTING_CLUSTER_ENV) or not any(map(_needs_plane, session.items)):
        return
    try:
        session.config.stash[_ABSENT] = binaries.missing()
    except FileNotFoundError as e:
        raise pytest.UsageError(
            f"the local control plane is built with Go, which is not installed ({e}); "
            f"or set {EXISTING_CLUSTER_ENV} to use an existing cluster"
        ) from e


def _engines() -> None:
    """Argo's and Tekton's binaries (on the local control plane only)."""
    if not os.environ.get(EXISTING_CLUSTER_ENV):
        binaries.binaries(engines=True)


# What a fixture's setup waits for on a new machine, which scripts/setup builds or installs in
# the background: had by the first test that uses the fixture, outside its timeout. The lanes
# reach them within minutes of the control plane, before the background work is done.
_BACKGROUND: Final[dict[str, tuple[str, Callable[[], object]]]] = {
    "engines": ("Argo's and Tekton's binaries", _engines),
    "s3_endpoint": ("SeaweedFS's binary", seaweedfs.weed),
    "torch_installed": ("torch", extras.wait_for_torch),
}
_HAD: Final = pytest.StashKey[set[str]]()  # the fixtures of _BACKGROUND already had


def _tell(item: pytest.Item, line: str) -> None:
    reporter = item.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """Before the first test that needs the control plane, have its binaries: wait for the
    background build (scripts/setup starts it), or build what it left; likewise before the
    first test of each fixture in _BACKGROUND. Outside every test's timeout: this wrapper runs
    before pytest-timeout's starts the clock."""
    absent = item.config.stash.get(_ABSENT, [])
    if absent and _needs_plane(item):
        _tell(
            item,
            f"the control plane's {', '.join(absent)}: waiting for their background build, "
            f"or building what it left ({binaries.cold_build_time(absent)} cold on 2 cores)",
        )
        binaries.binaries()  # a build under way is waited for (its lock); a missing one is built
        item.config.stash[_ABSENT] = []
    had = item.config.stash.setdefault(_HAD, set())
    for fixture in set(getattr(item, "fixturenames", ())) & _BACKGROUND.keys() - had:
        what, have = _BACKGROUND[fixture]
        _tell(item, f"{what}: waiting for the background build or install, or doing what it left")
        have()
        had.add(fixture)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the control plane's log tails to every failed test that used it."""
    report = yield
    plane = item.config.stash.get(_PLANE, None)
    if report.failed and plane is not None and "control_plane" in item.fixturenames:  # type: ignore[attr-defined]
        report.sections.append(("control plane logs", plane.log_tails()))
    return report
