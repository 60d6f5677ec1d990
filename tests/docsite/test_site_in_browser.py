"""Every page of the built docs site in headless Chromium: it renders, its console shows no
error, every resource it loads is there, and every link within the site leads to a page (and
anchor) that exists; every diagram is drawn, by the mermaid the site serves itself; and the same
checks catching a page built to fail them."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Final

import pytest
from playwright.sync_api import BrowserContext

from tests.docsite.browser import (
    check_diagrams,
    check_site,
    serve,
    site_diagrams,
    site_pages,
)

pytestmark = pytest.mark.browser

REPO: Final = Path(__file__).resolve().parents[2]
# Kept for a person to look at after the run (git ignores artifacts/); rewritten by every run.
SCREENSHOT: Final = REPO / "artifacts" / "docsite" / "home.png"


def _report(problems: dict[str, list[str]]) -> str:
    return "\n".join(
        f"{path}:\n" + "\n".join(f"  {problem}" for problem in found)
        for path, found in problems.items()
    )


def test_every_page_renders_without_errors_or_dead_links(
    built_site: Path, context: BrowserContext, capsys: pytest.CaptureFixture[str]
) -> None:
    pages = site_pages(built_site)
    assert "/" in pages, f"no home page among {pages}"
    with serve(built_site) as base:
        problems = check_site(context, base, pages)
        home = context.new_page()
        home.goto(base + "/", wait_until="networkidle")
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        home.screenshot(path=SCREENSHOT, full_page=True)
        home.close()
    with capsys.disabled():  # shown on a pass too, where captured output is not
        sys.stdout.write(f"\nthe home page in Chromium: {SCREENSHOT}\n")
    assert not problems, f"{len(problems)} of {len(pages)} pages fail:\n{_report(problems)}"


BROKEN: Final = """<!doctype html>
<html><head><title>broken</title>
<script src="http://192.0.2.1/from-the-internet.js"></script>
</head><body><main><p>No heading.</p>
<a href="/missing/">a page that is not there</a> <a href="#nowhere">an anchor that is not</a>
<a href="/empty/">a directory without index.html</a>
</main><script>console.error("deliberate error")</script></body></html>
"""
FINE: Final = """<!doctype html>
<html><head><title>fine</title></head><body><main><h1 id="top">Fine</h1>
<a href="/broken.html">the broken page</a> <a href="#top">this page's heading</a>
</main></body></html>
"""


def test_a_broken_page_is_reported_and_a_fine_one_is_not(
    tmp_path: Path, context: BrowserContext
) -> None:
    (tmp_path / "broken.html").write_text(BROKEN)
    (tmp_path / "fine.html").write_text(FINE)
    (tmp_path / "empty").mkdir()
    with serve(tmp_path) as base:
        problems = check_site(context, base, ["/broken.html", "/fine.html"])
    assert list(problems) == ["/broken.html"], _report(problems)
    found = "\n".join(problems["/broken.html"])
    for expected in [
        "does not render: no visible 'main h1'",
        "console error: deliberate error",
        "request failed: http://192.0.2.1/from-the-internet.js (net::ERR_BLOCKED_BY_CLIENT",
        "dead link /missing/: HTTP 404",
        "dead link /empty/: HTTP 404",
        "dead link /broken.html#nowhere: no element with that id",
    ]:
        assert expected in found, f"{expected!r} not reported in:\n{found}"


# The diagrams the docs draw (docs/index.md, policies.md, kueue.md): the identity at a glance,
# the path from the TrainJob to the pod, a sequence for each Kueue mode.
DIAGRAMS: Final = {"/": 1, "/policies/": 1, "/kueue/": 2}
VENDORED: Final = REPO / "docs" / "assets" / "vendor" / "mermaid" / "mermaid.min.js"


def test_every_diagram_is_drawn_from_the_sites_own_mermaid(
    built_site: Path, context: BrowserContext, tmp_path: Path
) -> None:
    assert VENDORED.exists(), f"{VENDORED} missing: scripts/setup vendors mermaid from npm"
    assert site_diagrams(built_site) == DIAGRAMS
    # A copy of the site with one page whose diagram mermaid cannot parse.
    site = tmp_path / "site"
    shutil.copytree(built_site, site)
    home = (site / "index.html").read_text()
    (site / "broken.html").write_text(
        home.replace(
            '<pre class="mermaid"><code>flowchart LR',
            '<pre class="mermaid"><code>flowchart LR\n  A -->> ]',
            1,
        )
    )
    with serve(site) as base:
        problems = {path: check_diagrams(context, base, path, n) for path, n in DIAGRAMS.items()}
        broken = check_diagrams(context, base, "/broken.html", 1)
    assert not any(problems.values()), problems
    assert "1 of 1 diagrams not drawn" in broken, broken
    assert any(p.startswith(("uncaught error", "console error")) for p in broken), broken
