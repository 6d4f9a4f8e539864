"""Cluster operations in the dashboard (real Chromium on a 2-pod static cluster).

A preset made in the editor (a 422 first, shown at its field), its plan (two
loads, one per pod: a replica prefers a pod without one), Apply with its steps
done live from the SSE stream, then "nothing to do". A move started from a pod
pane, followed step by step until done, and listed under Moves. The load
dialog's scheduler verdict for "Any". Screenshots: test-output/browser/.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from testkit.cluster import Cluster
from testkit.servers import ServerProcess, load_active
from tests.browser.conftest import Session, row_action, tab_in

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def cluster(pair: Cluster) -> Cluster:
    """The folder's 2-pod cluster, two L4s on each pod (tests/browser/conftest.py)."""
    return pair


@pytest.fixture
def tab(
    module_context: BrowserContext, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[Session]:
    with tab_in(module_context, cluster.leader_url(), request.node) as s:
        yield s


def test_create_plan_apply_a_preset(tab: Session, cluster: Cluster) -> None:
    page = tab.page
    tab.allow(r"422")  # the refused save below: the browser logs the failed PUT
    tab.goto("/presets")
    expect(page.get_by_role("heading", level=1)).to_have_text("Presets")
    page.get_by_role("button", name="New preset").click()
    dialog = page.get_by_role("dialog")
    dialog.locator("#preset-name").fill("web")
    dialog.locator("#preset-m0-servedModelName").fill("web-a")
    dialog.locator("#preset-m0-replicas").fill("2")
    dialog.locator("#preset-m0-engine").select_option("sim")
    dialog.locator("#preset-m0-extraArgs").fill("--memory-gib 2 --load-seconds 0.3")
    # No model path: the server's 422 names models.0.modelPath, shown at that field.
    dialog.get_by_role("button", name="Save").click()
    expect(dialog.get_by_test_id("preset-model-0")).to_contain_text("at least 1 character")
    expect(dialog.locator("#preset-m0-modelPath")).to_have_attribute("aria-invalid", "true")
    dialog.locator("#preset-m0-modelPath").fill("/models/web-a")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()

    # The plan: one replica per pod (a replica prefers a pod that runs none yet).
    plan = page.get_by_test_id("preset-plan")
    steps = plan.locator('[data-testid="preset-step"][data-action="load"]')
    expect(steps).to_have_count(2)
    expect(plan).to_contain_text("Load web-a on pod pod-a")
    expect(plan).to_contain_text("Load web-a on pod pod-b")
    expect(plan).to_contain_text("GiB free after")
    expect(page.locator('tr[data-preset="web"]')).to_have_attribute("data-applied", "false")

    plan.get_by_role("button", name="Apply").click()
    progress = page.get_by_test_id("apply-progress")
    expect(progress).to_have_attribute("data-outcome", "done", timeout=30_000)
    expect(progress.locator('[data-testid="preset-step"][data-state="done"]')).to_have_count(2)
    expect(progress.get_by_test_id("apply-outcome")).to_have_text("done")
    row = page.locator('tr[data-preset="web"]')
    expect(row).to_have_attribute("data-applied", "true")
    expect(plan.get_by_test_id("plan-summary")).to_have_attribute("data-nothing-to-do", "true")
    expect(page.get_by_test_id("reconcile-card")).to_be_visible()
    tab.shot("presets-page")

    placed = sorted(
        pod
        for pod in cluster.names
        for i in cluster.instances(pod)
        if i["servedModelName"] == "web-a" and i["status"] == "active"
    )
    assert placed == ["pod-a", "pod-b"]
    # Stop reconciling (what runs keeps running) and unload: the next tests start clean.
    with httpx.Client(base_url=cluster.leader_url(), timeout=30) as api:
        assert api.delete("/api/cluster/presets/web").status_code == 200
        for pod in cluster.names:
            for i in cluster.instances(pod):
                assert api.post(f"/api/v1/models/{i['id']}/unload").status_code == 200


def test_a_preset_that_fits_nowhere_is_planned_as_such_and_refused(
    tab: Session, cluster: Cluster
) -> None:
    page = tab.page
    tab.allow(r"409")  # the refused apply: the browser logs the failed POST
    body = {"models": [{"modelPath": "/models/huge", "servedModelName": "huge", "engine": "sim",
                        "extraArgs": ["--memory-gib", "400"]}]}  # fmt: skip
    with httpx.Client(base_url=cluster.leader_url(), timeout=30) as api:
        assert api.put("/api/cluster/presets/too-big", json=body).status_code == 200
    try:
        tab.goto("/presets?preset=too-big")
        plan = page.get_by_test_id("preset-plan")
        step = plan.locator('[data-testid="preset-step"][data-action="unschedulable"]')
        expect(step).to_contain_text("huge fits nowhere")
        expect(step.locator("li[data-pod-id]")).to_have_count(2)  # a reason per pod
        plan.get_by_role("button", name="Apply").click()
        refused = page.get_by_test_id("apply-refused")
        expect(refused).to_have_attribute("data-code", "preset_unschedulable")
        expect(refused).to_contain_text("nothing was done")
        expect(refused.locator("li[data-pod-id]")).to_have_count(2)
        expect(page.locator('tr[data-preset="too-big"]')).to_have_attribute("data-applied", "false")
        tab.shot("presets-unschedulable")
    finally:
        with httpx.Client(base_url=cluster.leader_url(), timeout=30) as api:
            assert api.delete("/api/cluster/presets/too-big").status_code == 200


def test_move_an_instance_and_follow_its_steps(tab: Session, cluster: Cluster) -> None:
    inst = cluster.load_on("pod-b", "/models/mover", "--memory-gib", "2")
    page = tab.page
    tab.goto("/cluster")
    pane = page.get_by_test_id("node-pane-pod-b")
    row = pane.locator(f'tr[data-instance-id="{inst["id"]}"]')
    expect(row).to_have_attribute("data-status", "active")
    row.get_by_role("button", name="Move").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Target pod").select_option("pod-a")
    dialog.get_by_label("GPU 1 ·", exact=False).check()
    dialog.get_by_role("button", name="Move", exact=True).click()
    steps = dialog.get_by_test_id("move-steps")
    expect(steps).to_have_attribute("data-state", "done", timeout=40_000)
    names = steps.locator('[data-testid="move-step"]').evaluate_all(
        "rows => rows.map(r => r.dataset.step)"
    )
    for step in ("target-active", "target-routed", "source-unrouted", "drain-end", "source-gone"):
        assert step in names, names
    expect(steps).to_contain_text("pod-b GPU")
    expect(steps).to_contain_text("→ pod-a GPU 1")
    tab.shot("move-steps")
    dialog.get_by_role("contentinfo").get_by_role("button", name="Close").click()

    moves = page.get_by_test_id("moves-card")
    expect(moves.locator("tr[data-move-id]")).to_have_count(1)
    expect(moves.locator("tr[data-move-id]")).to_have_attribute("data-state", "done")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(
        i["id"] == inst["id"] for i in cluster.instances("pod-b")
    ):
        time.sleep(0.2)
    name = inst["servedModelName"]
    on_a = [i for i in cluster.instances("pod-a") if i["servedModelName"] == name]
    assert [i["gpuIds"] for i in on_a] == [[1]]
    assert [i for i in cluster.instances("pod-b") if i["id"] == inst["id"]] == [], (
        "the moved instance is still on pod-b 10 s after the move"
    )
    with httpx.Client(base_url=cluster.leader_url(), timeout=30) as api:
        assert api.post(f"/api/v1/models/{on_a[0]['id']}/unload").status_code == 200


def test_load_dialog_shows_the_scheduler_verdict(tab: Session) -> None:
    page = tab.page
    tab.goto("/models?load=1")
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_label("Pod", exact=True)).to_have_value("")
    dialog.get_by_label("Model path").fill("/models/verdict")
    dialog.get_by_label("Engine", exact=True).select_option("sim")
    dialog.get_by_label("Extra engine arguments").fill("--memory-gib 4")
    verdict = dialog.get_by_test_id("schedule-verdict")
    expect(verdict).to_have_attribute("data-placed", "true")
    expect(verdict).to_contain_text("would go to pod-")
    expect(verdict).to_contain_text("GiB free after")
    dialog.get_by_label("Extra engine arguments").fill("--memory-gib 400")
    expect(verdict).to_have_attribute("data-placed", "false")
    expect(verdict.locator("li[data-pod-id]")).to_have_count(2)


def test_single_node_moves_an_instance_to_another_gpu_from_the_models_page(
    session: Session, server: ServerProcess
) -> None:
    """A single node is its own leader: Move on the Models page takes the instance to
    the other GPU of the same node (the only pod, so the GPU must be chosen)."""
    with server.client() as api:
        inst = load_active(api, "browser/gpu-mover", "--memory-gib", "2", gpuIds=[0])
    page = session.page
    session.goto("/models")
    row = page.locator(f'tr[data-instance-id="{inst["id"]}"]')
    row_action(row, "Move")
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("button", name="Move", exact=True)).to_be_disabled()
    dialog.get_by_label("GPU 1 ·", exact=False).check()
    dialog.get_by_role("button", name="Move", exact=True).click()
    steps = dialog.get_by_test_id("move-steps")
    expect(steps).to_have_attribute("data-state", "done", timeout=40_000)
    expect(steps.locator('[data-testid="move-step"][data-step="source-gone"]')).to_have_count(1)
    dialog.get_by_role("contentinfo").get_by_role("button", name="Close").click()
    with server.client() as api:
        moved = [i for i in api.get("/api/v1/models").json() if i["modelPath"] == inst["modelPath"]]
        assert [(i["gpuIds"], i["status"]) for i in moved] == [([1], "active")]
        assert api.post(f"/api/v1/models/{moved[0]['id']}/unload").status_code == 200
