"""Fixtures of the site tests: Debian's Chromium under Playwright, and the site built as
.ci/run builds it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from playwright.sync_api import Browser, BrowserContext, sync_playwright

from tests.docsite.browser import launch, loopback_context

REPO: Final = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    """Debian's chromium (scripts/setup installs it), headless; closed after the session."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("Debian's chromium is not installed: scripts/setup installs it")
    with sync_playwright() as playwright:
        browser = launch(playwright, Path(executable))
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def context(chromium: Browser) -> Iterator[BrowserContext]:
    """A fresh context (no cache, no storage) that reaches 127.0.0.1 only."""
    with loopback_context(chromium) as context:
        yield context


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `mkdocs build --strict` makes it from mkdocs.yml and docs/."""
    site = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stderr}"
    return site
