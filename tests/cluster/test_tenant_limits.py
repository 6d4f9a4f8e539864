"""Tenants' limits and usage across three real pods: one limit, whichever pods the traffic
enters, and every pod answers the whole cluster's usage.

Three ``sardeenz serve`` processes (testkit/cluster.py) with the same inference keys
file and one simulated model served by every pod (a request is admitted by the pod
that serves it, and the round robin spreads each pod's traffic over the three). The
tenant is created through a follower (its 307 to the leader, as any client following
redirects) and must then limit the traffic entering every pod. Each pod admits from
its lease on the leader's bucket, synced once a second (tenancy/shares.py).

The tolerance, stated and asserted: over a window of ``WINDOW`` seconds from a full
bucket, a requests-per-minute limit of R admits ``R + R x seconds / 60`` (the burst,
then the refill); the three pods together must admit within 10 % of that. Counting
per pod would admit three times as much (each pod its own burst and refill). The
window holds the whole burst on purpose: that is where independent pods would triple
most visibly, and a second sync interval of disagreement between the pods shows most.

Billable usage (the first test): a tenant of the config file every pod reads, a model
on pod-c only, so the requests entering pod-a and pod-b are forwarded to it. Each
request is counted once, by the pod that serves it (pod-c, which admits it:
docs/tenancy.md, "In a cluster"); any pod's ``/api/v1/usage`` sums all three (asked at
read time). A pod that does not answer (SIGSTOP) is named in ``missingPods`` and its
usage is missing, not invented; once it answers again the sum is whole. One cluster for
both: a 3-pod start costs seconds of CPU.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import httpx
import openai
import pytest

from testkit.cluster import Cluster, poll
from testkit.servers import HTTP
from testkit.tenants import (
    assert_one_limit,
    chat,
    chat_body,
    control_document,
    inference,
    keys_file,
    paced_window,
    put_tenant,
    secret,
    wait_tenant_everywhere,
)
from testkit.waiting import wait_until

pytestmark = pytest.mark.slow

MODEL = "tenant-cluster-m"
KEYS = ("k-rpm", "k-budget")
RPM = 120
WINDOW = 30.0
PACE = 0.2
"""Seconds between one client's requests: 5/s per pod, 15/s in all, far over the
2/s the limit refills (so the limit, not the clients, decides what passes)."""
TOLERANCE = 0.10
USAGE_MODEL = "usage-c"
"""The billed tenant's model, on pod-c only."""
SENT = {"pod-a": 2, "pod-b": 3, "pod-c": 4}
"""Requests of the billed tenant entering each pod."""
BILLED_KEY = "k-bill"


@pytest.fixture(scope="module")
def trio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("tenants")
    keys = keys_file(root / "keys.txt", (*KEYS, BILLED_KEY))
    cluster = Cluster(
        root,
        3,
        SARDEENZ_API_KEYS_FILE=keys,
        SARDEENZ_TENANCY_FLUSH_SECONDS="1",
        SARDEENZ_TENANTS=json.dumps({"billed": {"api_keys": [BILLED_KEY]}}),
        SARDEENZ_USAGE_FLUSH_SECONDS="1",
    )
    try:
        cluster.start()
        cluster.wait_one_leader()
        # The four loads side by side: each waits for its engine, then for the leader to
        # hear of it in a heartbeat, and one after another they were seconds of waiting.
        loads = [(pod, MODEL, "--ttft-ms", "1", "--itl-ms", "1") for pod in cluster.names]
        with ThreadPoolExecutor(4) as pool:  # MODEL on every pod: each admits what it serves
            done = [
                pool.submit(cluster.load_on, *load) for load in [("pod-c", USAGE_MODEL), *loads]
            ]
            for future in done:
                future.result()
        yield cluster
    finally:
        cluster.close()
        assert cluster.orphans() == []


def _listed(url: str) -> bool:
    models = HTTP.get(f"{url}/v1/models", headers=_auth(), timeout=5).json()["data"]
    return any(m["id"] == USAGE_MODEL for m in models)


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {secret(BILLED_KEY)}"}


def _billed_usage(url: str, window: dict[str, str]) -> dict[str, Any]:
    resp = HTTP.get(f"{url}/api/v1/usage", params={"group_by": "tenant", **window}, timeout=10)
    assert resp.status_code == 200, resp.text  # answered by every pod, never a redirect
    doc: dict[str, Any] = resp.json()
    return doc


def _requests(doc: dict[str, Any]) -> int:
    return sum(b["requests"] for b in doc["buckets"] if b["tenant"] == "billed")


def test_every_pod_answers_the_whole_clusters_usage_and_names_a_silent_pod(
    trio: Cluster,
) -> None:
    now = int(time.time())
    window = {"from": str(now - 120), "to": str(now + 300)}
    prompt = completion = 0
    for entry, n in SENT.items():
        url = trio.pods[entry].url
        poll(f"{USAGE_MODEL} routable on {entry}", partial(_listed, url), bool)
        with openai.OpenAI(
            base_url=f"{url}/v1", api_key=secret(BILLED_KEY), max_retries=0, timeout=30
        ) as client:
            for _ in range(n):
                reply = client.chat.completions.create(
                    model=USAGE_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
                )
                assert reply.usage is not None
                prompt += reply.usage.prompt_tokens
                completion += reply.usage.completion_tokens
    total = sum(SENT.values())
    for name, pod in trio.pods.items():
        doc = _billed_usage(pod.url, window)
        assert doc["pods"] == ["pod-a", "pod-b", "pod-c"], (name, doc)
        assert doc["missingPods"] == []
        (row,) = [b for b in doc["buckets"] if b["tenant"] == "billed"]
        assert (row["requests"], row["promptTokens"], row["completionTokens"]) == (
            total,
            prompt,
            completion,
        ), name

    silent = trio.pods["pod-c"]  # it served, and so billed, every request
    assert silent.proc is not None
    silent.proc.send_signal(signal.SIGSTOP)
    try:
        doc = _billed_usage(trio.pods["pod-a"].url, window)
        assert doc["missingPods"] == ["pod-c"]
        assert _requests(doc) == 0
    finally:
        silent.proc.send_signal(signal.SIGCONT)
    poll(
        "pod-c's usage back in pod-a's answer",
        partial(_billed_usage, trio.pods["pod-a"].url, window),
        lambda d: d["missingPods"] == [] and _requests(d) == total,
    )
    # The limits below start from a whole cluster: pod-c seen healthy by every pod.
    trio.wait_whole(30, "pod-c answering again")


def _urls(cluster: Cluster) -> dict[str, str]:
    return {name: pod.url for name, pod in cluster.pods.items()}


def test_a_tenant_put_through_a_follower_gets_its_limit_once_over_three_pods(
    trio: Cluster,
) -> None:
    leader, _ = trio.wait_one_leader(30)
    follower = next(p for p in trio.names if p != leader)
    body = {"api_keys": ["k-rpm"], "limits": {"requests_per_minute": RPM}}
    put_tenant(trio.pods[follower].url, "team-rpm", body)
    wait_tenant_everywhere(_urls(trio).values(), "team-rpm")
    results = paced_window(_urls(trio), "k-rpm", chat_body(MODEL), WINDOW, PACE)
    assert_one_limit(results, RPM, WINDOW, TOLERANCE)


def _tenant_view(url: str, name: str) -> dict[str, Any]:
    resp = HTTP.get(f"{url}/api/v1/tenants/{name}", follow_redirects=True, timeout=10)
    assert resp.status_code == 200, resp.text
    view: dict[str, Any] = resp.json()
    return view


def _tokens_today(url: str, name: str) -> int | None:
    try:
        value = _tenant_view(url, name)["usage"]["*"]["tokens_today"]
    except (httpx.HTTPError, AssertionError):
        return None  # (an election under way: the admin API answers 503 meanwhile)
    return int(value) if value is not None else None


def _stored_total(cluster: Cluster, pod: str, name: str) -> int:
    """The tokens of ``name`` today in ``pod``'s copy of the ``tenant-usage`` document."""
    doc = control_document(cluster.pods[pod].url, "tenant-usage") or {}
    day = time.strftime("%Y-%m-%d", time.gmtime())
    return sum(int(n) for n in (doc.get(f"{name}\t*\t{day}") or {}).values())


def _usage(resp: httpx.Response) -> int:
    usage = resp.json()["usage"]
    return int(usage["prompt_tokens"]) + int(usage["completion_tokens"])


def test_a_budget_is_counted_once_and_survives_the_leader(trio: Cluster) -> None:
    leader, _ = trio.wait_one_leader(30)
    follower = next(p for p in trio.names if p != leader)
    url = trio.pods[follower].url
    put_tenant(url, "team-budget", {"api_keys": ["k-budget"], "limits": {"tokens_per_day": 10**6}})
    wait_tenant_everywhere(_urls(trio).values(), "team-budget")

    # Four requests through each pod, one after the other: every token the engines
    # reported is counted once in the cluster's total.
    spent = 0
    for _ in range(4):
        for pod in trio.names:
            with inference(trio.pods[pod].url, "k-budget") as v1:
                resp = chat(v1, chat_body(MODEL, max_tokens=8))
            assert resp.status_code == 200, resp.text
            spent += _usage(resp)
    wait_until(
        lambda: _tokens_today(url, "team-budget") == spent,
        f"the leader's count of team-budget's tokens today to be the {spent} spent",
        15,
        interval=0.2,
    )
    # ...and stored in the control state, the copy of every pod.
    wait_until(
        lambda: all(_stored_total(trio, p, "team-budget") == spent for p in trio.names),
        f"every pod's copy of tenant-usage to hold the {spent} tokens",
        15,
        interval=0.2,
    )

    # The leader stops: the new one has the count its pods still report and, for the
    # pod that stopped, only the stored document.
    trio.pods[leader].stop()
    others = [p for p in trio.names if p != leader]
    trio.wait(
        lambda st: all(s["leader"] in others for s in st.values()),
        30,
        f"a new leader among {others}",
    )
    survivor = trio.pods[others[0]].url
    wait_until(
        lambda: _tokens_today(survivor, "team-budget") == spent,
        f"the new leader's count of team-budget's tokens today to be the {spent} spent",
        20,
        interval=0.2,
    )
    # The old leader restarts; the budget is lowered to what was spent: no pod admits.
    trio.pods[leader].start(60)
    trio.wait(
        lambda st: len(st) == 3 and len({s["leader"] for s in st.values()}) == 1,
        30,
        "the restarted pod to follow the new leader",
    )
    put_tenant(
        survivor, "team-budget", {"api_keys": ["k-budget"], "limits": {"tokens_per_day": spent}}
    )

    def lowered() -> bool:
        docs = [
            (control_document(trio.pods[p].url, "tenants") or {}).get("team-budget")
            for p in trio.names
        ]
        return all(d is not None and d["limits"]["tokens_per_day"] == spent for d in docs)

    wait_until(lowered, "the lowered budget in every pod's copy of the tenants", 20, interval=0.2)
    for pod in trio.names:  # none admits: each holds the cluster's count, the restarted too
        with inference(trio.pods[pod].url, "k-budget") as v1:
            resp = chat(v1, chat_body(MODEL, max_tokens=8))
        assert resp.status_code == 429, (pod, resp.text)
        error = resp.json()["error"]
        assert f"tokens per day limit of {spent}" in error["message"], error
