"""A request forwarded to a pod that stops answering ends with ``pod_unavailable`` once the
failure detector calls that pod unavailable, instead of waiting for ever (issue 28: the
soak found streams hung for 30 s and more across a network partition, which sends no
reset). The stream ends as a stream cut by an engine failure does: a final ``event: error``
(proxy/relay.py). The pod is held with SIGSTOP: its sockets stay open and silent, as across a cut.

On the shared cluster: the pod held is a follower (pod-b), let go again before the test
ends, and the test waits until every pod sees it healthy again and unloads its model.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import pytest

from testkit.cluster import Cluster
from testkit.servers import HTTP

pytestmark = pytest.mark.slow

UNAVAILABLE_AFTER = 2.5  # testkit/cluster.py TIMING
TOKENS = 400
ITL_MS = 50  # a 20 s stream: far longer than the detector's time


def _stream(url: str, model: str, out: dict[str, Any], first: threading.Event) -> None:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": TOKENS,
        "stream": True,
    }
    chunks = 0
    with HTTP.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as resp:
        out["status"] = resp.status_code
        for line in resp.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                out["done"] = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                out["error"] = chunk["error"]
                continue
            chunks += 1
            first.set()
    out["chunks"] = chunks
    out["ended"] = time.monotonic()


def test_stream_forwarded_to_a_silent_pod_ends_with_pod_unavailable(
    shared_cluster: Cluster,
) -> None:
    shared_cluster.wait_one_leader(30)
    inst = shared_cluster.load_on("pod-b", "silent-pod-model", "--itl-ms", str(ITL_MS))
    entry = shared_cluster.pods["pod-a"].url
    deadline = time.monotonic() + 15
    while "silent-pod-model" not in [
        m["id"] for m in HTTP.get(f"{entry}/v1/models", timeout=5).json()["data"]
    ]:
        assert time.monotonic() < deadline, "pod-a never routed pod-b's model"
        time.sleep(0.1)
    out: dict[str, Any] = {}
    first = threading.Event()
    reader = threading.Thread(target=_stream, args=(entry, "silent-pod-model", out, first))
    reader.start()
    assert first.wait(15), f"no first token: {out}"
    pod_b = shared_cluster.pods["pod-b"].proc
    assert pod_b is not None
    os.kill(pod_b.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        reader.join(TOKENS * ITL_MS / 1000)  # the stream's own length: it must end before
        assert not reader.is_alive(), "the stream still waits on the silent pod"
    finally:
        os.kill(pod_b.pid, signal.SIGCONT)
        reader.join(30)
    took = out["ended"] - stopped
    assert out["status"] == 200
    assert out.get("error", {}).get("code") == "pod_unavailable", out
    assert out["chunks"] < TOKENS, out
    print(f"\nstream to a silent pod ended {took:.2f}s after it stopped: {out['error']}")
    # As the test found the cluster: pod-b healthy in every view, its model gone.
    shared_cluster.wait_whole(30, "pod-b let go")
    resp = HTTP.post(f"{shared_cluster.leader_url()}/api/v1/models/{inst['id']}/unload", timeout=30)
    assert resp.status_code == 200, resp.text
    assert shared_cluster.wait_instance("pod-b", inst["id"], None) is None
