"""The prologue, run for real in each of the eight shells (docs/design.md §2)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatch_k8s.core.rules import wire
from dispatch_k8s.core.rules.identity import Counts, Identity, attempt_token, epoch
from dispatch_k8s.core.rules.prologue import EXIT_REFUSED, PROLOGUE, wrap_command
from tests.support.shells import SHELLS, Shell, shell_argv0

IDENTITY = Identity(job_id="job-1", generation=3, submission=7, attempt=2)
# Prints what the job sees, one value per line, then each argument bracketed.
REPORT = [
    "/bin/sh",
    "-c",
    'printf "%s\\n" "$DISPATCH_EPOCH" "$DISPATCH_ATTEMPT" "$PWD" '
    '"${DISPATCH_K8S_ADMISSION-unset}${DISPATCH_K8S_R-unset}"; printf "[%s]" "$@"',
    "report",
]


@dataclass(frozen=True, slots=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def links(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shells")


def run_prologue(
    shell: Shell,
    links: Path,
    *,
    admission: str | None,
    restart: str | None,
    command: list[str],
    identity: Identity = IDENTITY,
    workdir: str | None = None,
    locale: str | None = None,
) -> Outcome:
    env = {
        "PATH": "/usr/bin:/bin",
        wire.ENV_EPOCH_PREFIX: str(identity.epoch_prefix),
        wire.ENV_TOKEN_PREFIX: identity.token_prefix,
    }
    for key, value in (
        (wire.ENV_ADMISSION, admission),
        (wire.ENV_RESTART, restart),
        (wire.ENV_WORKDIR, workdir),
    ):
        if value is not None:
            env[key] = value
    if locale is not None:
        env["LC_ALL"] = locale
    argv = wrap_command(command)
    argv[0] = shell_argv0(shell, links)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
    return Outcome(done.returncode, done.stdout, done.stderr)


def test_wrapped_command_hands_the_user_command_over_as_positional_words() -> None:
    assert wrap_command(["python", "train.py"]) == [
        "/bin/sh",
        "-c",
        PROLOGUE,
        "dispatch-prologue",
        "python",
        "train.py",
    ]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s.name)
def test_first_execution_sees_r_1(shell: Shell, links: Path, tmp_path: Path) -> None:
    seen = run_prologue(
        shell,
        links,
        admission="1",
        restart="0",
        command=[*REPORT, "a b", "$HOME", "*", "-n", ""],
        workdir=str(tmp_path),
    )
    assert seen.code == 0, seen.stderr
    lines = seen.stdout.splitlines()
    assert lines[0] == "3000007000001"
    assert lines[1] == "job-1.7.2.1.0"
    assert lines[2] == str(tmp_path)
    assert lines[3] == "unsetunset", "the prologue's own variables must not reach the job"
    assert lines[4] == "[a b][$HOME][*][-n][]"
    assert seen.stderr == ""


# Words a shell would split, glob, expand or execute if the prologue re-parsed them.
HOSTILE_WORDS = [
    "$(touch pwned)",
    "`touch pwned`",
    "; touch pwned",
    "'",
    '"',
    "\\",
    "\n",
    "*",
    "${HOME}",
    "%s%n",
    "-e",
    "a\tb",
    " ",
]
NON_ASCII_WORDS = ["\u00e9\u2603", "\U0001f600"]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s.name)
def test_user_words_reach_exec_verbatim(shell: Shell, links: Path, tmp_path: Path) -> None:
    seen = run_prologue(
        shell,
        links,
        admission="1",
        restart="0",
        command=["/usr/bin/printf", "[%s]", *HOSTILE_WORDS],
        workdir=str(tmp_path),
    )
    assert seen.code == 0, seen.stderr
    assert seen.stdout == "".join(f"[{w}]" for w in HOSTILE_WORDS)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s.name)
def test_non_ascii_words_reach_exec_verbatim(shell: Shell, links: Path) -> None:
    # yash converts its own arguments to wide characters at start-up, before the prologue
    # runs: in the C locale it empties non-ASCII words. A UTF-8 locale is what such images
    # set; the other seven shells pass bytes through in any locale.
    locale = "C.UTF-8" if shell.binary == "yash" else None
    seen = run_prologue(
        shell,
        links,
        admission="1",
        restart="0",
        command=["/usr/bin/printf", "[%s]", *NON_ASCII_WORDS],
        locale=locale,
    )
    assert seen.code == 0, seen.stderr
    assert seen.stdout == "".join(f"[{w}]" for w in NON_ASCII_WORDS)


REFUSED_COUNTERS = [
    ("unset", None, "0"),
    ("empty", "", "0"),
    ("leading-zero", "08", "0"),
    ("double-zero", "00", "0"),
    ("negative", "-1", "0"),
    ("plus", "+1", "0"),
    ("space", " 1", "0"),
    ("trailing-newline", "1\n", "0"),
    ("hex", "0x1", "0"),
    ("exponent", "1e3", "0"),
    ("arithmetic", "1+1", "0"),
    ("command-substitution", "$(echo 1)", "0"),
    ("name", "HOME", "0"),
    ("glob", "*", "0"),
    ("seven-digits", "1000000", "0"),
    ("huge", "99999999999999999999", "0"),
    ("arabic-indic", "\u0661", "0"),
    ("fullwidth", "\uff11", "0"),
    ("j-unset", "1", None),
    ("j-empty", "1", ""),
    ("j-octal", "1", "010"),
    ("j-wraps-int64", "1", "18446744073709551617"),
    ("r-at-bound", "999999", "1"),
    ("r-both-halves", "500000", "500000"),
]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s.name)
@pytest.mark.parametrize(
    ("admission", "restart"),
    [c[1:] for c in REFUSED_COUNTERS],
    ids=[c[0] for c in REFUSED_COUNTERS],
)
def test_bad_counters_exit_125_with_one_dispatch_line(
    shell: Shell, links: Path, admission: str | None, restart: str | None
) -> None:
    seen = run_prologue(shell, links, admission=admission, restart=restart, command=REPORT)
    assert seen.code == EXIT_REFUSED
    assert seen.stdout == "", "the user command must not run"
    assert seen.stderr.startswith("dispatch: ")
    assert seen.stderr.count("\n") == 1, seen.stderr


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s.name)
@pytest.mark.parametrize(
    ("workdir", "command"),
    [("/nonexistent/dir", REPORT), ("relative/dir", REPORT), (None, ["-x"]), (None, [])],
    ids=["workdir-missing", "workdir-relative", "command-like-option", "no-command"],
)
def test_unusable_workdir_or_command_exits_125(
    shell: Shell, links: Path, workdir: str | None, command: list[str]
) -> None:
    seen = run_prologue(shell, links, admission="1", restart="0", command=command, workdir=workdir)
    assert seen.code == EXIT_REFUSED
    assert seen.stdout == ""
    assert seen.stderr.startswith("dispatch: ")
    assert seen.stderr.count("\n") == 1


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s.name)
def test_largest_r_and_largest_epoch_are_exact(shell: Shell, links: Path) -> None:
    largest = Identity(job_id="j", generation=9_223_371, submission=999_999, attempt=0)
    seen = run_prologue(
        shell, links, admission="999998", restart="1", command=REPORT, identity=largest
    )
    assert seen.code == 0, seen.stderr
    assert seen.stdout.splitlines()[0] == "9223371999999999999"


job_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s.name)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    job_id=job_ids,
    generation=st.integers(0, 9_223_371),
    submission=st.integers(0, 999_999),
    attempt=st.integers(0, 10**6),
    admission=st.integers(0, 999_999),
    restart=st.integers(0, 999_999),
)
def test_prologue_agrees_with_the_core(
    shell: Shell,
    links: Path,
    job_id: str,
    generation: int,
    submission: int,
    attempt: int,
    admission: int,
    restart: int,
) -> None:
    if generation == 0 and submission == 0:
        submission = 1
    ident = Identity(job_id=job_id, generation=generation, submission=submission, attempt=attempt)
    seen = run_prologue(
        shell, links, admission=str(admission), restart=str(restart), command=REPORT, identity=ident
    )
    counts = Counts(admission=admission, restart=restart)
    if counts.r > 999_999:
        assert seen.code == EXIT_REFUSED
        assert seen.stderr.startswith("dispatch: R = A + J")
        return
    assert seen.code == 0, seen.stderr
    lines = seen.stdout.splitlines()
    assert lines[0] == str(epoch(ident, counts))
    assert lines[1] == attempt_token(ident, counts)
