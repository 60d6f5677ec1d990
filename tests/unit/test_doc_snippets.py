"""Every shell block of README.md and docs/ is run by a test or says why not (issue 26); the
blocks marked `run: unit` need no cluster and are run here."""

from __future__ import annotations

import pytest

from tests.support import snippets
from tests.support.shipped import REPO

_SYNTHETIC = """\
# A page

```sh
echo unmarked
```

<!-- not-run:   -->
```bash
echo reason left empty
```

<!-- run: nightly -->
```console
$ echo a suite nobody runs
```

```
$ echo a prompt in a block with no language
output
```

<!-- not-run: needs a registry to push to -->

```sh
echo the blank line above loses the mark
```

<!-- run: unit -->
```sh
echo run
```

   <!-- not-run: shown only -->
   ```shell
   echo indented in a list item
   ```

```python
print("not shell: no mark needed")
```
"""


def test_every_shell_block_of_the_docs_is_run_or_says_why_not() -> None:
    found, stray = snippets.scan()
    assert len(found) > 30  # the parser still finds the docs' blocks at all
    assert stray + snippets.problems(found) == []


def test_a_block_without_a_disposition_is_named_by_file_and_line() -> None:
    found, stray = snippets.parse("page.md", _SYNTHETIC)
    assert [(s.line, s.language) for s in found] == [
        (3, "sh"),
        (8, "bash"),
        (13, "console"),
        (17, ""),
        (24, "sh"),
        (29, "sh"),
        (34, "shell"),
    ]
    assert stray == ["page.md:22: a `not-run:` mark directly before no shell block"]
    assert snippets.problems(found) == [
        "page.md:3: a `sh` block neither run by a test (<!-- run: SUITE -->) nor marked "
        "<!-- not-run: REASON -->",
        "page.md:8: not-run without a reason",
        "page.md:13: run by 'nightly', not a suite that runs snippets (integration, runbook, unit)",
        "page.md:17: a `$` block neither run by a test (<!-- run: SUITE -->) nor marked "
        "<!-- not-run: REASON -->",
        "page.md:24: a `sh` block neither run by a test (<!-- run: SUITE -->) nor marked "
        "<!-- not-run: REASON -->",
    ]
    assert found[-1].mark == snippets.Mark("not-run", "shown only")


def test_each_suite_that_runs_snippets_has_its_runner_and_blocks_to_run() -> None:
    for suite, runner in snippets.RUNNERS.items():
        assert f'run_by("{suite}")' in (REPO / runner).read_text(), runner
        assert snippets.run_by(suite), f"no block is marked `run: {suite}`"


def test_a_placeholder_is_replaced_as_a_whole_word_only() -> None:
    block = snippets.Snippet("page.md", 1, "sh", "echo team-a team-ab xteam-a\n", None)
    done = snippets.execute(block, replace={"team-a": "ns-1"})
    assert (done.returncode, done.stdout) == (0, "ns-1 team-ab xteam-a\n")


def test_a_block_stops_at_its_first_failing_command() -> None:
    block = snippets.Snippet("page.md", 1, "sh", "false\necho after\n", None)
    done = snippets.execute(block)
    assert (done.returncode, done.stdout) == (1, "")


@pytest.mark.parametrize("snippet", snippets.run_by("unit"), ids=lambda s: s.where)
def test_the_block_runs(snippet: snippets.Snippet) -> None:
    done = snippets.execute(snippet)
    assert done.returncode == 0, f"{snippet.where}\n{snippet.body}\n{done.stdout}\n{done.stderr}"
