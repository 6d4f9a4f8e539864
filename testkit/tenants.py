"""Traffic of one tenant through several pods, and the check that it got its limit once.

Used by tests/cluster/test_tenant_limits.py (static peers) and
tests/kube/test_kube_tenants.py (Kubernetes mode): the same clients, the same
tolerance, whichever way the pods find each other.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import orjson

from sardeenz.tls import client_tls
from testkit.servers import HTTP
from testkit.waiting import wait_until

Seen = list[tuple[int, str | None, str]]
"""(status, Retry-After, the body's start) of each request one client sent."""


def secret(key_id: str) -> str:
    return f"sk-{key_id}-0123456789"


def keys_file(path: Path, key_ids: Iterable[str]) -> str:
    """An inference keys file (``SARDEENZ_API_KEYS_FILE``) of ``secret(id)`` per id."""
    path.write_text(
        "".join(f"{hashlib.sha256(secret(k).encode()).hexdigest()} {k}\n" for k in key_ids)
    )
    return str(path)


def chat_body(model: str, max_tokens: int = 4) -> bytes:
    return orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": max_tokens,
        }
    )


def inference(url: str, key_id: str) -> httpx.Client:
    return httpx.Client(
        base_url=url,
        headers={"Authorization": f"Bearer {secret(key_id)}"},
        timeout=30,
        verify=client_tls(),
    )


def chat(client: httpx.Client, body: bytes) -> httpx.Response:
    return client.post(
        "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
    )


def put_tenant(url: str, name: str, body: dict[str, Any]) -> None:
    """Through ``url``, following a follower's 307 to the leader as any client would."""
    resp = HTTP.put(f"{url}/api/v1/tenants/{name}", json=body, follow_redirects=True, timeout=30)
    assert resp.status_code == 200, resp.text


def control_document(url: str, key: str) -> Any:
    """The body of this pod's copy of the control state's ``key`` (None: no copy)."""
    resp = HTTP.get(f"{url}/api/cluster/control", timeout=5)
    assert resp.status_code == 200, resp.text
    return next((d["body"] for d in resp.json()["documents"] if d["key"] == key), None)


def wait_tenant_everywhere(urls: Iterable[str], name: str) -> None:
    wait_until(
        lambda: all(name in (control_document(u, "tenants") or {}) for u in urls),
        f"tenant {name!r} in every pod's copy of the control state",
        20,
        interval=0.2,
    )


def paced_window(
    urls: dict[str, str], key_id: str, body: bytes, window: float, pace: float
) -> dict[str, Seen]:
    """One client per pod, all starting together, each sending a request every ``pace``
    seconds (paced from the start: a slow answer is not a pause) for ``window`` s."""
    results: dict[str, Seen] = {p: [] for p in urls}
    start = threading.Barrier(len(urls))

    def client(pod: str) -> None:
        with inference(urls[pod], key_id) as v1:
            start.wait(30)
            t0 = time.monotonic()
            n = 0
            while time.monotonic() - t0 < window:
                resp = chat(v1, body)
                results[pod].append(
                    (resp.status_code, resp.headers.get("retry-after"), resp.text[:400])
                )
                n += 1
                time.sleep(max(0.0, t0 + n * pace - time.monotonic()))

    threads = [threading.Thread(target=client, args=(p,)) for p in urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(window + 60)
        assert not t.is_alive(), "a client did not finish its window"
    return results


def assert_one_limit(results: dict[str, Seen], rpm: int, window: float, tolerance: float) -> int:
    """Every pod admitted some and refused some (named 429s with ``Retry-After``), and
    together they admitted ``rpm + rpm x window / 60`` within ``tolerance``: what one
    token bucket admits from full. Returns how many were admitted."""
    for pod, seen in results.items():
        statuses = {s for s, _, _ in seen}
        assert statuses <= {200, 429}, (pod, [x for x in seen if x[0] not in (200, 429)][:3])
        assert 200 in statuses, pod
        assert 429 in statuses, pod
        for status, retry_after, text in seen:
            if status == 429:
                error = orjson.loads(text)["error"]
                assert error["code"] == "rate_limit_exceeded"
                assert f"requests per minute limit of {rpm}" in error["message"]
                assert retry_after is not None
                assert int(retry_after) >= 1
    admitted = sum(1 for seen in results.values() for s, _, _ in seen if s == 200)
    expected = rpm + rpm * window / 60
    per_pod = {p: sum(1 for s, _, _ in seen if s == 200) for p, seen in results.items()}
    pods = len(results)
    print(f"admitted {admitted} of {expected:.0f} through {pods} pods (per pod {per_pod})")
    assert (1 - tolerance) * expected <= admitted <= (1 + tolerance) * expected, (
        f"admitted {admitted} over {window:.0f} s through {pods} pods (per pod {per_pod}); "
        f"one limit of {rpm}/min admits {expected:.0f} (+/- {tolerance:.0%}); "
        f"counted per pod it would be {pods * expected:.0f}"
    )
    return admitted
