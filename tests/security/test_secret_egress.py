"""Secrets stay in: no catalog entry or direct request sends the node's credentials out,
and no external entry can make the server call itself for ever (issue 23 items 4, 7).

A listener on loopback plays the attacker's server: it records every request it
gets. Before: a catalog entry ``{"engine": "external", "url": <listener>,
"apiKeyEnv": "SARDEENZ_JWT_SECRET"}`` and one ``/v1`` request delivered the JWT
secret to it (the same with ``SARDEENZ_API_KEYS``, ``CLUSTER_SECRET`` and any
one-line ``apiKeyFile``); after an engine failed, a process bound to its port got
``/api/direct`` requests with the admin's ``Authorization``; an entry pointing at its
own server recursed into 1,000+ nested requests and 1,046 open files.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import psutil
import pytest

from testkit.servers import ServerProcess, kill_engines, load_active, wait_for_status

JWT_SECRET = "egress-tests-hs256-secret-0123456789abcdef"
API_KEY = "egress-inference-key-0123456789"
CLUSTER_SECRET = "egress-cluster-secret-" + "s" * 40
EXT_KEY = "sk-external-server-key"
SECRETS = (JWT_SECRET, API_KEY, CLUSTER_SECRET)


class Listener:
    """An HTTP server on loopback that records what it receives and answers like vLLM."""

    def __init__(self, port: int = 0) -> None:
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                seen.append((self.command, self.path, dict(self.headers.items()), body))
                out = b'{"id": "x", "object": "chat.completion", "choices": []}'
                if self.path.endswith("/models"):
                    out = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def text(self) -> str:
        return "\n".join(f"{m} {p} {h} {b!r}" for m, p, h, b in self.seen)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    srv = Listener()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("egress-secrets") / "one-line"
    path.write_text("a-secret-of-the-host\n")
    return path


def _server(data_dir: Path, config: str = "", **env: str) -> ServerProcess:
    args = []
    if config:
        (data_dir / "sardeenz.yaml").write_text(config)
        args = ["--config", str(data_dir / "sardeenz.yaml")]
    return ServerProcess(
        data_dir,
        args=args,
        extra_env={
            "SARDEENZ_JWT_SECRET": JWT_SECRET,
            "SARDEENZ_API_KEYS": API_KEY,
            "CLUSTER_SECRET": CLUSTER_SECRET,
            "SARDEENZ_EXTERNAL_CHECK_SECONDS": "0.3",
            "EXT_OK_KEY": EXT_KEY,
            "PEER_KEY": API_KEY,
            **env,
        },
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, listener: Listener) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("egress")
    config = f"""
catalog:
  leak-from-config:
    engine: external
    url: http://127.0.0.1:{listener.port}/v1
    modelPath: m
    apiKeyEnv: SARDEENZ_JWT_SECRET
"""
    srv = _server(data_dir, config).start()
    yield srv
    srv.stop()
    kill_engines(data_dir)


def _admin() -> dict[str, str]:
    claims = {"sub": "admin-user", "exp": int(time.time()) + 3600, "roles": ["admin"]}
    return {"Authorization": f"Bearer {jwt.encode(claims, JWT_SECRET, algorithm='HS256')}"}


def _put(srv: ServerProcess, name: str, entry: dict[str, Any]) -> httpx.Response:
    with httpx.Client(base_url=srv.url, headers=_admin(), timeout=30) as api:
        return api.put(f"/api/v1/catalog/{name}", json=entry)


def _chat(srv: ServerProcess, model: str, timeout: float = 30) -> httpx.Response:
    return httpx.post(
        f"{srv.url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "source",
    [
        {"apiKeyEnv": "SARDEENZ_JWT_SECRET"},
        {"apiKeyEnv": "SARDEENZ_API_KEYS"},
        {"apiKeyEnv": "CLUSTER_SECRET"},
        {"apiKeyFile": "SECRET_FILE"},
    ],
)
def test_an_entry_cannot_send_the_nodes_secrets_out(
    server: ServerProcess, listener: Listener, secret_file: Path, source: dict[str, str]
) -> None:
    if source.get("apiKeyFile") == "SECRET_FILE":
        source = {"apiKeyFile": str(secret_file)}
    entry = {"engine": "external", "url": f"http://127.0.0.1:{listener.port}/v1", **source}
    resp = _put(server, "leak", {**entry, "modelPath": "m"})
    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == "invalid_catalog_entry"
    assert _chat(server, "leak").status_code == 404
    for secret in (*SECRETS, "a-secret-of-the-host"):
        assert secret not in listener.text()
        assert secret not in resp.text


def test_an_entry_from_the_config_file_cannot_either(
    server: ServerProcess, listener: Listener
) -> None:
    with httpx.Client(base_url=server.url, headers=_admin(), timeout=30) as api:
        deadline = time.monotonic() + 15
        while (model := api.get("/api/v1/catalog/leak-from-config").json())["state"] != "failed":
            assert time.monotonic() < deadline, model
            time.sleep(0.1)
    assert "Sardeenz's own variables" in model["error"]
    assert _chat(server, "leak-from-config").status_code == 503
    assert JWT_SECRET not in listener.text()


def test_an_allowed_key_goes_to_its_server_and_nothing_else(
    server: ServerProcess, listener: Listener
) -> None:
    url = f"http://127.0.0.1:{listener.port}/v1"
    entry = {"engine": "external", "url": url, "modelPath": "m", "apiKeyEnv": "EXT_OK_KEY"}
    assert _put(server, "ext-ok", entry).status_code == 200
    resp = _chat(server, "ext-ok")
    assert resp.status_code == 200, resp.text
    posts = [h for m, p, h, _ in listener.seen if m == "POST"]
    assert posts, listener.text()
    headers = {k.lower(): v for k, v in posts[-1].items()}
    assert headers["authorization"] == f"Bearer {EXT_KEY}"
    assert headers["via"].startswith("1.1 sardeenz-")
    for secret in SECRETS:
        assert secret not in listener.text()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.0.0.1:PORT/prefix", "0.0.0.0"])
def test_an_entry_pointing_at_its_own_server_is_refused(server: ServerProcess, host: str) -> None:
    if ":PORT" in host:
        url = f"http://{host.replace('PORT', str(server.port))}/v1"
    else:
        url = f"http://{host}:{server.port}/v1"
    entry = {"engine": "external", "url": url, "modelPath": "self-loop", "apiKeyEnv": "PEER_KEY"}
    resp = _put(server, "self-loop", entry)
    assert resp.status_code == 400, resp.text
    assert "forwarding loop" in resp.json()["detail"]


def test_a_loop_through_another_server_is_cut_at_once(
    server: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A's entry goes to B, B's to A: neither can know at PUT; the Via header tells."""
    other = _server(tmp_path_factory.mktemp("egress-b")).start()
    try:
        loop_a = {
            "engine": "external",
            "url": f"http://127.0.0.1:{other.port}/v1",
            "modelPath": "ping-pong",
            "apiKeyEnv": "PEER_KEY",
        }
        loop_b = {**loop_a, "url": f"http://127.0.0.1:{server.port}/v1"}
        assert _put(server, "ping-pong", loop_a).status_code == 200
        assert _put(other, "ping-pong", loop_b).status_code == 200
        assert other.proc is not None
        assert server.proc is not None
        procs = [psutil.Process(server.proc.pid), psutil.Process(other.proc.pid)]
        fds = [p.num_fds() for p in procs]
        for srv in (server, other):
            t0 = time.monotonic()
            resp = _chat(srv, "ping-pong", timeout=60)
            elapsed = time.monotonic() - t0
            assert resp.status_code == 508, resp.text[:300]
            assert resp.json()["error"]["code"] == "forwarding_loop"
            assert elapsed < 5, f"answered after {elapsed:.1f} s"
        grown = [p.num_fds() - n for p, n in zip(procs, fds, strict=True)]
        assert max(grown) < 20, grown
        assert "Traceback" not in server.log() + other.log()
    finally:
        other.stop()
        kill_engines(other.data_dir)


def test_direct_requests_reach_only_the_engine_and_never_with_credentials(
    server: ServerProcess,
) -> None:
    """After an engine failed, a process bound to its port gets nothing, least of all
    the admin's token."""
    with httpx.Client(base_url=server.url, headers=_admin(), timeout=30) as api:
        inst = load_active(api, "direct-m")
        port = inst["port"]
        assert api.get(f"/api/direct/{port}/v1/models").status_code == 200
        os.killpg(os.getpgid(inst["processId"]), signal.SIGKILL)
        wait_for_status(api, inst["id"], "failed", timeout=30)
        squatter = None
        deadline = time.monotonic() + 10
        while squatter is None:
            with contextlib.suppress(OSError):
                squatter = Listener(port)
            if squatter is None:
                assert time.monotonic() < deadline, f"port {port} never freed"
                time.sleep(0.1)
        try:
            resp = api.get(f"/api/direct/{port}/v1/models")
            assert resp.status_code == 502, resp.text
            assert resp.json()["code"] == "engine_not_running"
            assert squatter.seen == []
        finally:
            squatter.close()
        assert "Traceback" not in server.log()


def test_a_live_engine_port_shared_with_another_process_is_refused(server: ServerProcess) -> None:
    """The port is the engine's tree's alone, or no direct request goes there."""
    with httpx.Client(base_url=server.url, headers=_admin(), timeout=30) as api:
        inst = load_active(api, "direct-shared")
        port = inst["port"]
        other = socket.socket(socket.AF_INET6)
        try:
            other.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            other.bind(("::1", port))
            other.listen()
            resp = api.get(f"/api/direct/{port}/v1/models")
            assert resp.status_code == 502, resp.text
            assert resp.json()["code"] == "engine_not_verified"
        finally:
            other.close()
        assert api.get(f"/api/direct/{port}/v1/models").status_code == 200
