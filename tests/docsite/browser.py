"""A built site served on 127.0.0.1 and opened page by page in headless Chromium, driven
through Playwright (its Python package, with Debian's chromium rather than a browser of its
own): what each page shows, what its console says, which of its requests fail, where its links
lead."""

from __future__ import annotations

import contextlib
import http.server
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urldefrag, urlsplit

from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Error,
    Page,
    Playwright,
    Request,
    Response,
    Route,
)
from playwright.sync_api import TimeoutError as PlaywrightTimeout

LOOPBACK: Final = "127.0.0.1"
# What every page of the site shows when it has rendered: mkdocs-material puts the page's
# title (its first heading) inside <main>.
CONTENT: Final = "main h1"


class _SiteHandler(http.server.SimpleHTTPRequestHandler):
    def list_directory(self, path: str | os.PathLike[str]) -> None:
        """A directory without index.html is a missing page (a web server's default), not a
        listing: the base class would answer a link to `/concepts/` with 200 and its files."""
        self.send_error(404, "no index.html")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        """Keep the test's output to its findings: the browser reports every failed request."""


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve `directory` on 127.0.0.1 at a port the kernel picks; yields the base URL."""
    server = http.server.ThreadingHTTPServer(
        (LOOPBACK, 0), partial(_SiteHandler, directory=str(directory))
    )
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def launch(playwright: Playwright, executable: Path) -> Browser:
    """Headless Chromium that can reach nothing but 127.0.0.1."""
    return playwright.chromium.launch(
        executable_path=executable,
        headless=True,
        # Chromium refuses to start as root with its sandbox, and the tests run as root (CI
        # included). The sandbox guards a machine against the pages it opens; these are the
        # repository's own pages, served on loopback, and nothing else is reachable.
        chromium_sandbox=False,
        # Every host but 127.0.0.1 resolves to nothing, so neither a page nor Chromium's own
        # background services (which Playwright's default flags mostly switch off) reach the
        # network by name; a page's requests to other addresses are refused by
        # `loopback_context`.
        args=[f"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE {LOOPBACK}"],
    )


def _off_loopback(url: str) -> bool:
    host = urlsplit(url).hostname
    return host is not None and host != LOOPBACK  # data: and blob: URLs have no host


@contextlib.contextmanager
def loopback_context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh browser context whose pages' requests off 127.0.0.1 fail (each is then reported
    as a failed request of the page that made it)."""
    # Service workers' requests would bypass the routing below (none of the site's pages has one).
    context = browser.new_context(service_workers="block")
    try:
        context.route(_off_loopback, _refuse)
        yield context
    finally:
        context.close()


def _refuse(route: Route) -> None:
    route.abort("blockedbyclient")


@dataclass
class _PageCheck:
    """What one page showed: its problems, the same-origin links on it, its element ids."""

    problems: list[str] = field(default_factory=list)
    links: set[str] = field(default_factory=set)
    ids: set[str] = field(default_factory=set)


def _pages(site: Path) -> dict[str, Path]:
    """Every page a build produced, by its path (`concepts/index.html` is `/concepts/`)."""
    return {
        "/" + page.relative_to(site).as_posix().removesuffix("index.html"): page
        for page in sorted(site.rglob("*.html"))
    }


def site_pages(site: Path) -> list[str]:
    """The path of every page a build produced."""
    return list(_pages(site))


def _open_page(context: BrowserContext, base: str, path: str) -> _PageCheck:
    """Open one page and wait until its network is idle, so that the theme's scripts have run."""
    check = _PageCheck()
    page = context.new_page()
    try:
        _listen(page, check.problems)
        response = page.goto(base + path, wait_until="networkidle")
        if response is None or response.status != 200:
            status = "no response" if response is None else f"HTTP {response.status}"
            check.problems.append(f"the page itself: {status}")
            return check
        _read(page, base, check)
    finally:
        page.close()
    return check


def _listen(page: Page, problems: list[str]) -> None:
    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console error: {message.text}")

    def on_page_error(error: Error) -> None:
        problems.append(f"uncaught error: {error.message}")

    def on_request_failed(request: Request) -> None:
        problems.append(f"request failed: {request.url} ({request.failure})")

    def on_response(response: Response) -> None:
        if response.status >= 400:
            problems.append(f"resource {response.url}: HTTP {response.status}")

    page.on("console", on_console)
    page.on("pageerror", on_page_error)
    page.on("requestfailed", on_request_failed)
    page.on("response", on_response)


def _read(page: Page, base: str, check: _PageCheck) -> None:
    if not page.title().strip():
        check.problems.append("does not render: no <title>")
    heading = page.locator(CONTENT).first
    if not heading.is_visible() or not heading.inner_text().strip():
        check.problems.append(f"does not render: no visible {CONTENT!r}")
    hrefs: list[str] = page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)")
    check.links = {href for href in hrefs if href.startswith(base + "/")}
    ids: list[str] = page.eval_on_selector_all(
        "[id], a[name]", "elements => elements.map(e => e.id || e.name)"
    )
    check.ids = set(ids)


def check_site(context: BrowserContext, base: str, paths: Iterable[str]) -> dict[str, list[str]]:
    """Every page's problems, by path (pages without any are left out): what it failed to
    render, console errors, failed requests, and links to a missing page or anchor."""
    checks = {path: _open_page(context, base, path) for path in paths}
    missing = _missing_targets({link for check in checks.values() for link in check.links})
    for check in checks.values():
        for link in sorted(check.links):
            target, fragment = urldefrag(link)
            where = link.removeprefix(base)
            opened = checks.get(target.removeprefix(base))
            if target in missing:
                check.problems.append(f"dead link {where}: {missing[target]}")
            elif fragment and opened is not None and unquote(fragment) not in opened.ids:
                check.problems.append(f"dead link {where}: no element with that id")
    return {path: check.problems for path, check in checks.items() if check.problems}


def _missing_targets(links: set[str]) -> dict[str, str]:
    """Each link target (without fragment) the server does not serve, with the reason."""
    missing = {}
    for target in sorted({urldefrag(link).url for link in links}):
        try:
            # Follows /dir to /dir/; reads the body, which the server is still writing.
            with urllib.request.urlopen(target, timeout=30) as response:
                response.read()
        except urllib.error.HTTPError as e:
            missing[target] = f"HTTP {e.code}"
    return missing


# Run before any page script. mkdocs-material draws each diagram into a closed shadow root,
# which neither a page's scripts nor Playwright can read: opened, so the test can see the svg.
# A diagram mermaid cannot draw fails its promise: noted, so the wait below ends at once.
_BEFORE_THE_PAGE: Final = """
const attachShadow = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (init) {
  return attachShadow.call(this, { ...init, mode: "open" });
};
window.addEventListener("unhandledrejection", () => { window.__drawFailed = true; });
"""
# What each drawn diagram is: mkdocs-material replaces the <pre class="mermaid"> of its source
# with a <div class="mermaid"> holding mermaid's svg, once mermaid has drawn it.
_DRAWN: Final = """() => ({
  left: document.querySelectorAll("pre.mermaid").length,
  drawn: [...document.querySelectorAll("div.mermaid")].map(div => {
    const svg = div.shadowRoot && div.shadowRoot.querySelector("svg");
    if (!svg) return null;
    const box = svg.getBoundingClientRect();
    return {
      width: box.width,
      height: box.height,
      error: svg.getAttribute("aria-roledescription") === "error"
        || svg.textContent.includes("Syntax error"),
    };
  }),
})"""
# How long mermaid may take to draw a page's diagrams after the page's network is idle.
DRAW_SECONDS: Final = 20.0


def site_diagrams(site: Path) -> dict[str, int]:
    """By path, how many diagrams each page holds (its <pre class="mermaid"> blocks), for the
    pages that hold any."""
    counts = {
        path: page.read_text().count('<pre class="mermaid">') for path, page in _pages(site).items()
    }
    return {path: n for path, n in counts.items() if n}


def check_diagrams(context: BrowserContext, base: str, path: str, expected: int) -> list[str]:
    """Open one page and report what keeps any of its EXPECTED diagrams from being drawn: a
    source left undrawn, a diagram with no svg, an empty or error svg, and every console
    error, uncaught error or failed request on the way."""
    problems: list[str] = []
    page = context.new_page()
    try:
        page.add_init_script(_BEFORE_THE_PAGE)
        _listen(page, problems)
        page.goto(base + path, wait_until="networkidle")
        # Not drawn in time is reported below, with what was drawn.
        with contextlib.suppress(PlaywrightTimeout):
            page.wait_for_function(
                "n => window.__drawFailed || document.querySelectorAll('div.mermaid').length >= n",
                arg=expected,
                timeout=DRAW_SECONDS * 1000,
            )
        state: dict[str, Any] = page.evaluate(_DRAWN)
    finally:
        page.close()
    if state["left"]:
        problems.append(f"{state['left']} of {expected} diagrams not drawn")
    for number, drawn in enumerate(state["drawn"], start=1):
        if drawn is None:
            problems.append(f"diagram {number}: no svg")
        elif drawn["error"]:
            problems.append(f"diagram {number}: mermaid drew its error")
        elif not (drawn["width"] > 0 and drawn["height"] > 0):
            problems.append(f"diagram {number}: an empty svg")
    if len(state["drawn"]) != expected:
        problems.append(f"{len(state['drawn'])} diagrams drawn, {expected} in the page")
    return problems
