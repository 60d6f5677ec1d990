"""`dispatch-kueue-gates`' own flags, with a stand-in `dispatch-admit` that records its words
and stops the loop with exit 2, on PATH or installed beside the loop (which it runs whatever
PATH says): the loop itself runs against the cluster in tests/integration/test_kueue_lifetime.py."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Final

import pytest

REPO: Final = Path(__file__).resolve().parents[2]
GATES: Final = REPO / "bin" / "dispatch-kueue-gates"
BIN: Final = Path(sys.executable).parent


def gates(
    *argv: str, path: str, tmp_path: Path, script: Path = GATES
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(script), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": path, "TMPDIR": str(tmp_path)},  # where it keeps admit's outputs
    )


@pytest.fixture
def admit_words(tmp_path: Path) -> tuple[str, Path]:
    """A PATH whose dispatch-admit writes its words, one a line, to the file returned."""
    words = tmp_path / "admit-words"
    stand_in = tmp_path / "bin" / "dispatch-admit"
    stand_in.parent.mkdir()
    stand_in.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {words}\nexit 2\n")
    stand_in.chmod(0o755)
    return f"{stand_in.parent}:/usr/bin:/bin", words


@pytest.mark.parametrize(
    "namespace",
    [
        ["-n", "team-a"],
        ["-n=team-a"],
        ["-nteam-a"],
        ["--namespace", "team-a"],
        ["--namespace=team-a"],
    ],
)
def test_the_namespace_in_each_spelling_reaches_admit(
    admit_words: tuple[str, Path], namespace: list[str]
) -> None:
    path, words = admit_words
    flags = [*namespace, "--name", "j", "--check", "c", "--wait-seconds=9"]
    done = gates(*flags, path=path, tmp_path=words.parent)
    assert done.returncode == 2, done.stderr  # admit's own code, passed on
    assert words.read_text().splitlines()[:4] == [
        "--namespace=team-a",
        "--name=j",
        "--check=c",
        "--wait",
    ]


@pytest.mark.parametrize("argv", [["--name", "j", "-n"], ["-n", "team-a", "--name"], ["--name=j"]])
def test_a_missing_value_is_the_usage_and_exit_2(
    admit_words: tuple[str, Path], argv: list[str]
) -> None:
    path, words = admit_words
    done = gates(*argv, path=path, tmp_path=words.parent)
    assert done.returncode == 2
    assert "usage: dispatch-kueue-gates -n|--namespace NS --name TRAINJOB" in done.stderr
    assert not words.exists(), "admit is never run"


def test_version_is_the_steps_version_under_its_own_name(tmp_path: Path) -> None:
    done = gates("--version", path=f"{BIN}:/usr/bin:/bin", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"dispatch-kueue-gates (dispatch-k8s) {version('dispatch-k8s')}\n"


def test_the_installed_loop_runs_the_steps_beside_it_with_no_path_to_them(tmp_path: Path) -> None:
    done = gates("--version", path="/usr/bin:/bin", tmp_path=tmp_path, script=BIN / GATES.name)
    assert done.returncode == 0, done.stderr  # was 127: dispatch-admit: not found
    assert done.stdout == f"dispatch-kueue-gates (dispatch-k8s) {version('dispatch-k8s')}\n"


@pytest.fixture
def beside(tmp_path: Path) -> tuple[Path, Path, str]:
    """The loop copied beside a dispatch-admit that records its words and the cluster it was
    given, and a PATH whose first dispatch-admit is another install's (exit 99)."""
    installed = tmp_path / "venv" / "bin"
    installed.mkdir(parents=True)
    script = installed / GATES.name
    script.write_bytes(GATES.read_bytes())
    record = tmp_path / "admit-words"
    stand_in = installed / "dispatch-admit"
    stand_in.write_text(
        "#!/bin/sh\n"
        f'{{ printf "%s\\n" "$@"; echo "kubeconfig=$DISPATCH_KUBECONFIG"; '
        f'echo "context=$DISPATCH_CONTEXT"; }} > {record}\nexit 2\n'
    )
    other = tmp_path / "other" / "bin"
    other.mkdir(parents=True)
    (other / "dispatch-admit").write_text("#!/bin/sh\nexit 99\n")
    for path in (stand_in, other / "dispatch-admit"):
        path.chmod(0o755)
    return script, record, f"{other}:/usr/bin:/bin"


@pytest.mark.parametrize(
    "cluster",
    [
        ["--kubeconfig", "/k/config", "--context", "team a"],
        ["--kubeconfig=/k/config", "--context=team a"],
    ],
)
def test_the_steps_beside_it_run_with_the_kubeconfig_and_context_given(
    beside: tuple[Path, Path, str], cluster: list[str]
) -> None:
    script, record, path = beside
    done = gates(
        "-n", "team-a", "--name", "j", *cluster, path=path, tmp_path=record.parent, script=script
    )
    assert done.returncode == 2, done.stderr  # the stand-in's code, not the other install's 99
    words = record.read_text().splitlines()
    assert words[:2] == ["--namespace=team-a", "--name=j"]
    assert words[-2:] == ["kubeconfig=/k/config", "context=team a"]


def test_without_them_the_steps_read_the_cluster_as_they_would(
    beside: tuple[Path, Path, str],
) -> None:
    script, record, path = beside
    done = gates("-n", "team-a", "--name", "j", path=path, tmp_path=record.parent, script=script)
    assert done.returncode == 2, done.stderr
    assert record.read_text().splitlines()[-2:] == ["kubeconfig=", "context="]


def test_help_tells_the_defaults_the_loop_sets(tmp_path: Path) -> None:
    done = gates("--help", path="/usr/bin:/bin", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    [told] = [line for line in done.stdout.splitlines() if line.startswith("Defaults: ")]
    said = dict(part.split(" ") for part in told.removeprefix("Defaults: ").rstrip(".").split(", "))
    [assigned] = [line for line in GATES.read_text().splitlines() if line.startswith("namespace=")]
    values = dict(word.split("=") for word in assigned.split())
    assert said == {f"--{name.replace('_', '-')}": values[name] for name in values if values[name]}
    # The whole header, to its last line: the help's sed range keeps up with the text.
    last = "rule's refusal (6), a job flagged foreign (7), a bug (1)."
    assert done.stdout.splitlines()[-1] == last
