"""LoRA adapters on first request, over a real server with sim engines (one pod).

One server for the module. Each base model serves one test, so a test sees only its
own adapters: ``first`` (first request, single flight, bad adapters), ``lru`` (slots
full), ``gone`` (a base unloaded drops its adapters).
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from testkit.adapters import make_adapter, metric_value
from testkit.servers import ServerPool, ServerProcess

SIM_ARGS = '[--load-seconds, "0.3", --lora-load-ms, "300", --ttft-ms, "5", --itl-ms, "20"]'
MAX_WAIT = 20


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("adapters")
    for name in ("sql", "poem", "a1", "a2", "a3", "g1", "l1", "l2", "b1", "b2", "vanished"):
        make_adapter(root / name, rank=8)
    make_adapter(root / "big", rank=32)
    return root


@pytest.fixture(scope="module")
def srv(module_server_factory: ServerPool, folders: Path) -> ServerProcess:
    config = folders / "sardeenz.yaml"
    config.write_text(
        f"""
catalog:
  first:
    modelPath: org/first
    engine: sim
    loraSlots: 2
    extraArgs: {SIM_ARGS}
  lru:
    modelPath: org/lru
    engine: sim
    loraSlots: 2
    maxLoraRank: 16
    extraArgs: {SIM_ARGS}
  gone:
    modelPath: org/gone
    engine: sim
    loraSlots: 1
    extraArgs: {SIM_ARGS}
  leave:
    modelPath: org/leave
    engine: sim
    loraSlots: 1
    extraArgs: {SIM_ARGS}
  busy:
    modelPath: org/busy
    engine: sim
    loraSlots: 1
    extraArgs: {SIM_ARGS}
  plain:
    modelPath: org/plain
    engine: sim
  sql: {{adapterOf: first, adapterPath: "{folders / "sql"}"}}
  poem: {{adapterOf: first, adapterPath: "{folders / "poem"}", aliases: [verse]}}
  vanished: {{adapterOf: first, adapterPath: "{folders / "vanished"}"}}
  big: {{adapterOf: first, adapterPath: "{folders / "big"}"}}
  orphan: {{adapterOf: nowhere, adapterPath: "{folders / "sql"}"}}
  nolora: {{adapterOf: plain, adapterPath: "{folders / "sql"}"}}
  a1: {{adapterOf: lru, adapterPath: "{folders / "a1"}"}}
  a2: {{adapterOf: lru, adapterPath: "{folders / "a2"}"}}
  a3: {{adapterOf: lru, adapterPath: "{folders / "a3"}"}}
  g1: {{adapterOf: gone, adapterPath: "{folders / "g1"}"}}
  l1: {{adapterOf: leave, adapterPath: "{folders / "l1"}"}}
  l2: {{adapterOf: leave, adapterPath: "{folders / "l2"}"}}
  b1: {{adapterOf: busy, adapterPath: "{folders / "b1"}"}}
  b2: {{adapterOf: busy, adapterPath: "{folders / "b2"}"}}
"""
    )
    env = {
        "SARDEENZ_ONDEMAND_MAX_WAIT_SECONDS": str(MAX_WAIT),
        "SARDEENZ_ONDEMAND_FAILURE_HOLD_SECONDS": "30",
    }
    server = module_server_factory(args=["--config", str(config)], extra_env=env).start()
    shutil.rmtree(folders / "vanished")  # valid when read, gone when first requested
    return server


def complete(srv: ServerProcess, model: str, max_tokens: int = 2) -> httpx.Response:
    with srv.client() as c:
        return c.post(
            "/v1/completions",
            json={"model": model, "prompt": "hi", "max_tokens": max_tokens},
            timeout=MAX_WAIT + 10,
        )


def instances_of(srv: ServerProcess, name: str) -> list[dict[str, Any]]:
    with srv.client() as c:
        return [i for i in c.get("/api/v1/models").json() if i["servedModelName"] == name]


def engine_state(srv: ServerProcess, base: str) -> dict[str, Any]:
    """What the base's (only) simulated engine itself says: its adapters, loads, reloads."""
    (inst,) = instances_of(srv, base)
    with srv.client() as c:
        state: dict[str, Any] = c.get(f"/api/direct/{inst['port']}/sim/state").json()
    return state


def metric(srv: ServerProcess, line_start: str) -> float:
    return metric_value(srv.url, line_start)


def test_bad_adapters_are_listed_invalid_with_their_reason(srv: ServerProcess) -> None:
    with srv.client() as c:
        catalog = {m["name"]: m for m in c.get("/api/v1/catalog").json()}
    assert catalog["big"]["state"] == "invalid"
    assert "rank 32 is greater than 'first''s maxLoraRank 16" in catalog["big"]["error"]
    assert catalog["orphan"]["state"] == "invalid"
    assert "no catalog entry named 'nowhere'" in catalog["orphan"]["error"]
    assert catalog["nolora"]["state"] == "invalid"
    assert "'plain' has no loraSlots" in catalog["nolora"]["error"]
    assert catalog["sql"]["state"] == "unloaded"
    assert catalog["sql"]["entry"]["adapterOf"] == "first"
    with srv.client() as c:
        cards = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
    assert cards["sql"]["parent"] == "first"  # listed as vLLM lists an adapter
    assert cards["sql"]["state"] == "unloaded"
    assert "parent" not in cards["first"]
    assert "big" not in cards
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused")
    with pytest.raises(openai.NotFoundError):  # an invalid entry is no model
        client.completions.create(model="big", prompt="hi", max_tokens=1)


def test_first_request_starts_the_base_and_loads_the_adapter(srv: ServerProcess) -> None:
    assert instances_of(srv, "first") == []
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=MAX_WAIT + 10)
    reply = client.completions.create(model="sql", prompt="hi", max_tokens=3)
    assert reply.model == "sql"  # the engine answered as the adapter
    base = client.completions.create(model="first", prompt="hi", max_tokens=3)
    assert base.model == "first"
    assert [i["status"] for i in instances_of(srv, "first")] == ["active"]
    state = engine_state(srv, "first")
    assert set(state["lora_adapters"]) == {"sql"}
    stream = client.chat.completions.create(
        model="sql", messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True
    )
    assert {chunk.model for chunk in stream} == {"sql"}
    assert engine_state(srv, "first")["lora_loads"] == 1  # the second request was a hit
    listed = {m.id: m.model_extra or {} for m in client.models.list().data}
    assert listed["sql"]["state"] == "active"
    assert listed["poem"]["state"] == "unloaded"
    assert metric(srv, 'sardeenz_adapter_loads_total{model="sql"}') == 1
    assert metric(srv, 'sardeenz_adapter_misses_total{model="sql"}') == 1
    assert metric(srv, 'sardeenz_adapter_hits_total{model="sql"}') == 1


def test_fifty_concurrent_first_requests_load_once(srv: ServerProcess) -> None:
    complete(srv, "first")  # the base runs (the previous test may not have run)
    loads_before = engine_state(srv, "first")["lora_loads"]

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=srv.url, timeout=MAX_WAIT + 10) as c:
            body = {"prompt": "hi", "max_tokens": 2}
            return await asyncio.gather(
                *(
                    c.post("/v1/completions", json={**body, "model": "verse" if i % 2 else "poem"})
                    for i in range(50)
                )
            )

    replies = asyncio.run(burst())
    assert [r.status_code for r in replies] == [200] * 50
    assert {r.json()["model"] for r in replies} == {"poem"}  # an alias becomes the adapter
    assert engine_state(srv, "first")["lora_loads"] == loads_before + 1
    assert metric(srv, 'sardeenz_adapter_loads_total{model="poem"}') == 1
    hits = metric(srv, 'sardeenz_adapter_hits_total{model="poem"}')
    misses = metric(srv, 'sardeenz_adapter_misses_total{model="poem"}')
    assert hits + misses == 50


def test_a_failed_load_answers_every_waiter_with_vllms_reason(
    srv: ServerProcess, folders: Path
) -> None:
    complete(srv, "first")

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=srv.url, timeout=MAX_WAIT + 10) as c:
            body = {"model": "vanished", "prompt": "hi", "max_tokens": 1}
            return await asyncio.gather(*(c.post("/v1/completions", json=body) for _ in range(5)))

    replies = asyncio.run(burst())
    expected = (
        "LoRA adapter 'vanished' could not be loaded: Loading lora vanished failed: No adapter "
        f"found for {folders / 'vanished'}"
    )
    for r in replies:
        assert r.status_code == 404
        assert r.json()["error"]["message"] == expected
        assert r.json()["error"]["code"] == "adapter_load_failed"
    assert metric(srv, 'sardeenz_adapter_load_failures_total{model="vanished"}') == 1
    # The others still serve: the failure did not take a slot or the base down.
    assert complete(srv, "sql").status_code == 200
    assert "vanished" not in engine_state(srv, "first")["lora_adapters"]


def test_slots_full_unloads_the_lru_adapter_never_one_in_flight(srv: ServerProcess) -> None:
    assert complete(srv, "a1").json()["model"] == "a1"
    assert complete(srv, "a2").json()["model"] == "a2"
    assert set(engine_state(srv, "lru")["lora_adapters"]) == {"a1", "a2"}
    # a1 is the least recently used, but a long request for it is in flight:
    # a3 must take a2's slot.
    body = {"model": "a1", "prompt": "x", "max_tokens": 100, "stream": True}
    with (
        httpx.Client(base_url=srv.url, timeout=MAX_WAIT + 10) as c,
        c.stream("POST", "/v1/completions", json=body) as long,
    ):
        lines = long.iter_lines()
        assert next(lines).startswith("data: ")  # a1's request is streaming now
        assert complete(srv, "a3").json()["model"] == "a3"
        assert set(engine_state(srv, "lru")["lora_adapters"]) == {"a1", "a3"}
        rest = list(lines)
    assert "data: [DONE]" in rest  # the in-flight request finished whole
    assert metric(srv, 'sardeenz_adapter_unloads_total{model="a2",reason="lru"}') == 1
    # Now a1 is idle and the least recently used: a2 coming back evicts it.
    assert complete(srv, "a3").status_code == 200
    assert complete(srv, "a2").json()["model"] == "a2"
    state = engine_state(srv, "lru")
    assert set(state["lora_adapters"]) == {"a2", "a3"}
    assert state["lora_reloads"] == 0  # never more adapters than the engine's slots
    assert metric(srv, 'sardeenz_adapter_unloads_total{model="a1",reason="lru"}') == 1


def test_an_unloaded_base_drops_its_adapters(srv: ServerProcess) -> None:
    assert complete(srv, "g1").json()["model"] == "g1"
    (inst,) = instances_of(srv, "gone")
    with srv.client() as c:
        assert c.post(f"/api/v1/models/{inst['id']}/unload", timeout=30).status_code == 200
    deadline = time.monotonic() + 20
    while instances_of(srv, "gone"):
        assert time.monotonic() < deadline, "the base was not unloaded"
        time.sleep(0.1)
    assert metric(srv, 'sardeenz_adapter_unloads_total{model="g1",reason="base_gone"}') == 1
    # The next request starts the base again and loads the adapter into the new instance.
    assert complete(srv, "g1").json()["model"] == "g1"
    (again,) = instances_of(srv, "gone")
    assert again["id"] != inst["id"]
    assert set(engine_state(srv, "gone")["lora_adapters"]) == {"g1"}
    assert metric(srv, 'sardeenz_adapter_loads_total{model="g1"}') == 2


def test_put_checks_an_adapter_against_its_base(srv: ServerProcess, folders: Path) -> None:
    with srv.client() as c:
        good = c.put(
            "/api/v1/catalog/sql2", json={"adapterOf": "first", "adapterPath": str(folders / "sql")}
        )
        assert good.status_code == 200, good.text
        assert good.json()["entry"]["adapterOf"] == "first"
        big = c.put(
            "/api/v1/catalog/big2", json={"adapterOf": "first", "adapterPath": str(folders / "big")}
        )
        assert big.status_code == 400
        assert big.json()["code"] == "invalid_catalog_entry"
        assert "rank 32" in big.json()["detail"]
        nolora = c.put(
            "/api/v1/catalog/x2", json={"adapterOf": "plain", "adapterPath": str(folders / "sql")}
        )
        assert nolora.status_code == 400
        assert "has no loraSlots" in nolora.json()["detail"]
        mixed = c.put(
            "/api/v1/catalog/x3",
            json={"adapterOf": "first", "adapterPath": str(folders / "sql"), "pinned": True},
        )
        assert mixed.status_code == 400
        assert "pinned: does not apply to an adapter" in mixed.json()["detail"]
    assert complete(srv, "sql2").json()["model"] == "sql2"


def test_a_client_that_leaves_during_the_load_does_not_pin_the_adapter(
    srv: ServerProcess,
) -> None:
    """The load goes on (shielded); the leaver's place is given back, so the adapter
    can be unloaded later (one slot: l2 needs l1's)."""
    assert complete(srv, "leave").status_code == 200  # the base runs
    body = {"model": "l1", "prompt": "hi", "max_tokens": 1}
    with pytest.raises(httpx.ReadTimeout), httpx.Client(base_url=srv.url, timeout=0.1) as c:
        c.post("/v1/completions", json=body)  # the adapter's load takes 300 ms
    deadline = time.monotonic() + MAX_WAIT
    while "l1" not in engine_state(srv, "leave")["lora_adapters"]:
        assert time.monotonic() < deadline, "the load did not go on without its client"
        time.sleep(0.1)
    reply = complete(srv, "l2")
    assert reply.status_code == 200, reply.text  # not 503 adapter_slots_busy
    assert set(engine_state(srv, "leave")["lora_adapters"]) == {"l2"}


def test_with_every_slot_serving_a_request_the_next_adapter_waits_for_one(
    srv: ServerProcess,
) -> None:
    """One slot, b1 streaming: b2 neither evicts b1 nor fails; it is loaded once b1's
    request ends."""
    assert complete(srv, "b1").status_code == 200
    order: list[str] = []
    answers: list[httpx.Response] = []

    def other() -> None:
        answers.append(complete(srv, "b2"))
        order.append("b2 answered")

    body = {"model": "b1", "prompt": "x", "max_tokens": 60, "stream": True}
    with (
        httpx.Client(base_url=srv.url, timeout=MAX_WAIT + 10) as c,
        c.stream("POST", "/v1/completions", json=body) as long,
    ):
        lines = long.iter_lines()
        assert next(lines).startswith("data: ")
        waiter = threading.Thread(target=other)
        waiter.start()
        rest = list(lines)
        order.append("b1 ended")
    waiter.join(MAX_WAIT + 10)
    assert "data: [DONE]" in rest  # b1 was not cut
    assert order == ["b1 ended", "b2 answered"]
    assert answers[0].status_code == 200, answers[0].text
    assert answers[0].json()["model"] == "b2"
    assert set(engine_state(srv, "busy")["lora_adapters"]) == {"b2"}
