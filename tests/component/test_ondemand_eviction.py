"""Eviction when an on-demand start does not fit: idle catalog models make room, LRU first.

One server with one simulated 12 GiB GPU (2 GB of it kept in reserve): two small
models fit beside each other, a big one beside one small one, two big ones never.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.servers import ServerPool, ServerProcess

CONFIG = """
catalog:
  small-1:
    modelPath: org/small-1
    engine: sim
    extraArgs: [--load-seconds, "0.2", --memory-gib, "3"]
  small-2:
    modelPath: org/small-2
    engine: sim
    extraArgs: [--load-seconds, "0.2", --memory-gib, "3"]
  big:
    modelPath: org/big
    engine: sim
    extraArgs: [--load-seconds, "0.2", --memory-gib, "6", --itl-ms, "50"]
  big-2:
    modelPath: org/big-2
    engine: sim
    extraArgs: [--load-seconds, "0.2", --memory-gib, "6"]
  nap:
    modelPath: org/nap
    engine: sim
    extraArgs: [--load-seconds, "0.2", --memory-gib, "6.5"]
    sleepLevel: 1
  pin:
    modelPath: org/pin
    engine: sim
    extraArgs: [--load-seconds, "0.2", --memory-gib, "6"]
    pinned: true
"""
# Short: the tests wait it out (before each eviction, at each switch of the thrash tests).
RESIDENCY = 0.5


@pytest.fixture(scope="module")
def srv(
    module_server_factory: ServerPool, tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    config: Path = tmp_path_factory.mktemp("eviction") / "sardeenz.yaml"
    config.write_text(CONFIG)
    env = {
        "SARDEENZ_SIM_GPUS": "Sim GPU:12GiB",
        "SARDEENZ_ONDEMAND_MIN_RESIDENCY_SECONDS": str(RESIDENCY),
        "SARDEENZ_ONDEMAND_TICK_SECONDS": "0.2",
        "SARDEENZ_ONDEMAND_FAILURE_HOLD_SECONDS": "0",
    }
    return module_server_factory(args=["--config", str(config)], extra_env=env).start()


def running(srv: ServerProcess) -> dict[str, str]:
    with srv.client() as c:
        return {i["servedModelName"]: i["status"] for i in c.get("/api/v1/models").json()}


def ask(srv: ServerProcess, model: str, max_tokens: int = 2) -> httpx.Response:
    with srv.client() as c:
        return c.post(
            "/v1/completions", json={"model": model, "prompt": "x", "max_tokens": max_tokens}
        )


def unload_all(srv: ServerProcess) -> None:
    with srv.client() as c:
        for inst in c.get("/api/v1/models").json():
            c.post(f"/api/v1/models/{inst['id']}/unload")


def test_the_least_recently_used_idle_model_makes_room(srv: ServerProcess) -> None:
    assert ask(srv, "small-1").status_code == 200
    time.sleep(0.5)
    assert ask(srv, "small-2").status_code == 200
    time.sleep(0.5)
    assert ask(srv, "small-1").status_code == 200  # small-2 is now the least recently used
    time.sleep(RESIDENCY + 0.2)
    resp = ask(srv, "big")
    assert resp.status_code == 200, resp.text
    assert running(srv) == {"small-1": "active", "big": "active"}
    assert "evicting small-2" in srv.log()


def test_never_a_model_with_a_request_in_flight(srv: ServerProcess) -> None:
    """The start waits for the stream to end, then evicts: the stream is never cut."""
    unload_all(srv)
    assert ask(srv, "big").status_code == 200
    result: dict[str, Any] = {}

    def long_stream() -> None:
        body = {"model": "big", "prompt": "x", "max_tokens": 60, "stream": True}
        with srv.client() as c, c.stream("POST", "/v1/completions", json=body) as r:
            result["status"] = r.status_code
            result["body"] = b"".join(r.iter_bytes())
        result["ended"] = time.monotonic()

    t = threading.Thread(target=long_stream)
    t.start()
    time.sleep(RESIDENCY + 0.3)  # the stream is running, big is past its residency
    second = ask(srv, "big-2")
    answered = time.monotonic()
    t.join(30)
    assert result["status"] == 200
    assert result["body"].rstrip().endswith(b"data: [DONE]")
    assert second.status_code == 200, second.text
    assert answered > result["ended"]
    assert running(srv) == {"big-2": "active"}


def test_a_pinned_model_is_never_evicted(srv: ServerProcess) -> None:
    unload_all(srv)
    assert ask(srv, "pin").status_code == 200
    time.sleep(0.5)
    refused = ask(srv, "big")
    assert refused.status_code == 503
    assert "no idle, unpinned catalog model left to evict" in refused.json()["error"]["message"]
    assert running(srv) == {"pin": "active"}


def _starts(srv: ServerProcess) -> float:
    with srv.client() as c:
        text = c.get("/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("sardeenz_ondemand_starts_total{")
    )


def test_alternating_models_that_do_not_fit_together_all_succeed(srv: ServerProcess) -> None:
    """Thrash: each switch waits for the minimum residency; no request fails."""
    unload_all(srv)
    before = _starts(srv)
    t0 = time.monotonic()
    statuses = [ask(srv, model).status_code for model in ["big", "big-2"] * 3]
    elapsed = time.monotonic() - t0
    switches = _starts(srv) - before
    print(f"6 alternating requests: {switches:g} switches in {elapsed:.1f} s")
    assert statuses == [200] * 6
    assert switches == 6
    assert elapsed >= 5 * RESIDENCY


def test_a_wake_that_does_not_fit_evicts_an_idle_model(srv: ServerProcess) -> None:
    unload_all(srv)
    assert ask(srv, "nap").status_code == 200
    with srv.client() as c:
        (nap,) = [i for i in c.get("/api/v1/models").json() if i["servedModelName"] == "nap"]
        slept = c.post(f"/api/v1/models/{nap['id']}/sleep", json={"level": 1})
        assert slept.status_code == 200, slept.text
    assert ask(srv, "big").status_code == 200  # fits beside the sleeping one
    assert running(srv) == {"nap": "sleeping", "big": "active"}
    woke = ask(srv, "nap")
    assert woke.status_code == 200, woke.text
    assert running(srv) == {"nap": "active"}
    (line,) = [x for x in srv.log().splitlines() if "to make room for nap" in x]
    assert "evicting big (instance" in line
