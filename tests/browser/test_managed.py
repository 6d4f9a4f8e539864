"""A catalog model's instance is marked, and unloading it warns that it comes back."""

from __future__ import annotations

from playwright.sync_api import expect

from testkit.servers import ServerProcess
from tests.browser.conftest import Session, row_action


def test_catalog_instance_label_and_unload_warning(session: Session, server: ServerProcess) -> None:
    name = "managed-ui"
    with server.client() as api:
        resp = api.put(
            f"/api/v1/catalog/{name}", json={"modelPath": "org/managed", "engine": "sim"}
        )
        assert resp.status_code == 200, resp.text
        try:
            reply = api.post(
                "/v1/chat/completions",
                json={
                    "model": name,
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 2,
                },
                timeout=60,
            )
            assert reply.status_code == 200, reply.text
            page = session.page
            session.goto("/models")
            row = page.locator("tr[data-instance-id]").filter(has_text=name)
            expect(row).to_have_attribute("data-status", "active")
            label = row.locator('[data-managed-by="catalog"]')
            expect(label).to_have_text("catalog")
            row.get_by_role("link", name=name).click()
            expect(page.locator('[data-managed-by="catalog"]')).to_have_text("catalog")
            session.goto("/models")

            row_action(row, "Unload")
            dialog = page.get_by_role("dialog")
            expect(dialog.locator("[data-unload-warning]")).to_contain_text(
                "the next request for it starts it again"
            )
            session.shot("managed-unload-warning")
            dialog.get_by_role("button", name="Unload").click()
            expect(row).to_have_count(0)
        finally:
            for inst in api.get("/api/v1/models").json():
                if inst["servedModelName"] == name:
                    api.post(f"/api/v1/models/{inst['id']}/unload")
            api.delete(f"/api/v1/catalog/{name}")
