"""The prologue `start` renders, run as Kubernetes would run it in three kinds of training image.

The TrainJob comes from `dispatch-start --dry-run` in the step image; its command, args and
env (the Downward API values resolved from a pod's annotation and label) run in:

- an image whose only program is a static busybox (its ash is the shell),
- the debootstrapped Debian image (dash is /bin/sh there, as in python:3.11-slim),
- an image without /bin/sh, as built FROM scratch: the container cannot start, and what users
  see is the runtime's "exec: /bin/sh: no such file or directory" (docs/troubleshooting.md:
  Training images need a shell).
"""

from __future__ import annotations

import json
from typing import Any, Final

import docker.errors  # type: ignore[import-untyped]  # docker-py ships no type hints
import pytest

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.rules.identity import Counts, Identity, attempt_token, epoch
from dispatch_k8s.core.rules.prologue import EXIT_REFUSED
from tests.images.containers import Mount, container, run_container
from tests.support.shells import resolve_downward_env
from tests.support.shipped import RUNTIMES

pytestmark = pytest.mark.images
IDENTITY: Final = Identity(job_id="train-42", generation=3, submission=7, attempt=2)
WORKDIR: Final = "/bin"  # present in every image here, so `cd` is seen to happen
# The user command: prints what the job sees, then its own arguments, each bracketed.
REPORT: Final = (
    'printf "%s|%s|%s|%s\\n" "$DISPATCH_EPOCH" "$DISPATCH_ATTEMPT" "$PWD" '
    '"${DISPATCH_K8S_ADMISSION-unset}${DISPATCH_K8S_R-unset}"; printf "[%s]" "$@"'
)
NO_SUCH_SHELL: Final = 'exec: "/bin/sh": stat /bin/sh: no such file or directory'


@pytest.fixture(scope="module")
def trainer(step_image: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`spec.trainer` of the TrainJob `start --dry-run` renders, run in the step image."""
    # A request file, not --command flags: the flags' list parsing splits words at commas and
    # refuses words holding double quotes (reported; the file keeps every word intact).
    request = tmp_path_factory.mktemp("request") / "request.json"
    request.write_text(
        json.dumps(
            {
                "job_id": IDENTITY.job_id,
                "generation": IDENTITY.generation,
                "submission": IDENTITY.submission,
                "attempt": IDENTITY.attempt,
                "image": "any",
                "command": ["/bin/sh", "-c", REPORT],
                "args": ["report", "two words", "*"],  # "report" is $0 of the user's sh -c
                "workdir": WORKDIR,
            }
        )
    )
    request.chmod(0o644)
    run = run_container(
        step_image,
        [
            "dispatch-start",
            "--dry-run",
            "--runtime-file",
            "/runtimes/torch-distributed.yaml",
            "--request-file",
            "/request/request.json",
        ],
        mounts=[
            Mount(host=RUNTIMES, container="/runtimes"),
            Mount(host=request, container="/request/request.json"),
        ],
    )
    assert run.code == 0, run.stderr
    spec: dict[str, Any] = run.result["spec"]["trainer"]
    return spec


def pod_env(trainer: dict[str, Any], *, admission: str, restart: str | None) -> dict[str, str]:
    """The container env the kubelet would give a pod with this A annotation and J label."""
    labels = {} if restart is None else {wire.RESTART_ATTEMPT_KEY: restart}
    pod = {"metadata": {"annotations": {wire.ADMISSION_ANNOTATION: admission}, "labels": labels}}
    return resolve_downward_env(trainer["env"], pod)


def argv(trainer: dict[str, Any]) -> list[str]:
    """What the container runs: the command, then the args (Kubernetes semantics)."""
    return [*trainer["command"], *trainer["args"]]


@pytest.fixture(params=["busybox", "debian"])
def training_image(request: pytest.FixtureRequest) -> str:
    image: str = request.getfixturevalue(f"{request.param}_image")
    return image


def test_the_prologue_gives_epoch_and_attempt(training_image: str, trainer: dict[str, Any]) -> None:
    run = run_container(
        training_image, argv(trainer), env=pod_env(trainer, admission="2", restart="1")
    )
    assert run.code == 0, run.stderr
    counts = Counts(admission=2, restart=1)
    seen, arguments = run.stdout.split("\n")
    assert seen.split("|") == [
        str(epoch(IDENTITY, counts)),  # 3000007000003: R = A + J = 3
        attempt_token(IDENTITY, counts),  # train-42.7.2.2.1
        WORKDIR,
        "unsetunset",  # the DISPATCH_K8S_* scratch values are gone
    ]
    assert arguments == "[two words][*]", "the user's words reach it untouched"
    assert run.stderr == ""


@pytest.mark.parametrize(
    ("admission", "restart", "message"),
    [
        ("08", "0", "DISPATCH_K8S_ADMISSION '08' is not a canonical decimal from 0 to 999999"),
        ("1", None, "DISPATCH_K8S_RESTART is missing or empty"),
        ("999999", "1", "must be below 1000000"),
    ],
    ids=["octal-looking-A", "no-J-label", "R-too-large"],
)
def test_the_prologue_refuses_with_125(
    training_image: str,
    trainer: dict[str, Any],
    admission: str,
    restart: str | None,
    message: str,
) -> None:
    env = pod_env(trainer, admission=admission, restart=restart)
    run = run_container(training_image, argv(trainer), env=env)
    assert run.code == EXIT_REFUSED
    assert run.stdout == "", "the job never ran"
    assert run.stderr.startswith("dispatch: ")
    assert message in run.stderr
    assert run.stderr.count("\n") == 1


def test_an_image_without_a_shell_cannot_start(
    no_shell_image: str, trainer: dict[str, Any]
) -> None:
    made = container(
        no_shell_image, argv(trainer), env=pod_env(trainer, admission="1", restart="0")
    )
    try:
        with pytest.raises(docker.errors.APIError) as failed:
            made.start()
    finally:
        made.stop()
    # The runtime refuses before any of the job runs; Kubernetes shows the same text as the
    # container's StartError message.
    assert NO_SUCH_SHELL in str(failed.value)
