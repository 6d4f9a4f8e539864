"""The catalog page's LoRA adapters: a sim base with one adapter, loaded and unloaded
through the page's buttons, the API's view of it followed on the page."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from testkit.adapters import make_adapter
from testkit.servers import ServerProcess
from tests.browser.conftest import Session

pytestmark = pytest.mark.browser

BASE = "lora-ui-base"
ADAPTER = "lora-ui-sql"


def test_adapter_load_and_unload_from_the_catalog_page(
    session: Session, server: ServerProcess, tmp_path: Path
) -> None:
    folder = make_adapter(tmp_path / "sql", rank=8)
    with server.client() as api:
        base = {
            "modelPath": "org/lora-ui",
            "engine": "sim",
            "loraSlots": 2,
            "extraArgs": ["--load-seconds", "0.2", "--lora-load-ms", "50"],
        }
        assert (resp := api.put(f"/api/v1/catalog/{BASE}", json=base)).status_code == 200, resp.text
        try:
            adapter = {"adapterOf": BASE, "adapterPath": str(folder)}
            resp = api.put(f"/api/v1/catalog/{ADAPTER}", json=adapter)
            assert resp.status_code == 200, resp.text
            page = session.page
            session.goto("/catalog")
            table = page.locator('table[aria-label="LoRA adapters"]')
            row = table.locator(f'tr[data-adapter-name="{ADAPTER}"]')
            expect(row).to_have_attribute("data-state", "unloaded")
            expect(row.locator('td[data-label="Base"]')).to_have_text(BASE)
            expect(row).to_contain_text(str(folder))
            unload = row.get_by_role("button", name=f"Unload {ADAPTER}", exact=True)
            expect(unload).to_be_disabled()

            # Load starts the base (the catalog's first-request path), then the adapter.
            row.get_by_role("button", name=f"Load {ADAPTER}", exact=True).click()
            expect(row).to_have_attribute("data-state", "active", timeout=60_000)
            (holder,) = [
                i["id"] for i in api.get("/api/v1/models").json() if i["servedModelName"] == BASE
            ]
            expect(row.get_by_role("link", name=holder)).to_be_visible()
            (view,) = [a for a in api.get("/api/v1/adapters").json() if a["name"] == ADAPTER]
            assert [p["instanceId"] for p in view["loadedOn"]] == [holder]
            session.shot("adapter-loaded")
            # Its instance's page names the adapters it holds.
            row.get_by_role("link", name=holder).click()
            expect(page.get_by_test_id("instance-adapters")).to_have_text(ADAPTER)
            # And its row on the Models page, under the base's name.
            session.goto("/models")
            models_row = page.locator(f'tr[data-instance-id="{holder}"]')
            expect(models_row.locator("[data-instance-adapters]")).to_have_text(f"LoRA: {ADAPTER}")
            session.goto("/catalog")

            expect(unload).to_be_enabled()
            unload.click()
            expect(row).to_have_attribute("data-state", "unloaded")
            expect(row.get_by_role("link", name=holder)).to_have_count(0)
            (view,) = [a for a in api.get("/api/v1/adapters").json() if a["name"] == ADAPTER]
            assert view["state"] == "unloaded"
            assert view["loadedOn"] == []
            expect(page.get_by_test_id("adapter-error")).to_have_count(0)
        finally:
            api.delete(f"/api/v1/catalog/{ADAPTER}")
            for inst in api.get("/api/v1/models").json():
                if inst["servedModelName"] == BASE:
                    api.post(f"/api/v1/models/{inst['id']}/unload")
            api.delete(f"/api/v1/catalog/{BASE}")
