"""A signed pod-to-pod request is good for the pod it was signed for, and no other.

Issue 23, item 10: a request signed for pod-1, replayed to pod-2 within the
30 s window, was answered 200 (the signature covered method, path, timestamp
and body, but not who it was for, and each pod keeps its own replay memory).

The capture is real: a recorder on loopback is one of pod-a's configured
peers; it answers pod-a's ping as ``pod-r``, so pod-a heartbeats it like any
peer, signed with the cluster secret. That captured heartbeat is replayed,
byte for byte and at once, to pod-b (a real pod with the same secret): it
must be refused with 401 ``wrong_target``, and pod-b must not have taken it
as a sign of life of anybody.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.cluster import Cluster
from testkit.ports import free_port

pytestmark = pytest.mark.slow

RECORDER_HOST = "127.0.0.9"


class Recorder(ThreadingHTTPServer):
    """Answers as pod ``pod-r``; keeps every signed request it receives."""

    def __init__(self, port: int) -> None:
        super().__init__((RECORDER_HOST, port), _Handler)
        self.captured: list[dict[str, Any]] = []
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def _answer(self, data: dict[str, Any]) -> None:
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(
            {"podId": "pod-r", "host": RECORDER_HOST, "port": self.server.server_port, "term": 0}
        )

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        with self.server.lock:
            self.server.captured.append(
                {
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body,
                    "at": time.time(),
                }
            )
        self._answer({"podId": "pod-r", "term": 0, "ack": False})

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Recorder]]:
    recorder = Recorder(free_port())
    thread = threading.Thread(target=recorder.serve_forever, daemon=True)
    thread.start()
    cluster = Cluster(tmp_path_factory.mktemp("replay"), 2)
    pod_a = cluster.pods["pod-a"]
    pod_a.env["CLUSTER_PEERS"] += f",{RECORDER_HOST}:{recorder.server_port}"
    try:
        cluster.start()
        yield cluster, recorder
    finally:
        cluster.close()
        recorder.shutdown()
        recorder.server_close()
        thread.join(5)


def _captured_heartbeat(recorder: Recorder, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with recorder.lock:
            fresh = [
                c
                for c in recorder.captured
                if c["path"] == "/internal/heartbeat" and time.time() - c["at"] < 2
            ]
        if fresh:
            return fresh[-1]
        time.sleep(0.05)
    raise AssertionError(f"pod-a sent the recorder no heartbeat within {timeout}s")


def _signed_headers(captured: dict[str, Any]) -> dict[str, str]:
    return {
        k: v
        for k, v in captured["headers"].items()
        if k.startswith("x-cluster-") or k == "content-type"
    }


def test_a_request_signed_for_one_pod_is_refused_by_another(
    rig: tuple[Cluster, Recorder], tmp_path: Path
) -> None:
    cluster, recorder = rig
    cluster.wait_one_leader(20.0)
    captured = _captured_heartbeat(recorder, 20.0)
    assert json.loads(captured["body"])["podId"] == "pod-a"  # a genuine heartbeat of pod-a
    replay = httpx.post(
        f"{cluster.pods['pod-b'].url}/internal/heartbeat",
        content=captured["body"],
        headers=_signed_headers(captured),
        timeout=5,
    )
    assert time.time() - captured["at"] < 30  # well inside the replay window
    assert replay.status_code == 401, replay.text
    assert replay.json()["code"] == "wrong_target"
    log = cluster.pods["pod-b"].log_path.read_text()
    assert "Traceback" not in log
    assert "signed for pod-r" in log  # the refusal says why, in the log too


def test_the_signature_names_the_pod_it_is_for(rig: tuple[Cluster, Recorder]) -> None:
    """Changing the target header to the receiver's own id does not help: it is signed."""
    cluster, recorder = rig
    captured = _captured_heartbeat(recorder, 20.0)
    assert captured["headers"].get("x-cluster-target") == "pod-r"
    forged = {**_signed_headers(captured), "x-cluster-target": "pod-b"}
    resp = httpx.post(
        f"{cluster.pods['pod-b'].url}/internal/heartbeat",
        content=captured["body"],
        headers=forged,
        timeout=5,
    )
    assert resp.status_code == 401
    assert resp.json()["code"] == "bad_signature"
