"""The dashboard of a 3-pod static cluster (testkit/cluster.py) in real Chromium.

The Cluster page lists the pods and the leader; a follower's dashboard lands on the
leader (the browser follows the follower's 307 on navigation), and a load made there
with a chosen pod runs on that pod. Then what fetch() itself does with the follower's
307 to another origin (it cannot follow it: the dashboard moves the page instead), and
a dashboard left open on a pod that stops leading moves to the new leader by itself.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from testkit.cluster import Cluster, agreed_leader
from testkit.servers import ServerProcess
from tests.browser.conftest import Session, tab_in

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("dash-cluster"), 3, SARDEENZ_SIM_GPUS="NVIDIA L4:24GiB")
    try:
        c.start()
        c.wait_one_leader(15.0)
        yield c
    finally:
        c.close()


@pytest.fixture
def tab(
    module_context: BrowserContext, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[Session]:
    with tab_in(module_context, cluster.pods["pod-b"].url, request.node) as s:  # a follower
        yield s


def test_a_single_node_says_so_and_shows_no_pod_choice(
    session: Session, server: ServerProcess
) -> None:
    page = session.page
    session.goto("/cluster")
    expect(page.get_by_role("heading", level=1)).to_have_text("Cluster")
    single = page.get_by_test_id("cluster-single")
    expect(single).to_contain_text("runs alone")
    expect(single).to_contain_text("CLUSTER_PEERS=")
    session.goto("/models?load=1")
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_label("Model path")).to_be_visible()
    expect(dialog.get_by_label("Pod", exact=True)).to_have_count(0)


def test_cluster_page_from_a_follower_shows_the_pods_and_the_leader(
    tab: Session, cluster: Cluster
) -> None:
    leader, term = cluster.wait_one_leader(10.0)
    assert leader == "pod-a"
    page = tab.page
    tab.goto("/cluster")  # pod-b follows: its 307 takes the browser to the leader
    expect(page).to_have_url(f"{cluster.pods[leader].url}/cluster")
    expect(page.get_by_test_id("cluster-mode")).to_have_text("static")
    expect(page.get_by_test_id("cluster-leader")).to_have_text(leader)
    expect(page.get_by_test_id("cluster-term")).to_have_text(str(term))
    rows = page.locator("tr[data-pod-id]")
    expect(rows).to_have_count(3)
    for name in cluster.names:
        row = page.locator(f'tr[data-pod-id="{name}"]')
        expect(row).to_have_attribute("data-state", "healthy")
        expect(row).to_have_attribute("data-leader", "true" if name == leader else "false")
        expect(row).to_contain_text("NVIDIA L4")
        # SARDEENZ_SIM_GPUS: each pod's GPU says it is simulated (issue 25).
        expect(row.locator("[data-gpu-index]")).to_contain_text("simulated")
        expect(page.get_by_test_id(f"node-pane-{name}")).to_be_visible()
    # The nav has the page; the screenshot is the Cluster page of a healthy cluster.
    expect(page.get_by_role("link", name="Cluster", exact=True)).to_be_visible()
    tab.shot("cluster-page")


def test_a_load_from_a_followers_dashboard_lands_on_the_chosen_pod(
    tab: Session, cluster: Cluster
) -> None:
    leader, _ = cluster.wait_one_leader(10.0)
    page = tab.page
    tab.goto("/models?load=1")  # the follower's URL; the dialog opens on the leader
    expect(page).to_have_url(re.compile(re.escape(cluster.pods[leader].url) + r"/models"))
    dialog = page.get_by_role("dialog")
    pods = dialog.get_by_label("Pod", exact=True)
    expect(pods.locator("option")).to_have_count(4)  # any + 3 pods
    pods.select_option("pod-c")
    dialog.get_by_label("Model path").fill("browser/cluster-model")
    dialog.get_by_label("Served model name").fill("cluster-sim")
    dialog.get_by_label("Engine", exact=True).select_option("sim")
    dialog.get_by_label("Extra engine arguments").fill("--memory-gib 2 --load-seconds 0.3")
    dialog.get_by_role("button", name="Load", exact=True).click()
    expect(dialog).to_be_hidden()

    row = page.locator("tr", has=page.get_by_role("link", name="cluster-sim"))
    expect(row.locator("td[data-pod-id]")).to_have_text("pod-c")
    expect(row).to_have_attribute("data-status", "active", timeout=20_000)
    iid = row.get_attribute("data-instance-id")
    assert iid
    # It runs on pod-c (pod-c's own view), and the Cluster page shows it in pod-c's pane.
    assert [i["id"] for i in cluster.instances("pod-c")] == [iid]
    page.get_by_role("link", name="Cluster", exact=True).click()
    pane = page.get_by_test_id("node-pane-pod-c")
    expect(pane.locator(f'tr[data-instance-id="{iid}"]')).to_have_attribute("data-status", "active")
    expect(page.get_by_test_id("node-pane-pod-a")).to_contain_text("No instances on this pod.")
    with httpx.Client(base_url=cluster.pods[leader].url, timeout=30) as api:
        assert api.post(f"/api/v1/models/{iid}/unload").status_code == 200
    expect(pane.locator(f'tr[data-instance-id="{iid}"]')).to_have_count(0, timeout=10_000)


def test_fetch_cannot_follow_a_followers_redirect_to_the_leader(
    tab: Session, cluster: Cluster
) -> None:
    """Why the dashboard moves the page: from a follower's origin, fetch() of an admin
    path gets a 307 to another origin, which has no CORS: the request fails (a GET
    and a POST with a bearer token alike), and nothing is loaded anywhere."""
    leader, _ = cluster.wait_one_leader(10.0)
    tab.allow(r"CORS|Failed to fetch|net::ERR_FAILED")
    page = tab.page
    tab.goto("/api/health")  # answered locally: the tab is on pod-b's origin
    assert page.url.startswith(cluster.pods["pod-b"].url)
    outcome = page.evaluate(
        """async () => {
            const out = {};
            for (const [name, init] of [
                ['get', {}],
                ['post', {method: 'POST', headers: {'Content-Type': 'application/json',
                          Authorization: 'Bearer x'},
                          body: JSON.stringify({modelPath: 'never', engine: 'sim'})}],
            ]) {
                try { const r = await fetch('/api/v1/models/load', init); out[name] = r.status; }
                catch (e) { out[name] = e.name; }
            }
            const manual = await fetch('/api/v1/models', {redirect: 'manual'});
            out.manual = manual.type;
            return out;
        }"""
    )
    assert outcome == {"get": "TypeError", "post": "TypeError", "manual": "opaqueredirect"}
    listed = httpx.get(f"{cluster.pods[leader].url}/api/v1/models", timeout=5).json()
    assert [i for i in listed if i["servedModelName"] == "never"] == []


def test_an_open_dashboard_moves_to_the_new_leader(tab: Session, cluster: Cluster) -> None:
    """The dashboard is open on the leader; the leader stalls (SIGSTOP) long enough to
    lose the leadership and comes back as a follower: the dashboard's next poll gets
    a redirect, and the page moves to the new leader by itself."""
    old, old_term = cluster.wait_one_leader(10.0)
    page = tab.page
    page.goto(f"{cluster.pods[old].url}/cluster")
    expect(page.get_by_test_id("cluster-leader")).to_have_text(old)
    proc = cluster.pods[old].proc
    assert proc is not None
    proc.send_signal(signal.SIGSTOP)
    try:
        new = _new_leader_among([n for n in cluster.names if n != old], cluster, old, 20.0)
    finally:
        proc.send_signal(signal.SIGCONT)
    statuses = cluster.wait(
        lambda s: agreed_leader(s) and next(iter(s.values()))["term"] > old_term,
        15.0,
        "the old leader following the new one",
    )
    assert next(iter(statuses.values()))["leader"] == new
    expect(page).to_have_url(f"{cluster.pods[new].url}/cluster", timeout=20_000)
    expect(page.get_by_test_id("cluster-leader")).to_have_text(new)
    tab.shot("cluster-page-after-failover")


def _new_leader_among(pods: list[str], cluster: Cluster, old: str, timeout: float) -> str:
    """The leader ``pods`` agree on once it is not ``old`` (``cluster.wait`` would ask
    the stopped pod too)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        views = {n: cluster.status(n) for n in pods}
        seen = {n: v for n, v in views.items() if v is not None}
        if len(seen) == len(pods) and agreed_leader(seen):
            leader: str = next(iter(seen.values()))["leader"]
            if leader != old:
                return leader
        time.sleep(0.2)
    raise AssertionError(f"no new leader among {pods} within {timeout}s")


def test_no_orphan_engines(cluster: Cluster) -> None:
    for pod in cluster.pods.values():
        assert pod.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    deadline = time.monotonic() + 10
    while cluster.orphans() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster.orphans() == [], "engines still running 10 s after every pod stopped"
