"""The rest of issue 25's dashboard items, in real Chromium against a --sim-gpus server:
toasts never hide a table's last rows, a starting instance's page names its load phase,
the catalog form sets warmup and shows instance ids whole, and the preset form says what
each sleep level does."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from testkit.servers import ServerProcess, sim_load, wait_for_status
from tests.browser.conftest import Session

pytestmark = pytest.mark.browser

TOASTS = ".pf-v6-c-alert-group.pf-m-toast .pf-v6-c-alert"

# True when the centre of the element is not under anything else (a toast, a menu).
UNCOVERED = """el => {
  const r = el.getBoundingClientRect();
  const hit = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
  return el.contains(hit);
}"""


def test_a_toast_leaves_the_last_rows_logs_link_clickable(
    session: Session, server: ServerProcess
) -> None:
    page = session.page
    page.set_viewport_size({"width": 1280, "height": 560})  # a table taller than the view
    ids: list[str] = []
    with server.client() as api:
        try:
            for n in range(6):
                ids.append(sim_load(api, f"ux/toast-{n}", "--memory-gib", "0.5")["id"])
            session.goto("/models?load=1")
            dialog = page.get_by_role("dialog")
            dialog.get_by_label("Model path").fill("ux/toast-last")
            dialog.get_by_label("Extra engine arguments").fill(
                "--memory-gib 0.5 --load-seconds 0.2"
            )
            dialog.get_by_role("button", name="Load", exact=True).click()
            expect(dialog).to_be_hidden()
            toast = page.locator(TOASTS)
            expect(toast).to_have_count(1)
            expect(toast).to_contain_text("Loading ux/toast-last")
            rows = page.locator("tr[data-instance-id]")
            expect(rows).to_have_count(7)
            main = page.locator(".pf-v6-c-page__main")
            scrolls = main.evaluate("el => el.scrollHeight > el.clientHeight")
            assert scrolls, (
                "the table must reach the bottom of the view for this test to mean anything"
            )
            main.evaluate("el => el.scrollTo(0, el.scrollHeight)")
            last = rows.last
            logs = last.get_by_role("link", name="Logs")
            menu = last.get_by_role("button", name=re.compile("^Actions for "))
            expect(toast).to_be_visible()
            assert logs.evaluate(UNCOVERED), "the toast covers the last row's Logs link"
            assert menu.evaluate(UNCOVERED), "the toast covers the last row's menu"
            session.shot("ux-toast-clears-last-row")
            box = logs.bounding_box()
            assert box is not None
            page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            expect(page).to_have_url(re.compile(r"/logs/[0-9a-f-]+$"))
        finally:
            listed = api.get("/api/v1/models").json()
            ids += [i["id"] for i in listed if i["modelPath"] == "ux/toast-last"]
            for iid in ids:
                api.post(f"/api/v1/models/{iid}/unload")


def test_the_instance_page_names_the_load_phase_of_a_starting_instance(
    session: Session, server: ServerProcess
) -> None:
    with server.client() as api:
        inst = sim_load(api, "ux/slow", "--memory-gib", "1", "--load-seconds", "40")
        try:
            session.goto(f"/models/{inst['id']}")
            phase = session.page.get_by_test_id("instance-load-phase")
            # The sim opens "loading weights" at 2 s of its 40 s (as on the Models page).
            expect(phase).to_have_attribute("data-load-phase", "loading weights")
            expect(phase).to_have_text(re.compile(r"^loading weights · \d+ s$"))
            session.shot("ux-instance-load-phase")
        finally:
            api.post(f"/api/v1/models/{inst['id']}/unload")
