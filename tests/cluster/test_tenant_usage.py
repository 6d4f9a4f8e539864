"""Billable usage over 3 real pods: every pod answers with the whole cluster's usage.

Tenants come from the config file every pod reads; a model runs on pod-c only, so
the requests entering pod-a and pod-b are forwarded to it. Each request is counted
once, by the pod that serves it (pod-c, which admits it: docs/tenancy.md, "In a
cluster"); any pod's ``/api/v1/usage`` sums all three (asked at read time). A pod
that does not answer (SIGSTOP) is named in ``missingPods`` and its usage is missing,
not invented; once it answers again the sum is whole.
"""

from __future__ import annotations

import hashlib
import json
import signal
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import openai
import pytest

from testkit.cluster import Cluster
from testkit.servers import HTTP

MODEL = "usage-c"
SENT = {"pod-a": 2, "pod-b": 3, "pod-c": 4}
KEY = "k-bill"


def _secret(key_id: str) -> str:
    return f"sk-{key_id}-cluster-0123456789"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("usage-cluster")
    keys = root / "keys.txt"
    keys.write_text(f"{hashlib.sha256(_secret(KEY).encode()).hexdigest()} {KEY}\n")
    tenants = {"billed": {"api_keys": [KEY]}}
    c = Cluster(
        root,
        3,
        SARDEENZ_API_KEYS_FILE=str(keys),
        SARDEENZ_TENANTS=json.dumps(tenants),
        SARDEENZ_USAGE_FLUSH_SECONDS="1",
    )
    try:
        c.start()
        c.wait_one_leader()
        c.load_on("pod-c", MODEL)
        yield c
    finally:
        c.close()


def _poll(what: str, get: Any, done: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = get()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"{what} not within {timeout}s: {value}"
        time.sleep(0.3)


def _listed(url: str) -> bool:
    models = HTTP.get(f"{url}/v1/models", headers=_auth(), timeout=5).json()["data"]
    return any(m["id"] == MODEL for m in models)


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {_secret(KEY)}"}


def _usage(url: str, window: dict[str, str]) -> dict[str, Any]:
    resp = HTTP.get(f"{url}/api/v1/usage", params={"group_by": "tenant", **window}, timeout=10)
    assert resp.status_code == 200, resp.text  # answered by every pod, never a redirect
    doc: dict[str, Any] = resp.json()
    return doc


def _requests(doc: dict[str, Any]) -> int:
    return sum(b["requests"] for b in doc["buckets"] if b["tenant"] == "billed")


def test_every_pod_answers_the_whole_clusters_usage_and_names_a_silent_pod(
    cluster: Cluster,
) -> None:
    now = int(time.time())
    window = {"from": str(now - 120), "to": str(now + 300)}
    prompt = completion = 0
    for entry, n in SENT.items():
        url = cluster.pods[entry].url
        _poll(f"{MODEL} routable on {entry}", partial(_listed, url), bool)
        with openai.OpenAI(
            base_url=f"{url}/v1", api_key=_secret(KEY), max_retries=0, timeout=30
        ) as client:
            for _ in range(n):
                reply = client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
                )
                assert reply.usage is not None
                prompt += reply.usage.prompt_tokens
                completion += reply.usage.completion_tokens
    total = sum(SENT.values())
    for name, pod in cluster.pods.items():
        doc = _usage(pod.url, window)
        assert doc["pods"] == ["pod-a", "pod-b", "pod-c"], (name, doc)
        assert doc["missingPods"] == []
        (row,) = [b for b in doc["buckets"] if b["tenant"] == "billed"]
        assert (row["requests"], row["promptTokens"], row["completionTokens"]) == (
            total,
            prompt,
            completion,
        ), name

    silent = cluster.pods["pod-c"]  # it served, and so billed, every request
    assert silent.proc is not None
    silent.proc.send_signal(signal.SIGSTOP)
    try:
        doc = _usage(cluster.pods["pod-a"].url, window)
        assert doc["missingPods"] == ["pod-c"]
        assert _requests(doc) == 0
    finally:
        silent.proc.send_signal(signal.SIGCONT)
    _poll(
        "pod-c's usage back in pod-a's answer",
        partial(_usage, cluster.pods["pod-a"].url, window),
        lambda d: d["missingPods"] == [] and _requests(d) == total,
    )
