"""The shell snippets of README.md and docs/: found, checked for a disposition, and run.

Every shell block is marked by an HTML comment on the line directly before its fence, which
the Markdown source shows and the rendered site (and GitHub) hides:

    <!-- run: unit -->                        a test of that suite runs it (RUNNERS)
    <!-- not-run: needs a registry to push to -->   not run here, and why

`problems` names, by file:line, every block that has neither, a reason left empty, a suite no
test runs, and a mark that stands before no shell block (a blank line between them is enough
to lose it). docs/development.md ("Commands in the docs") is the writer's side of this.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.support.environment import host_env
from tests.support.shipped import REPO

# Suite -> the test module that runs every block marked `run: <suite>`: a mark naming any
# other suite is a problem, so no block is marked as run by a test that does not exist.
RUNNERS: Final = {
    "unit": "tests/unit/test_doc_snippets.py",  # no cluster: a few seconds in all
    "integration": "tests/integration/test_doc_snippets.py",  # against the test cluster
    # docs/operations.md's runbook for a job flagged foreign, on such a job, the controller on
    "runbook": "tests/integration/test_auditor.py",
}
# Fence languages that hold commands; a block with no language holds commands when a line
# starts with a `$ ` prompt (output shown after a command).
SHELL_LANGUAGES: Final = frozenset(
    {"sh", "bash", "shell", "console", "zsh", "shell-session", "sh-session", "shellsession"}
)
_FENCE: Final = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_MARK: Final = re.compile(r"^\s*<!--\s*(?P<kind>run|not-run):(?P<value>.*?)-->\s*$")
_PROMPT: Final = re.compile(r"^\s*\$ ")


@dataclass(frozen=True)
class Mark:
    """A `<!-- run: suite -->` (kind "run") or `<!-- not-run: reason -->` comment."""

    kind: str
    value: str  # the suite, or the reason


@dataclass(frozen=True)
class Snippet:
    """One shell block: where its opening fence is, its language, its text and its mark."""

    path: str  # relative to the repository
    line: int  # 1-based, of the opening fence
    language: str
    body: str
    mark: Mark | None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _mark(line: str) -> Mark | None:
    found = _MARK.match(line)
    return Mark(found["kind"], found["value"].strip()) if found else None


def parse(path: str, text: str) -> tuple[list[Snippet], list[str]]:
    """The shell blocks of one Markdown text, and the marks that stand before none of them
    (as "path:line: ..." problems)."""
    lines = text.split("\n")
    snippets: list[Snippet] = []
    used: set[int] = set()  # 0-based lines of marks that stand before a shell block
    inside: set[int] = set()  # 0-based lines within fences, where a mark is only text
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence = opening["fence"]
        language = opening["info"].split()[0].lower() if opening["info"].strip() else ""
        end = i + 1
        # A closing fence: the same character, at least as long, nothing after it.
        while end < len(lines) and not re.fullmatch(
            rf"\s*{re.escape(fence[0])}{{{len(fence)},}}\s*", lines[end]
        ):
            end += 1
        body = lines[i + 1 : end]
        inside.update(range(i, end + 1))
        if language in SHELL_LANGUAGES or (not language and any(_PROMPT.match(b) for b in body)):
            mark = _mark(lines[i - 1]) if i > 0 else None
            if mark is not None:
                used.add(i - 1)
            snippets.append(Snippet(path, i + 1, language, "\n".join(body) + "\n", mark))
        i = end + 1
    stray = [
        f"{path}:{n + 1}: a `{m.kind}:` mark directly before no shell block"
        for n, line in enumerate(lines)
        if n not in inside and (m := _mark(line)) is not None and n not in used
    ]
    return snippets, stray


def problems(snippets: Iterable[Snippet]) -> list[str]:
    """Every block neither run by a known suite nor marked not-run with a reason."""
    found = []
    for s in snippets:
        if s.mark is None:
            found.append(
                f"{s.where}: a `{s.language or '$'}` block neither run by a test "
                "(<!-- run: SUITE -->) nor marked <!-- not-run: REASON -->"
            )
        elif s.mark.kind == "not-run" and not s.mark.value:
            found.append(f"{s.where}: not-run without a reason")
        elif s.mark.kind == "run" and s.mark.value not in RUNNERS:
            found.append(
                f"{s.where}: run by {s.mark.value!r}, not a suite that runs snippets "
                f"({', '.join(sorted(RUNNERS))})"
            )
    return found


def documents() -> list[Path]:
    """README.md and every page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def scan() -> tuple[list[Snippet], list[str]]:
    """Every shell block of the documents, and the stray marks among them."""
    snippets: list[Snippet] = []
    stray: list[str] = []
    for document in documents():
        found, lost = parse(str(document.relative_to(REPO)), document.read_text())
        snippets += found
        stray += lost
    return snippets, stray


def run_by(suite: str) -> list[Snippet]:
    """The blocks marked `run: <suite>`, in document order."""
    return [s for s in scan()[0] if s.mark == Mark("run", suite)]


def execute(
    snippet: Snippet,
    *,
    replace: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    first: Sequence[Path] = (),
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run a block as the docs show it, from the repository's root, stopping at the first
    command that fails (`sh -e`), with the directories `first` and then this interpreter's
    console scripts (dispatch-start, ...) ahead on PATH, and none of the test's DISPATCH_*
    variables (tests/support/environment.py). `replace` swaps a placeholder word
    for the test's value (team-a for its namespace): whole words only, so team-a never
    matches inside team-ab."""
    body = snippet.body
    for word, value in (replace or {}).items():
        # A replacement's backslashes are escapes to re.sub: doubled, the value goes in as is.
        body = re.sub(rf"(?<![\w-]){re.escape(word)}(?![\w-])", value.replace("\\", "\\\\"), body)
    path = os.pathsep.join([*map(str, first), str(Path(sys.executable).parent), os.environ["PATH"]])
    return subprocess.run(
        ["sh", "-e", "-c", body],
        cwd=REPO,
        env=host_env({"PATH": path, **(env or {})}),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
