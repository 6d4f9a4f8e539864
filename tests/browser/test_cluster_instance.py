"""A follower's instance, opened from the leader's dashboard in real Chromium.

pod-b runs the instance; the browser is on pod-a (the leader). The Models and Dashboard
tables name the pod, the instance page shows it (details and traffic come from pod-b
through the leader's locator), and its Logs page shows the replayed log and then a
live line, relayed from pod-b as it is written.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from testkit.cluster import Cluster
from tests.browser.conftest import Session, tab_in

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def cluster(pair: Cluster) -> Cluster:
    """The folder's 2-pod cluster: the leader the browser is on and the follower that
    runs the instance (tests/browser/conftest.py)."""
    return pair


@pytest.fixture
def tab(
    module_context: BrowserContext, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[Session]:
    with tab_in(module_context, cluster.pods["pod-a"].url, request.node) as s:  # the leader
        yield s


def _listed_by_leader(cluster: Cluster, iid: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = httpx.get(f"{cluster.pods['pod-a'].url}/api/v1/models", timeout=5).json()
        if any(i["id"] == iid and i["status"] == "active" for i in listed):
            return
        time.sleep(0.1)
    raise AssertionError(f"the leader does not list {iid} active within 30s")


def test_a_followers_instance_shows_its_pod_details_and_live_log(
    tab: Session, cluster: Cluster
) -> None:
    leader, _ = cluster.wait_one_leader(10.0)
    assert leader == "pod-a"
    iid = str(cluster.load_on("pod-b", "far-model")["id"])
    try:
        _listed_by_leader(cluster, iid)
        page = tab.page

        tab.goto("/")
        row = page.locator(f'tr[data-instance-id="{iid}"]')
        expect(row.locator("td[data-pod-id]")).to_have_text("pod-b")

        tab.goto("/models")
        row = page.locator(f'tr[data-instance-id="{iid}"]')
        expect(row.locator("td[data-pod-id]")).to_have_text("pod-b")
        row.get_by_role("link", name="far-model").click()
        expect(page).to_have_url(f"{cluster.pods['pod-a'].url}/models/{iid}")
        expect(page.get_by_role("heading", level=1)).to_have_text("far-model")
        expect(page.get_by_test_id("instance-pod")).to_have_text("pod-b")
        # Its ResourceMetrics, measured on pod-b (the leader's locator asks it).
        expect(page.get_by_test_id("instance-traffic")).to_contain_text("Requests answered")

        page.get_by_role("link", name="Logs").first.click()
        expect(page).to_have_url(f"{cluster.pods['pod-a'].url}/logs/{iid}")
        expect(page.get_by_test_id("stream-state")).to_have_attribute("data-state", "open")
        log = page.get_by_role("log", name="Engine log")
        expect(log).to_contain_text("active")  # the replay, then the current status
        # A request served by pod-b's engine writes an access line there, now.
        resp = httpx.post(
            f"{cluster.pods['pod-b'].url}/v1/completions",
            json={"model": "far-model", "prompt": "hello from the test", "max_tokens": 2},
            timeout=30,
        )
        assert resp.status_code == 200, resp.text
        expect(log).to_contain_text("POST /v1/completions", timeout=20_000)
        expect(page.get_by_test_id("stream-state")).to_have_attribute("data-state", "open")
    finally:  # the cluster is the folder's: it is left without the instance
        tab.allow(rf"404 .*/api/v1/models/{iid}")  # the open Logs page, after it
        with httpx.Client(base_url=cluster.pods["pod-a"].url, timeout=30) as api:
            assert api.post(f"/api/v1/models/{iid}/unload").status_code == 200
