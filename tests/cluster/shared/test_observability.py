"""Cluster-wide request log, usage and charts, collected from every pod (3 real pods).

On the folder's shared cluster. Requests enter through each pod for a model that only
pod-c runs (so pod-a's and pod-b's are forwarded to pod-c). Each appears once in every
pod's ``/api/v1/requests`` and usage, with the pod that ran it and the pod it entered;
``pod`` / ``entryPod`` filter; a pod SIGKILLed keeps its collected records (and is
started again after: the cluster is shared). A request in flight on pod-c shows on
pod-a's charts while it runs and leaves them when it ends.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from testkit.cluster import Cluster, listed_models, poll
from testkit.servers import HTTP

MODEL = "observed-c"
SENT = {"pod-a": 3, "pod-b": 4, "pod-c": 5}
TOTAL = sum(SENT.values())


def _requests(url: str, **params: str) -> list[dict[str, Any]]:
    resp = HTTP.get(f"{url}/api/v1/requests", params={"limit": "1000", **params}, timeout=5)
    assert resp.status_code == 200, resp.text  # served by every pod, never a redirect
    return [e for e in resp.json() if e["model"] == MODEL]


def _usage(url: str, **params: str) -> int:
    resp = HTTP.get(f"{url}/api/v1/usage", params=params, timeout=5)
    assert resp.status_code == 200, resp.text
    return sum(r["requests"] for r in resp.json()["byModel"] if r["model"] == MODEL)


@pytest.fixture(scope="module")
def sent(shared_cluster: Cluster) -> Iterator[Cluster]:
    """The shared cluster once every request of ``SENT`` was answered; the model is
    unloaded after the module."""
    shared_cluster.wait_one_leader()
    iid = shared_cluster.load_on("pod-c", MODEL)["id"]
    try:
        for pod, n in SENT.items():
            url = shared_cluster.pods[pod].url
            poll(f"{MODEL} routable on {pod}", partial(_listed, url), bool)
            for _ in range(n):
                resp = HTTP.post(
                    f"{url}/v1/chat/completions",
                    json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                    timeout=30,
                )
                assert resp.status_code == 200, resp.text
        yield shared_cluster
    finally:
        shared_cluster.unload("pod-c", iid)


def _listed(url: str) -> bool:
    return MODEL in listed_models(url)


def test_each_request_appears_once_on_every_pod_with_its_pods(sent: Cluster) -> None:
    for name, pod in sent.pods.items():
        entries = poll(
            f"{TOTAL} records on {name}",
            partial(_requests, pod.url),
            lambda e: len(e) >= TOTAL,
        )
        assert len(entries) == TOTAL, entries  # once each: the forwarded hop is not counted
        assert {e["pod"] for e in entries} == {"pod-c"}
        assert Counter(e["entryPod"] for e in entries) == SENT
        assert len({(e["entryPod"], e["requestId"]) for e in entries}) == TOTAL
        assert {e["instanceId"] for e in entries} == {sent.instances("pod-c")[0]["id"]}
        assert all(e["status"] == 200 and e["completionTokens"] for e in entries)
        assert poll(f"usage on {name}", partial(_usage, pod.url), lambda n: n >= TOTAL) == TOTAL


def test_filters_show_one_pods_view(sent: Cluster) -> None:
    url = sent.pods["pod-a"].url
    poll("every record", lambda: _requests(url), lambda e: len(e) >= TOTAL)
    assert len(_requests(url, pod="pod-c")) == TOTAL
    assert _requests(url, pod="pod-a") == []
    for pod, n in SENT.items():
        assert len(_requests(url, entryPod=pod)) == n
        assert _usage(url, pod=pod) == n


def test_charts_count_every_pods_requests_once(sent: Cluster) -> None:
    url = sent.pods["pod-a"].url

    def counted() -> tuple[int, int]:
        report = HTTP.get(f"{url}/api/v1/metrics/history", timeout=5).json()
        cluster = sum(
            m["requests"] for s in report["samples"] for m in s["models"] if m["model"] == MODEL
        )
        on_c = HTTP.get(f"{url}/api/v1/metrics/history", params={"pod": "pod-c"}, timeout=5).json()
        per_pod = sum(
            m["requests"] for s in on_c["samples"] for m in s["models"] if m["model"] == MODEL
        )
        return cluster, per_pod

    assert poll("the charts' counts", counted, lambda c: c[0] >= TOTAL) == (TOTAL, TOTAL)
    gpus_of = {
        g["pod"]
        for s in HTTP.get(f"{url}/api/v1/metrics/history", timeout=5).json()["samples"][-1:]
        for g in s["gpus"]
    }
    status = HTTP.get(f"{url}/api/cluster/status", timeout=5).json()
    with_gpus = {p["id"] for p in status["pods"] if p["gpus"]}
    assert gpus_of == with_gpus


def test_a_killed_pod_keeps_its_collected_history(sent: Cluster) -> None:
    survivor = sent.pods["pod-a"].url
    poll("every record", lambda: _requests(survivor), lambda e: len(e) >= TOTAL)
    sent.pods["pod-b"].stop(signal.SIGKILL)
    try:
        _check_the_survivors_kept_pod_b_records(sent)
    finally:
        sent.rejoin("pod-b")  # the cluster is shared: leave it whole


def _check_the_survivors_kept_pod_b_records(sent: Cluster) -> None:
    sent.wait(
        lambda st: all(
            p["state"] == "unavailable"
            for s in st.values()
            for p in s["pods"]
            if p["id"] == "pod-b"
        ),
        20,
        "pod-b unavailable",
    )
    for name in ("pod-a", "pod-c"):
        url = sent.pods[name].url
        assert len(_requests(url, entryPod="pod-b")) == SENT["pod-b"]
        assert _usage(url) == TOTAL
        assert _usage(url, pod="pod-b") == SENT["pod-b"]


SLOW = "observed-slow-c"


def _in_flight_on_c(url: str) -> list[tuple[float, int]]:
    """``url``'s charts of pod-c: (sample time, ``SLOW``'s requests in flight), sample by
    sample (a sample without ``SLOW``: none in flight, nothing ended)."""
    report = HTTP.get(f"{url}/api/v1/metrics/history", params={"pod": "pod-c"}, timeout=5)
    assert report.status_code == 200, report.text
    return [
        (s["t"], sum(m["inFlight"] for m in s["models"] if m["model"] == SLOW))
        for s in report.json()["samples"]
    ]


def test_a_request_in_flight_on_another_pod_shows_until_it_ends(
    shared_cluster: Cluster,
) -> None:
    """pod-a learns pod-c's requests in flight from its pulls, which go only when pod-c's
    heartbeat says the answer changed. A stream entering pod-a runs on pod-c, which
    records nothing (pod-a does): pod-c's answer changes, then returns to what it was
    before. pod-a must count the stream on pod-c while it runs, and stop when it ends."""
    shared_cluster.wait_one_leader()
    iid = shared_cluster.load_on("pod-c", SLOW, "--itl-ms", "100")["id"]
    url = shared_cluster.pods["pod-a"].url
    ended: list[float] = []

    def stream() -> None:
        body = {
            "model": SLOW,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 70,  # 7 s: longer than a chart sample (5 s)
            "stream": True,
        }
        with HTTP.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as resp:
            assert resp.status_code == 200, resp.read()
            for _ in resp.iter_lines():
                pass
        ended.append(time.time())

    streaming = threading.Thread(target=stream)
    try:
        poll(f"{SLOW} routable on pod-a", partial(lambda u: SLOW in listed_models(u), url), bool)
        streaming.start()
        poll(
            "pod-a's charts counting the stream in flight on pod-c",
            partial(_in_flight_on_c, url),
            lambda samples: any(n == 1 for _, n in samples),
            timeout=20,
        )
        streaming.join(30)
        assert ended, "the stream did not end within 30 s"
        # a pull within the collect interval (2 s) of the end, and a margin
        settled = ended[0] + 3.0
        after = poll(
            "a chart sample of pod-a taken 3 s after the stream ended",
            partial(_in_flight_on_c, url),
            lambda samples: any(t > settled for t, _ in samples),
            timeout=20,
        )
        late = [n for t, n in after if t > settled]
        assert late == [0] * len(late), after  # (at least one: the poll's condition)
    finally:
        if streaming.is_alive():
            streaming.join(30)
        shared_cluster.unload("pod-c", iid)
