"""Eviction puts victims to sleep when that is enough, warm-up after a wake.

One server with one simulated 12 GiB GPU (2 GB reserve: about 10.9 GB usable) and
2 GiB of host RAM for weights of level-1 sleeps (SARDEENZ_SLEEP_HOST_MEMORY_GIB).
The simulated engine frees 97 % of its footprint asleep (weights 60 %, KV cache
37 %; CUDA graphs stay), so a sleeping 6 GiB model leaves room for another 6 GiB
one, but not for a 10 GiB one.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from testkit.servers import ServerPool, ServerProcess
from tests.component.test_ondemand_eviction import ask, running
from tests.component.test_ondemand_eviction import unload_all as unload_every_instance

SIM = "engine: sim"
CONFIG = f"""
catalog:
  nap:    # level 1, weights 1.8 GiB: fit the 2 GiB of host RAM
    modelPath: org/nap
    {SIM}
    sleepLevel: 1
    extraArgs: [--load-seconds, "0.2", --memory-gib, "3"]
  doze:   # level 1, weights 3.6 GiB: do not fit
    modelPath: org/doze
    {SIM}
    sleepLevel: 1
    extraArgs: [--load-seconds, "0.2", --memory-gib, "6"]
  deep:   # level 2: needs no host RAM
    modelPath: org/deep
    {SIM}
    sleepLevel: 2
    extraArgs: [--load-seconds, "0.2", --memory-gib, "6", --itl-ms, "50"]
  deep2:
    modelPath: org/deep2
    {SIM}
    sleepLevel: 2
    extraArgs: [--load-seconds, "0.2", --memory-gib, "6.5"]  # awake with deep: > 12 GiB
  big:
    modelPath: org/big
    {SIM}
    extraArgs: [--load-seconds, "0.2", --memory-gib, "6"]
  huge:
    modelPath: org/huge
    {SIM}
    extraArgs: [--load-seconds, "0.2", --memory-gib, "10"]
  idler:
    modelPath: org/idler
    {SIM}
    sleepLevel: 2
    idleSleepSeconds: 1
    extraArgs: [--load-seconds, "0.2", --memory-gib, "0.5"]
  warm:
    modelPath: org/warm
    {SIM}
    sleepLevel: 1
    warmup: true
    warmupPrompt: "Warm up"
    extraArgs: [--load-seconds, "0.2", --memory-gib, "0.5", --ttft-ms, "50", --itl-ms, "20",
                --wake-slowdown, "5"]
  cold:
    modelPath: org/cold
    {SIM}
    sleepLevel: 1
    extraArgs: [--load-seconds, "0.2", --memory-gib, "0.5", --ttft-ms, "50", --itl-ms, "20",
                --wake-slowdown, "5"]
"""
# Short: the tests wait it out (before each eviction, at each switch of the thrash tests).
RESIDENCY = 0.5


@pytest.fixture(scope="module")
def srv(
    module_server_factory: ServerPool, tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    config: Path = tmp_path_factory.mktemp("sleep-eviction") / "sardeenz.yaml"
    config.write_text(CONFIG)
    env = {
        "SARDEENZ_SIM_GPUS": "Sim GPU:12GiB",
        "SARDEENZ_ONDEMAND_MIN_RESIDENCY_SECONDS": str(RESIDENCY),
        "SARDEENZ_ONDEMAND_TICK_SECONDS": "0.2",
        "SARDEENZ_ONDEMAND_FAILURE_HOLD_SECONDS": "0",
        "SARDEENZ_SLEEP_HOST_MEMORY_GIB": "2",
    }
    return module_server_factory(args=["--config", str(config)], extra_env=env).start()


def instance(srv: ServerProcess, name: str) -> dict[str, Any]:
    with srv.client() as c:
        (inst,) = [i for i in c.get("/api/v1/models").json() if i["servedModelName"] == name]
        return dict(inst)


def unload_all(srv: ServerProcess) -> None:
    """Unload everything and wait until it is gone (the next test counts what runs)."""
    unload_every_instance(srv)
    deadline = time.monotonic() + 20
    while running(srv) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(srv), f"still running 20 s after unloading everything: {running(srv)}"


def eviction_lines(srv: ServerProcess, for_model: str) -> list[str]:
    return [x for x in srv.log().splitlines() if f"to make room for {for_model}" in x]


def engine_counter(srv: ServerProcess, name: str, metric: str) -> float:
    """A counter of the model's engine, read from the engine's own /metrics."""
    port = instance(srv, name)["port"]
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(metric + "{") or line.startswith(metric + " ")
    )


class CatalogEvents:
    """Reads the dashboard's event stream (``/api/v1/events``) in a thread until an
    event of ``model`` arrives (or 30 s pass)."""

    def __init__(self, srv: ServerProcess, model: str) -> None:
        self.found: list[dict[str, Any]] = []
        self.subscribed = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(srv, model), daemon=True)
        self._thread.start()
        assert self.subscribed.wait(10)
        time.sleep(0.2)  # the server subscribes as the response starts

    def _read(self, srv: ServerProcess, model: str) -> None:
        deadline = time.monotonic() + 30
        timeout = httpx.Timeout(10, read=30)
        with (
            httpx.Client(base_url=srv.url, timeout=timeout) as c,
            c.stream("GET", "/api/v1/events") as r,
        ):
            self.subscribed.set()
            kind = ""
            for line in r.iter_lines():
                if line.startswith("event:"):
                    kind = line.split(":", 1)[1].strip()
                elif line.startswith("data:") and kind == "catalog":
                    event = orjson.loads(line.split(":", 1)[1])
                    if event["model"] == model:
                        self.found.append(event)
                        return
                if time.monotonic() > deadline:
                    return

    def wait(self) -> dict[str, Any]:
        self._thread.join(35)
        assert self.found, "no catalog event"
        return self.found[0]


def test_a_victim_that_can_sleep_is_put_to_sleep_and_it_is_an_event(srv: ServerProcess) -> None:
    unload_all(srv)
    assert ask(srv, "deep").status_code == 200
    time.sleep(RESIDENCY + 0.2)
    events = CatalogEvents(srv, "deep")
    resp = ask(srv, "big")
    assert resp.status_code == 200, resp.text
    assert running(srv) == {"deep": "sleeping", "big": "active"}
    (line,) = eviction_lines(srv, "big")
    assert "evicting deep (instance" in line
    assert "put to sleep (level 2)" in line
    assert "needed 1.9 GiB per GPU" in line
    event = events.wait()
    assert event["action"] == "sleep"
    assert event["reason"] == "evicted"
    assert event["forModel"] == "big"
    assert event["level"] == 2
    assert event["neededBytes"] > 0
    assert event["freedBytes"] >= event["neededBytes"]
    with srv.client() as c:
        metrics = c.get("/metrics").text
    assert (
        'sardeenz_ondemand_lifecycle_actions_total{action="sleep",model="deep",reason="evicted"}'
        in metrics
    )
    woke = ask(srv, "deep")  # back from sleep: the wake makes room in turn
    assert woke.status_code == 200, woke.text
    assert running(srv)["deep"] == "active"


def test_level_one_sleeps_only_while_host_ram_allows_else_the_victim_is_unloaded(
    srv: ServerProcess,
) -> None:
    unload_all(srv)
    assert ask(srv, "nap").status_code == 200  # least recently used of the two
    time.sleep(0.3)
    assert ask(srv, "doze").status_code == 200
    time.sleep(RESIDENCY + 0.2)
    resp = ask(srv, "big")
    assert resp.status_code == 200, resp.text
    # nap asleep at level 1 (its 1.8 GiB of weights fit the 2 GiB of host RAM) does not
    # free enough alone; doze's 3.6 GiB do not fit in host RAM, so it is unloaded.
    assert running(srv) == {"nap": "sleeping", "big": "active"}
    lines = eviction_lines(srv, "big")[-2:]
    assert "evicting nap" in lines[0]
    assert "put to sleep (level 1)" in lines[0]
    assert "evicting doze" in lines[1]
    assert "unloaded" in lines[1]


def test_when_sleeping_is_not_enough_the_victim_is_unloaded_at_once(srv: ServerProcess) -> None:
    unload_all(srv)
    assert ask(srv, "deep").status_code == 200
    time.sleep(RESIDENCY + 0.2)
    resp = ask(srv, "huge")
    assert resp.status_code == 200, resp.text
    assert running(srv) == {"huge": "active"}
    (line,) = eviction_lines(srv, "huge")
    assert "evicting deep" in line
    assert "unloaded" in line


def test_never_a_victim_with_a_stream_in_flight_even_to_sleep_it(srv: ServerProcess) -> None:
    unload_all(srv)
    assert ask(srv, "deep").status_code == 200
    result: dict[str, Any] = {}

    def long_stream() -> None:
        body = {"model": "deep", "prompt": "x", "max_tokens": 50, "stream": True}
        with srv.client() as c, c.stream("POST", "/v1/completions", json=body) as r:
            result["status"] = r.status_code
            result["body"] = b"".join(r.iter_bytes())
        result["ended"] = time.monotonic()

    t = threading.Thread(target=long_stream)
    t.start()
    time.sleep(RESIDENCY + 0.3)  # streaming, and deep is past its residency
    second = ask(srv, "big")
    answered = time.monotonic()
    t.join(30)
    assert result["status"] == 200
    assert result["body"].rstrip().endswith(b"data: [DONE]")
    assert b'"finish_reason":"abort"' not in result["body"]
    assert second.status_code == 200, second.text
    assert answered > result["ended"]
    assert running(srv) == {"deep": "sleeping", "big": "active"}


def _first_after_wake(srv: ServerProcess, name: str) -> tuple[float, float, float]:
    """Sleep ``name``, then time the first client request after it (20 tokens); returns
    (seconds, requests its engine served meanwhile, slowed requests meanwhile)."""
    iid = instance(srv, name)["id"]
    with srv.client() as c:
        assert c.post(f"/api/v1/models/{iid}/sleep", json={"level": 1}).status_code == 200
    served = engine_counter(srv, name, "vllm:request_success_total")
    slowed = engine_counter(srv, name, "sardeenz_sim_slow_after_wake_requests_total")
    t0 = time.monotonic()
    resp = ask(srv, name, max_tokens=20)
    took = time.monotonic() - t0
    assert resp.status_code == 200, resp.text
    return (
        took,
        engine_counter(srv, name, "vllm:request_success_total") - served,
        engine_counter(srv, name, "sardeenz_sim_slow_after_wake_requests_total") - slowed,
    )


def test_a_warm_up_request_goes_first_after_a_wake_and_the_client_request_is_fast(
    srv: ServerProcess,
) -> None:
    unload_all(srv)
    assert ask(srv, "warm").status_code == 200
    assert ask(srv, "cold").status_code == 200
    events = CatalogEvents(srv, "warm")
    warm_took, warm_served, warm_slowed = _first_after_wake(srv, "warm")
    cold_took, cold_served, cold_slowed = _first_after_wake(srv, "cold")
    print(f"first request after a wake: {warm_took:.2f} s with warm-up, {cold_took:.2f} s without")
    # One request after each wake runs 5x slower: the warm-up, or else the client's.
    assert (warm_served, warm_slowed) == (2, 1)
    assert (cold_served, cold_slowed) == (1, 1)
    # 20 tokens take 0.43 s, 2.15 s slowed; the warm-up's one token 0.25 s.
    assert cold_took > 2.0
    assert warm_took < cold_took - 0.8
    event = events.wait()
    assert event["action"] == "warmup"
    assert event["outcome"] == "ok"
    assert "warm-up of warm" in srv.log()
    assert "warm-up of cold" not in srv.log()


def test_an_idle_sleep_is_an_event_too(srv: ServerProcess) -> None:
    unload_all(srv)
    events = CatalogEvents(srv, "idler")
    assert ask(srv, "idler").status_code == 200
    event = events.wait()  # after the residency (0.5 s) and the idle TTL (1 s)
    assert event["action"] == "sleep"
    assert event["reason"] == "idle"
    assert event["level"] == 2
    assert event["idleSeconds"] >= 1
    assert running(srv) == {"idler": "sleeping"}


def _metric_sum(srv: ServerProcess, prefix: str) -> float:
    with srv.client() as c:
        text = c.get("/metrics").text
    return sum(float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(prefix))


def test_alternating_models_that_can_sleep_switch_by_sleep_and_wake(srv: ServerProcess) -> None:
    """Thrash with sleep: two cold starts, then every switch is a sleep and a wake."""
    unload_all(srv)
    starts = 'sardeenz_ondemand_starts_total{model="deep'
    slept = 'sardeenz_ondemand_lifecycle_actions_total{action="sleep",model="deep'
    before_starts, before_slept = _metric_sum(srv, starts), _metric_sum(srv, slept)
    t0 = time.monotonic()
    statuses = [ask(srv, model).status_code for model in ["deep", "deep2"] * 4]
    elapsed = time.monotonic() - t0
    switches = _metric_sum(srv, slept) - before_slept
    print(f"8 alternating requests: {switches:g} switches by sleep in {elapsed:.1f} s")
    assert statuses == [200] * 8
    assert _metric_sum(srv, starts) - before_starts == 2
    assert switches == 7
    assert elapsed >= 2 * RESIDENCY  # each first load stays its minimum residency
