"""`kubectl-dispatch`: the kubectl plugin: `kubectl dispatch status|doctor [NAME] [flags]`.

kubectl runs an executable named kubectl-dispatch found on PATH for `kubectl dispatch ...`,
with the words after `dispatch`. The first is the subcommand; the rest go to its step.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Final

from dispatch_k8s.core.rules.errors import BadInput
from dispatch_k8s.core.shell.settings import version_text
from dispatch_k8s.steps import doctor, status

PROG: Final = "kubectl-dispatch"
SUBCOMMANDS: Final[dict[str, Callable[[], None]]] = {"status": status.main, "doctor": doctor.main}
USAGE: Final = """\
usage: kubectl dispatch SUBCOMMAND [NAME] [flags]

subcommands:
  status    dispatch-status: each TrainJob's mode, A, J, R, epoch and attempt (read-only);
            NAME is --name NAME; kubectl dispatch status --help tells its flags
  doctor    dispatch-doctor: the install's preflight, one row per check with its fix
            (read-only; exit 8 when a check fails)

example:
  kubectl dispatch status train-42-3f9c1a2b -n team-a
  kubectl dispatch doctor -n team-a
"""


def main() -> None:
    """Run the subcommand's step with the words after it; unknown: the usage and exit 2."""
    args = sys.argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE)
        raise SystemExit(0)
    if args[:1] == ["--version"]:
        sys.stdout.write(version_text(PROG))
        raise SystemExit(0)
    step = SUBCOMMANDS.get(args[0]) if args else None
    if step is None:
        told = f"unknown subcommand {args[0]!r}" if args else "no subcommand given"
        sys.stderr.write(f"{PROG}: {told}\n{USAGE}")
        raise SystemExit(BadInput.exit_code)
    rest = args[1:]
    if rest and not rest[0].startswith("-"):  # kubectl's NAME right after the subcommand
        rest = ["--name", rest[0], *rest[1:]]
    sys.argv = [f"{PROG} {args[0]}", *rest]
    step()
