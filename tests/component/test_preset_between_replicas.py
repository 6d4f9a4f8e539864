"""A model the applied preset declares, with no instance for a moment: 503, not 404.

Between two replicas (a move, a restart of its engines) nothing serves the
name; a client that got 404 ``model_not_found`` would drop the model as
unknown. A single node has presets too, so one server shows it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from testkit.servers import ServerPool, wait_for_status


def _sim(name: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "modelPath": name,
        "servedModelName": name,
        "engine": "sim",
        "extraArgs": ["--load-seconds", "0.3"],
        "replicas": replicas,
    }


def _apply(c: httpx.Client, name: str) -> dict[str, Any]:
    """POST apply and read its event stream to the end: the ``done`` event's data."""
    done: dict[str, Any] = {}
    with c.stream("POST", f"/api/cluster/presets/{name}/apply", timeout=60) as resp:
        assert resp.status_code == 200, resp.read().decode()
        kind = ""
        for line in resp.iter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and kind == "done":
                done = json.loads(line.split(":", 1)[1])
    return done


def _instances_of(c: httpx.Client, name: str) -> list[dict[str, Any]]:
    return [i for i in c.get("/api/v1/models").json() if i["servedModelName"] == name]


QUIET = 6.0
"""Longer than the reconcile loop's first retry after a failed pass (5 s)."""


def _reconcile(c: httpx.Client) -> dict[str, Any]:
    status: dict[str, Any] = c.get("/api/cluster/presets/p").json()["reconcile"]
    return status


def _pass_over(c: httpx.Client) -> None:
    """Wait until no reconcile pass is running (each of its replicas served, or failed)."""
    deadline = time.monotonic() + 60
    while (run := _reconcile(c)["lastRun"]) is not None and run["state"] == "running":
        assert time.monotonic() < deadline, f"a reconcile pass still running after 60 s: {run}"
        time.sleep(0.1)


def _unload_all(c: httpx.Client, name: str) -> None:
    """Unload every instance of ``name`` and wait until those are gone (a reconcile pass
    may start a new one meanwhile: the caller looks at what is left)."""
    unloaded = set()
    for inst in _instances_of(c, name):
        resp = c.post(f"/api/v1/models/{inst['id']}/unload")
        assert resp.status_code == 200, resp.text
        unloaded.add(inst["id"])
    deadline = time.monotonic() + 30
    while left := unloaded & {i["id"] for i in _instances_of(c, name)}:
        assert time.monotonic() < deadline, f"instances {left} of {name} not gone after 30 s"
        time.sleep(0.1)


def _chat(c: httpx.Client, model: str) -> httpx.Response:
    return c.post(
        "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )


def _assert_unknown(resp: httpx.Response, model: str) -> None:
    assert resp.status_code == 404, (model, resp.text)
    assert resp.json()["error"]["code"] == "model_not_found"


def test_declared_model_without_instances_answers_503_and_others_404(
    server_factory: ServerPool,
) -> None:
    # A pass an hour apart: only the pass right after the apply can bring a replica back.
    node = server_factory(extra_env={"SARDEENZ_PRESET_RECONCILE_SECONDS": "3600"}).start()
    with node.client() as c:
        put = c.put("/api/cluster/presets/p", json={"models": [_sim("kept"), _sim("zero", 0)]})
        assert put.status_code == 200, put.text
        other = c.put("/api/cluster/presets/other", json={"models": [_sim("draft")]})
        assert other.status_code == 200, other.text
        assert _apply(c, "p")["state"] == "done"
        [inst] = _instances_of(c, "kept")
        wait_for_status(c, inst["id"], "active")
        assert _chat(c, "kept").status_code == 200

        # The reconcile pass right after the apply may still put a replica back after
        # the unload, and a pass whose replica was unloaded before it served fails and
        # is retried within 5 s; once a pass has succeeded the next one is an hour away.
        # So: unload only once the pass under way has ended, until none comes back.
        deadline = time.monotonic() + 90
        while True:
            assert time.monotonic() < deadline, "the reconcile loop kept bringing 'kept' back"
            _pass_over(c)
            _unload_all(c, "kept")
            quiet_until = time.monotonic() + QUIET
            while not _instances_of(c, "kept") and time.monotonic() < quiet_until:
                time.sleep(0.2)
            if not _instances_of(c, "kept") and _reconcile(c)["consecutiveFailures"] == 0:
                break
        resp = _chat(c, "kept")

        assert resp.status_code == 503, resp.text
        error = resp.json()["error"]
        assert error["code"] == "model_not_ready"
        assert error["type"] == "service_unavailable_error"
        assert "preset" in error["message"]
        assert 1 <= int(resp.headers["retry-after"]) <= 30
        # A client that checks the model's card first gets the same answer, not 404.
        card = c.get("/v1/models/kept")
        assert card.status_code == 503, card.text
        assert card.json()["error"]["code"] == "model_not_ready"
        assert 1 <= int(card.headers["retry-after"]) <= 30

        _assert_unknown(_chat(c, "nobody"), "nobody")  # nobody serves it
        _assert_unknown(c.get("/v1/models/nobody"), "nobody")
        _assert_unknown(_chat(c, "zero"), "zero")  # declared with 0 replicas
        _assert_unknown(_chat(c, "draft"), "draft")  # in a preset that is not applied

        # Deleting the applied preset changes the answer at once.
        # A reconcile pass may still hold the presets (409 preset_apply_in_progress,
        # "try again when it ends"): retry that answer only, for a bounded time.
        deadline = time.monotonic() + 30
        gone = c.delete("/api/cluster/presets/p")
        while gone.status_code == 409 and time.monotonic() < deadline:
            assert gone.json()["code"] == "preset_apply_in_progress", gone.text
            time.sleep(0.2)
            gone = c.delete("/api/cluster/presets/p")
        assert gone.status_code == 200, gone.text
        _assert_unknown(_chat(c, "kept"), "kept")
        _assert_unknown(c.get("/v1/models/kept"), "kept")
