"""An operator's whole day in the browser: load through the dialog, watch it come up,
read its log live, sleep and wake it, unload it; GPU bars follow every step."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Page, expect

from testkit.servers import ServerProcess
from tests.browser.conftest import Session, row_action

pytestmark = pytest.mark.browser

GIB = 2**30


def gpu_used(page: Page, index: int) -> int:
    return int(page.locator(f'[data-gpu="{index}"]').get_attribute("data-used-bytes") or -1)


def chat(api: httpx.Client) -> None:
    body = {"model": "browser-sim", "messages": [{"role": "user", "content": "hi"}]}
    resp = api.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200, resp.text


def wait_gpu_used(page: Page, index: int, predicate: str) -> None:
    """Waits until GPU ``index``'s bar shows used bytes satisfying ``predicate`` (JS, ``u``).

    Checked every 100 ms: the default, every animation frame, has Chromium draw frames
    at 60 per second for the whole wait, and the bars change at most once a poll.
    """
    page.wait_for_function(
        f"""() => {{
            const el = document.querySelector('[data-gpu="{index}"]');
            const u = el ? Number(el.dataset.usedBytes) : NaN;
            return {predicate};
        }}""",
        polling=100,
    )


def test_load_watch_log_sleep_wake_unload(session: Session, server: ServerProcess) -> None:
    page = session.page
    session.goto("/")
    expect(page.locator('[data-gpu="1"]')).to_be_visible()
    assert gpu_used(page, 1) == 0, "the T4 should start empty"

    # --- load through the dialog, on the pre-Ampere T4: the warning shows before Load
    page.get_by_role("link", name="Models").click()
    page.get_by_role("button", name="Load model").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Model path").fill("browser/tiny-model")
    dialog.get_by_label("Served model name").fill("browser-sim")
    dialog.get_by_label("Engine", exact=True).select_option("sim")
    dialog.get_by_label("GPU 1 · Tesla T4", exact=False).check()
    dialog.get_by_label("Enable sleep mode", exact=False).check()
    # Five seconds of loading: the row must be seen `starting` before it turns active, and
    # a browser on two busy cores once took more than the 1.5 s this was to show it.
    dialog.get_by_label("Extra engine arguments").fill("--memory-gib 3 --load-seconds 5")
    expect(dialog.get_by_test_id("load-warning")).to_contain_text("compute capability 7.5")
    expect(dialog.get_by_test_id("fit-verdict")).to_be_visible()  # "unknown": not a local dir
    session.shot("lifecycle-1-load-dialog")
    dialog.get_by_role("button", name="Load", exact=True).click()
    expect(dialog).to_be_hidden()

    the_row = page.locator("tr", has=page.get_by_role("link", name="browser-sim"))
    expect(the_row).to_have_attribute("data-status", "starting")
    expect(the_row).to_have_attribute("data-status", "active", timeout=20_000)
    instance_id = the_row.get_attribute("data-instance-id")
    assert instance_id

    # --- the GPU bars changed: 3 GiB on GPU 1, split out as this instance
    page.get_by_role("link", name="Dashboard").click()
    wait_gpu_used(page, 1, f"u === {3 * GIB}")
    expect(page.locator(f'[data-gpu="1"] [data-instance-id="{instance_id}"]')).to_be_visible()
    session.shot("lifecycle-2-dashboard-active")

    # --- the log view: replayed lines, then new lines stream in while we watch
    logs = page.context.new_page()
    logs.goto(f"{server.url}/logs/{instance_id}")
    expect(logs.get_by_test_id("stream-state")).to_have_attribute("data-state", "open")
    expect(logs.get_by_role("log")).to_contain_text("Application startup complete")
    chat_lines = logs.get_by_role("log").get_by_text("POST /v1/chat/completions")
    with httpx.Client(base_url=server.url, timeout=30) as api:
        chat(api)
        expect(chat_lines).to_have_count(1)  # streamed in while we watch
        # Paused, new lines are held back (and counted) until Resume.
        logs.get_by_role("button", name="Pause").click()
        chat(api)
        expect(
            logs.get_by_role("button", name=re.compile(r"Resume \([1-9]\d* new\)"))
        ).to_be_visible()
        expect(chat_lines).to_have_count(1)
        logs.get_by_role("button", name=re.compile("Resume")).click()
        expect(chat_lines).to_have_count(2)
    # Filter, then copy what the filter shows.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    logs.get_by_label("Filter lines").fill("POST /v1/chat/completions")
    expect(logs.get_by_test_id("line-count")).to_contain_text("2 of")
    logs.get_by_role("button", name="Copy").click()
    copied = logs.evaluate("navigator.clipboard.readText()").splitlines()
    assert len(copied) == 2
    assert all("POST /v1/chat/completions" in line for line in copied)
    logs.get_by_label("Filter lines").fill("")

    # --- sleep (level 1) and wake, each confirmed; the bar shrinks and grows back
    page.get_by_role("link", name="Models").click()
    row_action(the_row, "Sleep")
    page.get_by_role("dialog").get_by_role("button", name="Sleep (level 1)").click()
    expect(the_row).to_have_attribute("data-status", "sleeping")
    page.get_by_role("link", name="Dashboard").click()
    wait_gpu_used(page, 1, f"u < {GIB}")
    page.get_by_role("link", name="Models").click()
    row_action(the_row, "Wake")
    page.get_by_role("dialog").get_by_role("button", name="Wake").click()
    expect(the_row).to_have_attribute("data-status", "active")
    expect(logs.get_by_role("log")).to_contain_text("── sleeping ──")

    # --- unload, confirmed: the row goes, the memory is free again, the log stream ends
    row_action(the_row, "Unload")
    page.get_by_role("dialog").get_by_role("button", name="Unload").click()
    expect(the_row).to_have_count(0)
    expect(logs.get_by_test_id("stream-state")).to_have_attribute("data-state", "ended")
    page.get_by_role("link", name="Dashboard").click()
    wait_gpu_used(page, 1, "u === 0")
