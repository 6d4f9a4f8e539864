"""Cluster-wide observability in real Chromium, on a 2-pod static cluster.

The leader's Dashboard shows every pod's GPUs (pod-b's A100 beside pod-a's L4) and a
Pod column in its instance table; the Requests page shows each request's pod (and
the pod it entered through, when forwarded) and filters by pod.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from testkit.cluster import Cluster
from tests.browser.conftest import Session, tab_in

pytestmark = pytest.mark.browser

MODEL = "observed-b"
SENT = {"pod-a": 2, "pod-b": 3}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("observe-cluster"),
        2,
        pod_env={
            "pod-a": {"SARDEENZ_SIM_GPUS": "NVIDIA L4:24GiB"},
            "pod-b": {"SARDEENZ_SIM_GPUS": "NVIDIA A100:80GiB"},
        },
    )
    try:
        c.start()
        c.wait_one_leader(15.0)
        c.load_on("pod-b", MODEL)
        for pod, n in SENT.items():
            url = c.pods[pod].url
            deadline = time.monotonic() + 20
            while not any(
                m["id"] == MODEL for m in httpx.get(f"{url}/v1/models", timeout=5).json()["data"]
            ):
                assert time.monotonic() < deadline, f"{MODEL} not routable on {pod}"
                time.sleep(0.2)
            for _ in range(n):
                resp = httpx.post(
                    f"{url}/v1/chat/completions",
                    json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                    timeout=30,
                )
                assert resp.status_code == 200, resp.text
        yield c
    finally:
        c.close()


@pytest.fixture
def tab(
    module_context: BrowserContext, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[Session]:
    leader, _ = cluster.wait_one_leader(10.0)
    with tab_in(module_context, cluster.pods[leader].url, request.node) as s:
        yield s


def test_dashboard_shows_every_pods_gpus_and_a_pod_column(tab: Session) -> None:
    page = tab.page
    tab.goto("/")
    panels = page.get_by_test_id("pod-gpus")
    expect(panels).to_have_count(2)
    expect(page.locator('[data-testid="pod-gpus"][data-pod-id="pod-a"]')).to_contain_text("L4")
    on_b = page.locator('[data-testid="pod-gpus"][data-pod-id="pod-b"]')
    expect(on_b).to_contain_text("A100")
    segment = on_b.locator('[data-segment="instance"]')  # its instance's memory
    expect(segment).to_have_attribute("data-instance-id", re.compile(".+"))
    expect(page.get_by_role("columnheader", name="Pod")).to_be_visible()
    expect(page.locator('td[data-pod-id="pod-b"]')).to_have_count(1)


def test_requests_page_has_a_pod_column_and_filter(tab: Session) -> None:
    page = tab.page
    tab.goto("/requests")
    rows = page.get_by_test_id("request-row")
    expect(rows).to_have_count(sum(SENT.values()), timeout=30_000)
    pods = page.get_by_test_id("request-pod")
    for i in range(pods.count()):
        expect(pods.nth(i)).to_contain_text("pod-b")
    expect(page.get_by_test_id("request-entry-pod")).to_have_count(SENT["pod-a"])
    expect(page.get_by_test_id("request-entry-pod").first).to_have_text("via pod-a")
    page.get_by_label("Pod", exact=True).select_option("pod-a")
    expect(page.get_by_text("No requests")).to_be_visible()
    page.get_by_label("Pod", exact=True).select_option("pod-b")
    expect(rows).to_have_count(sum(SENT.values()))


def test_charts_cover_every_pod_or_one(tab: Session) -> None:
    page = tab.page
    tab.goto("/charts")
    rates = page.locator(".pf-v6-c-card", has_text="Requests per second")
    expect(rates.locator(".u-legend")).to_contain_text(MODEL, timeout=30_000)  # every pod
    page.get_by_label("Pod", exact=True).select_option("pod-b")  # the pod that ran them
    expect(rates.locator(".u-legend")).to_contain_text(MODEL, timeout=30_000)
    page.get_by_label("Pod", exact=True).select_option("pod-a")  # it ran none
    expect(rates).to_contain_text("No request rates yet", timeout=30_000)
    gpus = page.locator(".pf-v6-c-card", has_text="GPU memory used")
    expect(gpus.locator(".u-legend")).to_contain_text("pod-a GPU 0")
    expect(gpus.locator(".u-legend")).not_to_contain_text("pod-b")
