"""``/internal/*`` and forwarded ``/v1`` requests over real HTTP: only valid signatures pass.

Two pods with API keys on (so a forwarded /v1 request must prove itself with
the cluster signature); each refusal case of the seed is one request: no
signature, bad signature, stale timestamp, a replay inside the window,
a tampered body, the wrong secret, a request of the previous format (no
``X-Cluster-Source``), a source that is not the signer's. Secret rotation restarts
one pod with the new secret and the old one as ``CLUSTER_SECRET_PREVIOUS`` (both
accepted), then with the new one only; a rolling upgrade from the previous format
does the same with ``SARDEENZ_CLUSTER_UNSOURCED_SIGNATURES``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sardeenz.security.cluster_hmac import Signer, signature
from testkit.cluster import SECRET, TESTER, Cluster
from testkit.servers import HTTP, ServerProcess

pytestmark = pytest.mark.slow

API_KEY = "inference-key-0123456789"
NEW = "n" * 64


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("pair"), 2, SARDEENZ_API_KEYS=API_KEY)
    try:
        yield cluster.start()
    finally:
        cluster.close()


def _get(url: str, path: str, headers: dict[str, str]) -> httpx.Response:
    return HTTP.get(f"{url}{path}", headers=headers, timeout=5)


def test_signed_ping_passes_and_every_bad_signature_is_401(pair: Cluster) -> None:
    url = pair.pods["pod-a"].url
    signer = Signer(SECRET.encode(), source=TESTER)
    ok = _get(url, "/internal/ping", signer.headers("GET", "/internal/ping", b"", target="pod-a"))
    assert ok.status_code == 200
    assert ok.json()["podId"] == "pod-a"

    def code(resp: httpx.Response) -> str:
        assert resp.status_code == 401, resp.text
        return str(resp.json()["code"])

    assert code(HTTP.get(f"{url}/internal/ping", timeout=5)) == "unsigned"
    bad = signer.headers("GET", "/internal/ping", b"", target="pod-a")
    bad["X-Cluster-Signature"] = "0" * 64
    assert code(_get(url, "/internal/ping", bad)) == "bad_signature"
    stale_ts = str(int((time.time() - 31) * 1000))
    stale = {
        "X-Cluster-Timestamp": stale_ts,
        "X-Cluster-Target": "pod-a",
        "X-Cluster-Source": TESTER,
        "X-Cluster-Signature": signature(
            SECRET.encode(), "GET", "/internal/ping", stale_ts, "pod-a", b"", TESTER
        ),
    }
    assert code(_get(url, "/internal/ping", stale)) == "stale_timestamp"
    # The previous format (no source) is refused outside a rolling upgrade.
    unsourced = {k: v for k, v in stale.items() if k != "X-Cluster-Source"}
    unsourced["X-Cluster-Timestamp"] = now_ts = str(int(time.time() * 1000))
    unsourced["X-Cluster-Signature"] = signature(
        SECRET.encode(), "GET", "/internal/ping", now_ts, "pod-a", b""
    )
    assert code(_get(url, "/internal/ping", unsourced)) == "unsourced"
    # The source is signed: the same request passed off as another pod's is refused.
    forged = {**signer.headers("GET", "/internal/ping", b"", target="pod-a")}
    forged["X-Cluster-Source"] = "pod-b"
    assert code(_get(url, "/internal/ping", forged)) == "bad_signature"
    once = signer.headers("GET", "/internal/ping", b"", target="pod-a")
    assert _get(url, "/internal/ping", once).status_code == 200
    assert code(_get(url, "/internal/ping", once)) == "replayed"  # within the 30 s window
    wrong = Signer(b"w" * 64, source=TESTER).headers("GET", "/internal/ping", b"", target="pod-a")
    assert code(_get(url, "/internal/ping", wrong)) == "bad_signature"
    # Signed for another path: refused before the path is even looked at.
    other = signer.headers("GET", "/internal/state", b"", target="pod-a")
    assert code(_get(url, "/internal/ping", other)) == "bad_signature"


def test_tampered_body_is_refused(pair: Cluster) -> None:
    url = pair.pods["pod-b"].url
    path = "/internal/election/vote"
    body = b'{"candidate": "pod-z", "term": 1}'
    headers = Signer(SECRET.encode(), source=TESTER).headers("POST", path, body, target="pod-b")
    tampered = b'{"candidate": "pod-y", "term": 9}'
    resp = HTTP.post(f"{url}{path}", content=tampered, headers=headers, timeout=5)
    assert resp.status_code == 401
    assert resp.json()["code"] == "bad_signature"


def test_unknown_internal_path_is_404_only_when_signed(pair: Cluster) -> None:
    url = pair.pods["pod-a"].url
    assert HTTP.get(f"{url}/internal/nope", timeout=5).status_code == 401
    path = "/internal/nope"
    signed = _get(
        url, path, Signer(SECRET.encode(), source=TESTER).headers("GET", path, b"", target="pod-a")
    )
    assert signed.status_code == 404
    path = "/internal/control/write"
    body = b"{}"
    resp = HTTP.post(
        f"{url}{path}",
        content=body,
        headers=Signer(SECRET.encode(), source=TESTER).headers("POST", path, body, target="pod-a"),
        timeout=5,
    )
    # Signed, so the route answers: a write without the leader's term and document is refused.
    assert resp.status_code == 400
    assert resp.json()["code"] == "invalid_request"


def test_internal_routes_are_not_in_the_openapi_document(pair: Cluster) -> None:
    doc = HTTP.get(f"{pair.pods['pod-a'].url}/openapi.json", timeout=5).json()
    assert not [p for p in doc["paths"] if p.startswith("/internal")]
    assert "/api/cluster/status" in doc["paths"]


def test_forwarded_v1_is_trusted_by_signature_not_by_the_clients_key(pair: Cluster) -> None:
    a, b = pair.pods["pod-a"], pair.pods["pod-b"]
    pair.wait_one_leader(15.0)
    cluster_load = pair.load_on("pod-b", "keyed")
    assert cluster_load["status"] == "active"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        models = HTTP.get(
            f"{a.url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=5
        ).json()
        if any(m["id"] == "keyed" for m in models["data"]):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("pod A does not list pod B's keyed model within 10 s")
    body = b'{"model": "keyed", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}'
    # Through pod A with the client's key: forwarded to B, which trusts A's signature.
    via_a = HTTP.post(
        f"{a.url}/v1/chat/completions",
        content=body,
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert via_a.status_code == 200, via_a.text
    # Straight to B without a key: 401; with a valid cluster signature: served, once.
    path = "/v1/chat/completions"
    plain = {"Content-Type": "application/json"}
    assert HTTP.post(f"{b.url}{path}", content=body, headers=plain).status_code == 401
    for_a = {
        **plain,
        **Signer(SECRET.encode(), source=TESTER).headers("POST", path, body, target="pod-a"),
    }
    assert HTTP.post(f"{b.url}{path}", content=body, headers=for_a).status_code == 401
    as_pod = Signer(SECRET.encode(), source=TESTER)
    # Signed by one pod, presented as forwarded by another (or as not forwarded): refused.
    for hop in ("pod-a", None):
        other = {**plain, **as_pod.headers("POST", path, body, target="pod-b")}
        if hop is not None:
            other["X-Sardeenz-Hop"] = hop
        assert HTTP.post(f"{b.url}{path}", content=body, headers=other).status_code == 401
    signed = {
        **plain,
        **as_pod.headers("POST", path, body, target="pod-b"),
        "X-Sardeenz-Hop": TESTER,
    }
    assert HTTP.post(f"{b.url}{path}", content=body, headers=signed, timeout=10).status_code == 200
    replay = HTTP.post(f"{b.url}{path}", content=body, headers=signed, timeout=10)
    assert replay.status_code == 401
    assert replay.json()["error"]["code"] == "invalid_api_key"
    wrong = {
        **plain,
        **Signer(b"w" * 64, source=TESTER).headers("POST", path, body, target="pod-b"),
    }
    assert HTTP.post(f"{b.url}{path}", content=body, headers=wrong).status_code == 401


def test_secret_rotation_old_and_new_then_only_new(tmp_path: Path, pair: Cluster) -> None:
    """One pod of its own, restarted through the two phases of a rotation."""
    peers = "127.0.0.9:9"  # a peer that never answers: the pod is in static mode
    env = {"CLUSTER_PEERS": peers, "POD_NAME": "pod-r"}
    srv = ServerProcess(
        tmp_path / "r",
        host="127.0.0.8",
        extra_env={**env, "CLUSTER_SECRET": NEW, "CLUSTER_SECRET_PREVIOUS": SECRET},
    ).start()
    try:
        for secret in (NEW, SECRET):
            h = Signer(secret.encode(), source=TESTER).headers(
                "GET", "/internal/ping", b"", target="pod-r"
            )
            assert _get(srv.url, "/internal/ping", h).status_code == 200
        srv.stop()
        srv.env.pop("CLUSTER_SECRET_PREVIOUS")
        srv.start()
        new = Signer(NEW.encode(), source=TESTER).headers(
            "GET", "/internal/ping", b"", target="pod-r"
        )
        assert _get(srv.url, "/internal/ping", new).status_code == 200
        old = Signer(SECRET.encode(), source=TESTER).headers(
            "GET", "/internal/ping", b"", target="pod-r"
        )
        resp = _get(srv.url, "/internal/ping", old)
        assert resp.status_code == 401
        assert resp.json()["code"] == "bad_signature"
    finally:
        srv.stop()


def test_rolling_upgrade_accepts_both_formats_until_it_is_turned_off(tmp_path: Path) -> None:
    """A pod of this version with ``SARDEENZ_CLUSTER_UNSOURCED_SIGNATURES`` takes requests
    of a previous-version pod (signed without a source) and this version's alike; a
    dual-signed request stripped of its source is still a replay of it. Restarted
    without the setting (the upgrade done), it refuses the previous format."""
    env = {"CLUSTER_PEERS": "127.0.0.9:9", "POD_NAME": "pod-u", "CLUSTER_SECRET": SECRET}
    srv = ServerProcess(
        tmp_path / "u",
        host="127.0.0.7",
        extra_env={**env, "SARDEENZ_CLUSTER_UNSOURCED_SIGNATURES": "true"},
    ).start()
    path = "/internal/ping"
    last_ms = 0

    def clock() -> float:
        """The test's one clock for its three ways of signing the same ping, never the same
        millisecond twice: as one pod's signer does (``Signer.timestamp``). Two signers
        of the tester in one millisecond sign alike, and the second is refused as a replay."""
        nonlocal last_ms
        last_ms = max(int(time.time() * 1000), last_ms + 1)
        return (last_ms + 0.5) / 1000

    def previous_version() -> dict[str, str]:
        ts = str(int(clock() * 1000))
        sig = signature(SECRET.encode(), "GET", path, ts, "pod-u", b"")
        return {"X-Cluster-Timestamp": ts, "X-Cluster-Target": "pod-u", "X-Cluster-Signature": sig}

    try:
        assert _get(srv.url, path, previous_version()).status_code == 200
        current = Signer(SECRET.encode(), clock, source=TESTER)
        assert _get(srv.url, path, current.headers("GET", path, b"", target="pod-u")).is_success
        # A pod in the transition signs both ways; stripped of the new headers, a captured
        # one is the replay of the same request, not a new previous-version request.
        dual = Signer(SECRET.encode(), clock, source=TESTER, unsourced=True)
        both = dual.headers("GET", path, b"", target="pod-u")
        assert _get(srv.url, path, both).status_code == 200
        stripped = {k: v for k, v in both.items() if not k.startswith("X-Cluster-Source")}
        resp = _get(srv.url, path, stripped)
        assert (resp.status_code, resp.json()["code"]) == (401, "replayed")
        srv.stop()
        srv.env.pop("SARDEENZ_CLUSTER_UNSOURCED_SIGNATURES")
        srv.start()
        resp = _get(srv.url, path, previous_version())
        assert (resp.status_code, resp.json()["code"]) == (401, "unsourced")
    finally:
        srv.stop()
