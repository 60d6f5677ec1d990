"""Runtime requirements (docs/design.md §2): the runtimes start refuses, and where."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from dispatch_k8s.core.rules.runtime import (
    MECHANISMS,
    Violation,
    build_refusal,
    decide_violations,
    trainer_job_name,
)
from dispatch_k8s.core.rules.wire import ALLOW_RANK_RESTART_ANNOTATION, ALLOW_RESTARTS_ANNOTATION
from tests.unit.factories import (
    container_dict,
    mpi_runtime_dict,
    replicated_job_dict,
    runtime_dict,
    torch_runtime_with,
)
from tests.unit.fuzz import JSON_VALUES, leaf_paths, with_value

RUNTIMES_DIR = Path(__file__).resolve().parents[2] / "pipelines" / "runtimes"
SHIPPED = sorted(RUNTIMES_DIR.glob("*.yaml"))

JOBS = "spec.template.spec.replicatedJobs"
FAILURE_POLICY = "spec.template.spec.failurePolicy"
JOB = f"{JOBS}[0].template.spec"  # the Job of the first replicated job
POD = f"{JOB}.template.spec"
NODE = f"{POD}.containers[0]"
WORKER_JOB = JOB  # MPI runtimes list the node workers first, as upstream
LAUNCHER_JOB = f"{JOBS}[1].template.spec"
ALLOW = f"metadata.annotations['{ALLOW_RANK_RESTART_ANNOTATION}']"


def paths(runtime: dict[str, Any]) -> list[str]:
    return [violation.path for violation in decide_violations(runtime)]


def load(text: str) -> dict[str, Any]:
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


# --- The runtimes this project ships -------------------------------------------------------


def test_ships_a_torch_and_an_mpi_runtime() -> None:
    policies = {key for path in SHIPPED for key in load(path.read_text())["spec"]["mlPolicy"]}
    assert {"torch", "mpi"} <= policies


@pytest.mark.parametrize("path", SHIPPED, ids=[path.name for path in SHIPPED])
def test_shipped_runtime_passes_without_allowing_rank_restart(path: Path) -> None:
    runtime = load(path.read_text())
    assert ALLOW_RANK_RESTART_ANNOTATION not in runtime["metadata"].get("annotations", {})
    assert decide_violations(runtime) == ()


@pytest.mark.parametrize(
    ("file_name", "expected"),
    [("torch-distributed.yaml", "node"), ("mpi-distributed.yaml", "launcher")],
)
def test_shipped_runtime_names_its_trainer_job(file_name: str, expected: str) -> None:
    assert trainer_job_name(load((RUNTIMES_DIR / file_name).read_text())) == expected


# --- Runtimes shaped like upstream's built-ins (kubeflow/trainer v2.2.1 manifests/base/runtimes):
# none states restartPolicy or backoffLimit.

UPSTREAM_TORCH = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch-distributed
spec:
  mlPolicy:
    numNodes: 1
    torch:
      numProcPerNode: auto
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: trainer
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime
                      command:
                        - /bin/bash
                        - -c
                        - |
                          echo "Torch Distributed Runtime"
                          env | grep PET_
                          pip list
"""

UPSTREAM_DEEPSPEED = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: deepspeed-distributed
  labels:
    trainer.kubeflow.org/framework: deepspeed
spec:
  mlPolicy:
    numNodes: 1
    mpi:
      numProcPerNode: 1
      mpiImplementation: OpenMPI
      sshAuthMountPath: /home/mpiuser/.ssh
      runLauncherAsNode: true
  template:
    spec:
      network:
        publishNotReadyAddresses: true
      successPolicy:
        operator: All
        targetReplicatedJobs:
          - launcher
      replicatedJobs:
        - name: node
          template:
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: ghcr.io/kubeflow/trainer/deepspeed-runtime
                      command:
                        - /usr/sbin/sshd
                      args:
                        - -De
                        - -f
                        - /home/mpiuser/.sshd_config
        - name: launcher
          dependsOn:
            - name: node
              status: Ready
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: trainer
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: ghcr.io/kubeflow/trainer/deepspeed-runtime
"""


def upstream_single_node(name: str, policy: str, image: str) -> str:
    """JAX and XGBoost built-ins: one trainer job, one container, nothing else stated."""
    return f"""
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: {name}
  labels:
    trainer.kubeflow.org/framework: {policy}
spec:
  mlPolicy:
    numNodes: 1
    {policy}: {{}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: trainer
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: {image}
"""


UNSTATED_ON_FIRST_JOB = [f"{POD}.restartPolicy", f"{JOB}.backoffLimit"]


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        pytest.param(UPSTREAM_TORCH, UNSTATED_ON_FIRST_JOB, id="torch-distributed"),
        pytest.param(
            UPSTREAM_DEEPSPEED,
            [
                f"{WORKER_JOB}.template.spec.restartPolicy",
                f"{WORKER_JOB}.backoffLimit",
                f"{LAUNCHER_JOB}.template.spec.restartPolicy",
                f"{LAUNCHER_JOB}.backoffLimit",
            ],
            id="deepspeed-distributed-launcher-and-node",
        ),
        pytest.param(
            upstream_single_node("jax-distributed", "jax", "nvcr.io/nvidia/jax:25.10-py3"),
            UNSTATED_ON_FIRST_JOB,
            id="jax-distributed",
        ),
        pytest.param(
            upstream_single_node(
                "xgboost-distributed", "xgboost", "ghcr.io/kubeflow/trainer/xgboost-runtime"
            ),
            UNSTATED_ON_FIRST_JOB,
            id="xgboost-distributed",
        ),
    ],
)
def test_upstream_builtin_is_refused_for_unstated_defaults(
    manifest: str, expected: list[str]
) -> None:
    violations = decide_violations(load(manifest))
    assert [violation.path for violation in violations] == expected
    assert "stated" in violations[0].message
    assert "OnFailure" in violations[0].message  # says why unset is not enough
    assert "6" in violations[1].message


# --- Each setting, alone on a dispatch-ready runtime ---------------------------------------


INIT = f"{POD}.initContainers[0]"


def with_init_container(**fields: Any) -> dict[str, Any]:
    """A dispatch-ready torch runtime whose trainer pod has an init container with `fields`."""
    return torch_runtime_with(pod_fields={"initContainers": [container_dict("prep", **fields)]})


def jobset_with(**fields: Any) -> dict[str, Any]:
    runtime = runtime_dict()
    runtime["spec"]["template"]["spec"].update(fields)
    return runtime


def pod_failure_rules(*actions: str) -> dict[str, Any]:
    return {"podFailurePolicy": {"rules": [{"action": action} for action in actions]}}


def pet_max_restarts(**source: Any) -> list[dict[str, Any]]:
    return [{"name": "OTHER", "value": "3"}, {"name": "PET_MAX_RESTARTS", **source}]


# Refused unless the runtime allows rank restarts: each replaces a failed rank, A and J unmoved.
RANK_RESTART_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "podFailurePolicy-Ignore": (
        torch_runtime_with(job_fields=pod_failure_rules("FailJob", "Ignore")),
        f"{JOB}.podFailurePolicy.rules[1].action",
    ),
    "container-restartPolicy": (
        torch_runtime_with(restartPolicy="OnFailure"),
        f"{NODE}.restartPolicy",
    ),
    "container-restartPolicyRules": (
        torch_runtime_with(
            restartPolicy="Never",  # a stated Never alone restarts nothing
            restartPolicyRules=[
                {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}
            ],
        ),
        f"{NODE}.restartPolicyRules",
    ),
    "sidecar-restartPolicy-Always": (
        torch_runtime_with(
            pod_fields={
                "initContainers": [
                    container_dict("setup"),
                    container_dict("loader", restartPolicy="Always"),
                ]
            }
        ),
        f"{POD}.initContainers[1].restartPolicy",
    ),
    "failurePolicy-RestartJob": (
        runtime_dict(failure_policy={"rules": [{"name": "one", "action": "RestartJob"}]}),
        f"{FAILURE_POLICY}.rules[0].action",
    ),
    "failurePolicy-RestartJobAndIgnoreMaxRestarts": (
        runtime_dict(
            failure_policy={
                "maxRestarts": 2,
                "rules": [{"action": "FailJobSet"}, {"action": "RestartJobAndIgnoreMaxRestarts"}],
            }
        ),
        f"{FAILURE_POLICY}.rules[1].action",
    ),
    "env-PET_MAX_RESTARTS": (
        torch_runtime_with(env=pet_max_restarts(value="3")),
        f"{NODE}.env[1].value",
    ),
    "env-PET_MAX_RESTARTS-valueFrom": (
        torch_runtime_with(
            env=pet_max_restarts(valueFrom={"configMapKeyRef": {"name": "c", "key": "k"}})
        ),
        f"{NODE}.env[1]",
    ),
    "args---max-restarts-N": (
        torch_runtime_with(command=["torchrun"], args=["--nnodes=2", "--max-restarts", "3"]),
        f"{NODE}.args[1]",
    ),
    "command---max-restarts=N": (
        with_init_container(command=["torchrun", "--max-restarts=2", "t.py"]),
        f"{INIT}.command[1]",
    ),
    "command---max_restarts-value-in-args": (
        with_init_container(command=["torchrun", "--max_restarts"], args=["1", "t.py"]),
        f"{INIT}.command[1]",
    ),
    "shell-script---max-restarts": (
        with_init_container(command=["/bin/sh", "-c", "pip list\ntorchrun --max-restarts 4 t.py"]),
        f"{INIT}.command[2]",
    ),
    "args-abbreviated---max-r=N": (
        torch_runtime_with(args=["--nnodes=2", "--max-r=3", "t.py"]),
        f"{NODE}.args[1]",
    ),
    "args-abbreviated---max-N": (
        torch_runtime_with(args=["--max", "3", "t.py"]),
        f"{NODE}.args[0]",
    ),
    "envFrom-without-prefix": (
        torch_runtime_with(envFrom=[{"configMapRef": {"name": "torch-env"}}]),
        f"{NODE}.envFrom[0]",
    ),
    "envFrom-prefix-PET_": (
        torch_runtime_with(envFrom=[{"prefix": "PET_", "secretRef": {"name": "s"}}]),
        f"{NODE}.envFrom[0]",
    ),
    "shell-script-PET_MAX_RESTARTS": (
        torch_runtime_with(command=["/bin/sh", "-c"], args=["export PET_MAX_RESTARTS=2; torchrun"]),
        f"{NODE}.args[0]",
    ),
    "mpi-node-worker-podFailurePolicy-Ignore": (
        mpi_runtime_dict(
            node=replicated_job_dict("node", trainer=False, job_fields=pod_failure_rules("Ignore"))
        ),
        f"{WORKER_JOB}.podFailurePolicy.rules[0].action",
    ),
}

# Refused always: allowRankRestart never waives them.
REQUIRED_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "restartPolicy-unset": (
        runtime_dict(replicated_job_dict(restart_policy=None)),
        f"{POD}.restartPolicy",
    ),
    "restartPolicy-OnFailure": (
        runtime_dict(replicated_job_dict(restart_policy="OnFailure")),
        f"{POD}.restartPolicy",
    ),
    "backoffLimit-unset": (
        runtime_dict(replicated_job_dict(backoff_limit=None)),
        f"{JOB}.backoffLimit",
    ),
    "backoffLimit-6": (runtime_dict(replicated_job_dict(backoff_limit=6)), f"{JOB}.backoffLimit"),
    "backoffLimit-false-is-not-0": (
        runtime_dict(replicated_job_dict(backoff_limit=False)),
        f"{JOB}.backoffLimit",
    ),
    "no-trainer-job": (runtime_dict(replicated_job_dict(trainer=False)), JOBS),
    "trainer-job-unnamed": (runtime_dict(replicated_job_dict("")), f"{JOBS}[0].name"),
    "mpi-node-worker-restartPolicy-unset": (
        mpi_runtime_dict(node=replicated_job_dict("node", trainer=False, restart_policy=None)),
        f"{WORKER_JOB}.template.spec.restartPolicy",
    ),
    "mpi-launcher-backoffLimit-unset": (
        mpi_runtime_dict(launcher=replicated_job_dict("launcher", backoff_limit=None)),
        f"{LAUNCHER_JOB}.backoffLimit",
    ),
    # These cannot work with backoffLimit: 0 (or would rerun an execution): never waivable.
    "backoffLimitPerIndex": (
        torch_runtime_with(job_fields={"backoffLimitPerIndex": 1}),
        f"{JOB}.backoffLimitPerIndex",
    ),
    "maxFailedIndexes": (
        torch_runtime_with(job_fields={"maxFailedIndexes": 1}),
        f"{JOB}.maxFailedIndexes",
    ),
    "failurePolicy-InPlaceRestart": (
        runtime_dict(failure_policy={"maxRestarts": 2, "restartStrategy": "InPlaceRestart"}),
        f"{FAILURE_POLICY}.restartStrategy",
    ),
    "jobset-ttlSecondsAfterFinished": (
        jobset_with(ttlSecondsAfterFinished=60),
        "spec.template.spec.ttlSecondsAfterFinished",
    ),
    "jobset-managedBy": (
        jobset_with(managedBy="example.com/other"),
        "spec.template.spec.managedBy",
    ),
    "job-ttlSecondsAfterFinished": (
        torch_runtime_with(job_fields={"ttlSecondsAfterFinished": 0}),
        f"{JOB}.ttlSecondsAfterFinished",
    ),
    "job-managedBy": (
        torch_runtime_with(job_fields={"managedBy": "example.com/other"}),
        f"{JOB}.managedBy",
    ),
    "second-trainer-job": (
        runtime_dict(replicated_job_dict("node"), replicated_job_dict("extra")),
        f"{JOBS}[1].template.metadata.labels['trainer.kubeflow.org/trainjob-ancestor-step']",
    ),
    "mlPolicy-flux": (
        runtime_dict(ml_policy={"numNodes": 1, "flux": {"numProcPerNode": 1}}),
        "spec.mlPolicy.flux",
    ),
}
ALL_CASES = {**RANK_RESTART_CASES, **REQUIRED_CASES}


def allowing(runtime: dict[str, Any], value: Any = "true") -> dict[str, Any]:
    allowed = copy.deepcopy(runtime)
    allowed["metadata"]["annotations"] = {ALLOW_RANK_RESTART_ANNOTATION: value}
    return allowed


@pytest.mark.parametrize(("runtime", "expected"), ALL_CASES.values(), ids=ALL_CASES.keys())
def test_setting_is_refused_at_its_field_path(runtime: dict[str, Any], expected: str) -> None:
    assert paths(runtime) == [expected]


@pytest.mark.parametrize(
    ("runtime", "expected"), RANK_RESTART_CASES.values(), ids=RANK_RESTART_CASES.keys()
)
def test_allow_rank_restart_lets_rank_restart_settings_pass(
    runtime: dict[str, Any], expected: str
) -> None:
    assert paths(allowing(runtime)) == []


@pytest.mark.parametrize(
    ("runtime", "expected"), REQUIRED_CASES.values(), ids=REQUIRED_CASES.keys()
)
def test_allow_rank_restart_never_waives_the_required_settings(
    runtime: dict[str, Any], expected: str
) -> None:
    assert paths(allowing(runtime)) == [expected]


@pytest.mark.parametrize(
    "runtime",
    [
        pytest.param(runtime_dict(), id="dispatch-ready-torch"),
        pytest.param(mpi_runtime_dict(), id="dispatch-ready-mpi"),
        pytest.param(
            runtime_dict(
                failure_policy={
                    "maxRestarts": 5,
                    "restartStrategy": "BlockingRecreate",
                    "rules": [
                        {"action": "RestartJobSet"},
                        {"action": "RestartJobSetAndIgnoreMaxRestarts"},
                        {"action": "FailJobSet"},
                    ],
                }
            ),
            id="jobset-restarts-raise-J",
        ),
        pytest.param(
            torch_runtime_with(
                job_fields=pod_failure_rules("FailJob", "FailIndex", "Count"),
                pod_fields={"initContainers": [container_dict("setup", restartPolicy="Never")]},
                restartPolicy="Never",  # restarts nothing
                env=pet_max_restarts(value="0"),
                command=["torchrun", "--max-restarts", "0", "--max_restarts=00"],
                args=["--max-restarts-note=3"],  # another flag: torchrun has none
            ),
            id="zero-restarts-stated",
        ),
        pytest.param(
            runtime_dict(
                replicated_job_dict(
                    "dataset-initializer",
                    trainer=False,
                    restart_policy=None,
                    backoff_limit=None,
                    job_fields={"backoffLimitPerIndex": 2},
                ),
                replicated_job_dict(),
            ),
            id="initializer-jobs-are-not-ranks",
        ),
        pytest.param(
            runtime_dict(
                replicated_job_dict("launcher"),
                replicated_job_dict("node", trainer=False, restart_policy=None),
            ),
            id="node-job-without-mpi-is-not-a-rank",
        ),
    ],
)
def test_runtime_passes(runtime: dict[str, Any]) -> None:
    assert decide_violations(runtime) == ()


def test_the_trainer_command_never_runs_and_is_not_checked() -> None:
    # start's prologue replaces the trainer container's command; its args run unless the
    # request gives its own.
    runtime = torch_runtime_with(
        command=["torchrun", "--max-restarts=3"], args=["--max-restarts", "3"]
    )
    assert paths(runtime) == [f"{NODE}.args[0]"]
    request = {"command": ["python", "train.py"], "args": ["--lr", "0.1"], "env": {}}
    assert decide_violations(runtime, request) == ()


def test_an_init_containers_own_max_restarts_flag_passes_unless_it_runs_torchrun() -> None:
    own_tool = with_init_container(command=["fetch-data", "--max-restarts=5"])
    assert decide_violations(own_tool) == ()
    torchrun = with_init_container(
        command=["python", "-m", "torch.distributed.run"], args=["--max-r=2"]
    )
    assert paths(torchrun) == [f"{INIT}.args[0]"]


def test_envfrom_with_another_prefix_passes() -> None:
    runtime = torch_runtime_with(envFrom=[{"prefix": "APP_", "configMapRef": {"name": "c"}}])
    assert decide_violations(runtime) == ()


@pytest.mark.parametrize(
    ("request_words", "expected"),
    [
        ({"command": ["torchrun", "--max-restarts=3", "t.py"]}, "request.command[1]"),
        ({"command": ["torchrun", "--max-r=3", "t.py"]}, "request.command[1]"),
        ({"command": ["torchrun"], "args": ["--max_restarts", "2"]}, "request.args[0]"),
        ({"command": ["sh", "-c", "torchrun --max-re 1 t.py"]}, "request.command[2]"),
        ({"command": ["torchrun"], "env": {"PET_MAX_RESTARTS": "3"}}, "request.env[0].value"),
    ],
    ids=["flag", "abbreviated", "in-args", "in-a-script", "env"],
)
def test_the_request_words_are_checked(request_words: dict[str, Any], expected: str) -> None:
    violations = decide_violations(runtime_dict(), request_words)
    assert [v.path for v in violations] == [expected]
    assert "torchrun restarts the ranks in place" in violations[0].message
    assert decide_violations(allowing(runtime_dict()), request_words) == ()


def test_zero_restarts_in_the_request_pass() -> None:
    words = {"command": ["torchrun", "--max-restarts=0"], "env": {"PET_MAX_RESTARTS": "0"}}
    assert decide_violations(runtime_dict(), words) == ()


# --- The allowRankRestart annotation ---------------------------------------------------------

BACKOFF_PER_INDEX = runtime_dict(replicated_job_dict(job_fields={"backoffLimitPerIndex": 1}))


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("yes", id="yes"),
        pytest.param("True", id="True"),
        pytest.param("1", id="1"),
        pytest.param(True, id="yaml-boolean"),
        pytest.param(" true", id="padded"),
    ],
)
def test_allow_annotation_typo_is_refused_and_allows_nothing(value: Any) -> None:
    assert paths(allowing(runtime_dict(), value)) == [ALLOW]
    assert paths(allowing(BACKOFF_PER_INDEX, value)) == [ALLOW, f"{JOB}.backoffLimitPerIndex"]


def test_empty_allow_annotation_allows_nothing() -> None:
    assert paths(allowing(runtime_dict(), "")) == []
    assert paths(allowing(BACKOFF_PER_INDEX, "")) == [f"{JOB}.backoffLimitPerIndex"]


# --- Malformed shapes are violations, never crashes ------------------------------------------


def keys_of(path: str) -> list[str | int]:
    """`a.b[0].c` -> ["a", "b", 0, "c"]: the same field paths the violations name."""
    return [int(index) if index else key for key, index in re.findall(r"(\w+)|\[(\d+)\]", path)]


@pytest.mark.parametrize(
    ("where", "value", "expected"),
    [
        pytest.param("spec", [], "spec", id="spec-list"),
        pytest.param("metadata.annotations", ["x"], "metadata.annotations", id="annotations"),
        pytest.param("spec.mlPolicy", "mpi", "spec.mlPolicy", id="mlPolicy-string"),
        pytest.param(JOBS, {}, JOBS, id="replicatedJobs-mapping"),
        pytest.param(f"{JOBS}[0]", "node", f"{JOBS}[0]", id="replicatedJob-string"),
        pytest.param(
            f"{JOBS}[0].template.metadata.labels",
            ["trainer"],
            f"{JOBS}[0].template.metadata.labels",
            id="labels-list",
        ),
        pytest.param(f"{JOB}.template", 7, f"{JOB}.template", id="pod-template-number"),
        pytest.param(f"{POD}.containers", {}, f"{POD}.containers", id="containers-mapping"),
        pytest.param(f"{NODE}.env", ["A=1"], f"{NODE}.env[0]", id="env-entry-string"),
        pytest.param(f"{NODE}.args", "torchrun", f"{NODE}.args", id="args-string"),
        pytest.param(f"{NODE}.args", ["--x", 3], f"{NODE}.args[1]", id="args-word-number"),
        pytest.param(
            FAILURE_POLICY,
            {"rules": "RestartJob"},
            f"{FAILURE_POLICY}.rules",
            id="failurePolicy-rules-string",
        ),
    ],
)
def test_malformed_shape_is_refused_at_its_path(where: str, value: Any, expected: str) -> None:
    assert expected in paths(with_value(runtime_dict(), keys_of(where), value))


READY_MPI = mpi_runtime_dict(
    failure_policy={"rules": [{"action": "FailJobSet"}]},
    node=replicated_job_dict(
        "node",
        trainer=False,
        containers=[container_dict(env=[{"name": "A", "value": "1"}], args=["-De"])],
        job_fields={"podFailurePolicy": {"rules": [{"action": "FailJob"}]}},
        pod_fields={"initContainers": [container_dict("setup")]},
    ),
)


@given(where=st.sampled_from(leaf_paths(READY_MPI)), value=JSON_VALUES)
def test_any_value_anywhere_gives_violations_not_a_crash(
    where: list[str | int], value: Any
) -> None:
    runtime = with_value(READY_MPI, where, value)
    violations = decide_violations(runtime)
    assert all(isinstance(violation, Violation) for violation in violations)
    assert "\n" not in build_refusal(runtime, violations)


# --- The refusal -------------------------------------------------------------------------


def test_refusal_names_the_runtime_and_every_path_on_one_line() -> None:
    runtime = load(UPSTREAM_DEEPSPEED)
    refusal = build_refusal(runtime, decide_violations(runtime))
    assert refusal.startswith(
        "ClusterTrainingRuntime/deepspeed-distributed is not dispatch-ready: "
    )
    assert "\n" not in refusal
    for path in paths(runtime):
        assert f"{path}: must" in refusal


def test_refusal_names_a_namespaced_runtime_with_its_namespace() -> None:
    runtime = runtime_dict(
        replicated_job_dict(restart_policy="OnFailure"),
        kind="TrainingRuntime",
        name="team-torch",
        namespace="team-a",
    )
    assert build_refusal(runtime, decide_violations(runtime)) == (
        "TrainingRuntime/team-torch in namespace team-a is not dispatch-ready: "
        f"{POD}.restartPolicy: must be Never, not 'OnFailure': the kubelet would restart a "
        "failed container in place, moving neither A nor J"
    )


def test_refusal_shows_a_long_value_shortened() -> None:
    runtime = allowing(runtime_dict(), "yes" * 500)
    refusal = build_refusal(runtime, decide_violations(runtime))
    assert refusal.endswith(f"""{ALLOW}: must be "true" or absent, not '{"yes" * 12}...""")


# --- The trainer job's name, for the runtime patch -------------------------------------------


@pytest.mark.parametrize(
    ("runtime", "expected"),
    [
        pytest.param(mpi_runtime_dict(), "launcher", id="mpi-launcher-not-node"),
        pytest.param(
            runtime_dict(replicated_job_dict("init", trainer=False), replicated_job_dict("train")),
            "train",
            id="labelled-not-first",
        ),
        pytest.param(runtime_dict(replicated_job_dict(trainer=False)), None, id="none-labelled"),
        pytest.param(runtime_dict(replicated_job_dict("")), None, id="unnamed"),
        pytest.param({"spec": {"template": []}}, None, id="malformed"),
    ],
)
def test_trainer_job_name(runtime: dict[str, Any], expected: str | None) -> None:
    assert trainer_job_name(runtime) == expected


# --- Opt-ins per mechanism -------------------------------------------------------------------

SIDECAR = "sidecar-restartPolicy-Always"
MECHANISM_OF: dict[str, str] = {
    SIDECAR: "sidecars",
    "container-restartPolicy": "container-restart",
    "podFailurePolicy-Ignore": "pod-failure-ignore",
    "failurePolicy-RestartJob": "restart-job",
    "env-PET_MAX_RESTARTS": "torchrun",
    "args-abbreviated---max-r=N": "torchrun",
    "envFrom-without-prefix": "torchrun",
}


def listing(runtime: dict[str, Any], mechanisms: str) -> dict[str, Any]:
    allowed = copy.deepcopy(runtime)
    allowed["metadata"]["annotations"] = {ALLOW_RESTARTS_ANNOTATION: mechanisms}
    return allowed


@pytest.mark.parametrize("case", sorted(MECHANISM_OF))
def test_each_mechanism_is_allowed_alone_and_allows_nothing_else(case: str) -> None:
    runtime, expected = RANK_RESTART_CASES[case]
    mechanism = MECHANISM_OF[case]
    assert f"allowed by {ALLOW_RESTARTS_ANNOTATION}: {mechanism}" in str(
        decide_violations(runtime)[0]
    )
    assert paths(listing(runtime, mechanism)) == []
    others = ",".join(m for m in MECHANISMS if m != mechanism)
    assert paths(listing(runtime, others)) == [expected]


def test_a_log_shipping_sidecar_is_allowed_without_allowing_torchrun_restarts() -> None:
    runtime = torch_runtime_with(
        pod_fields={"initContainers": [container_dict("logs", restartPolicy="Always")]},
        env=pet_max_restarts(value="3"),
    )
    assert paths(listing(runtime, "sidecars")) == [f"{NODE}.env[1].value"]


@pytest.mark.parametrize("value", ["sidecar", "sidecars,torch", "", 3])
def test_an_unknown_mechanism_is_refused(value: Any) -> None:
    runtime = listing(runtime_dict(), value)
    if value == "":
        assert paths(runtime) == []
    else:
        assert paths(runtime) == [f"metadata.annotations['{ALLOW_RESTARTS_ANNOTATION}']"]
