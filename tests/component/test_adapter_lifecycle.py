"""LoRA adapters follow their base over time, on one pod with sim engines: the idle TTL
unloads an unused adapter (never one with a request in flight), and a base that sleeps
keeps its adapters (its sleep does not count as idle time), a move to another GPU
carries them, a second instance gets an adapter only once the first is saturated;
an operator lists, loads and unloads adapters (API and CLI).

One server for the module, with a short idle TTL; each test has its own base.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import openai
import pytest

from testkit.adapters import make_adapter, metric_value
from testkit.servers import ServerPool, ServerProcess, load_active
from testkit.waiting import wait_until
from tests.e2e.test_cli import cli
from tests.e2e.test_cli_compose import assert_words_whole, cli_tty

SIM_ARGS = '[--load-seconds, "0.2", --lora-load-ms, "100", --ttft-ms, "5", --itl-ms, "20"]'
TTL = 6.0
WAIT = 20


@pytest.fixture(scope="module")
def srv(
    module_server_factory: ServerPool, tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = tmp_path_factory.mktemp("lifecycle")
    for name in ("idle1", "keep1", "tick1", "nap1", "nap2", "ops1", "mv1", "sat1"):
        make_adapter(root / name, rank=8)
    config = root / "sardeenz.yaml"
    config.write_text(
        f"""
catalog:
  ttl:
    modelPath: org/ttl
    engine: sim
    loraSlots: 2
    extraArgs: {SIM_ARGS}
  nap:
    modelPath: org/nap
    engine: sim
    loraSlots: 2
    sleepLevel: 1
    extraArgs: {SIM_ARGS}
  idle1: {{adapterOf: ttl, adapterPath: "{root / "idle1"}"}}
  keep1: {{adapterOf: ttl, adapterPath: "{root / "keep1"}"}}
  tick1: {{adapterOf: ttl, adapterPath: "{root / "tick1"}"}}
  nap1: {{adapterOf: nap, adapterPath: "{root / "nap1"}"}}
  nap2: {{adapterOf: nap, adapterPath: "{root / "nap2"}"}}
  ops:
    modelPath: org/ops
    engine: sim
    loraSlots: 1
    extraArgs: {SIM_ARGS}
  ops1: {{adapterOf: ops, adapterPath: "{root / "ops1"}", aliases: [ops-one]}}
  mv:
    modelPath: org/mv
    engine: sim
    loraSlots: 2
    extraArgs: {SIM_ARGS}
  mv1: {{adapterOf: mv, adapterPath: "{root / "mv1"}"}}
  sat:
    modelPath: org/sat
    engine: sim
    loraSlots: 1
    extraArgs: {SIM_ARGS}
  sat1: {{adapterOf: sat, adapterPath: "{root / "sat1"}"}}
"""
    )
    env = {
        "SARDEENZ_ADAPTER_IDLE_TTL_SECONDS": str(TTL),
        "SARDEENZ_SIM_GPUS": "NVIDIA L4:24GiB,NVIDIA L4:24GiB",
        # One request in flight saturates an instance (the other tests never send two
        # at once to one adapter).
        "SARDEENZ_ADAPTER_SATURATION_INFLIGHT": "1",
    }
    return module_server_factory(args=["--config", str(config)], extra_env=env).start()


def only_instance(srv: ServerProcess, base: str) -> dict[str, Any]:
    with srv.client() as c:
        found: list[dict[str, Any]] = c.get("/api/v1/models").json()
    (inst,) = [i for i in found if i["servedModelName"] == base]
    return inst


def engine_state(srv: ServerProcess, base: str) -> dict[str, Any]:
    with srv.client() as c:
        state: dict[str, Any] = c.get(
            f"/api/direct/{only_instance(srv, base)['port']}/sim/state"
        ).json()
    return state


def listed_state(srv: ServerProcess, adapter: str) -> str:
    with srv.client() as c:
        cards = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
    return str(cards[adapter]["state"])


def metric(srv: ServerProcess, line_start: str) -> float:
    return metric_value(srv.url, line_start)


def client(srv: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=WAIT + 10)


def test_an_idle_adapter_is_unloaded_never_one_with_a_request_in_flight(
    srv: ServerProcess,
) -> None:
    oai = client(srv)
    assert oai.completions.create(model="keep1", prompt="hi", max_tokens=1).model == "keep1"
    # A stream on keep1 that outlasts the TTL several times (900 tokens at 20 ms).
    stream_done = threading.Event()
    models: list[str] = []

    def stream() -> None:
        for chunk in oai.completions.create(
            model="keep1", prompt="hi", max_tokens=900, stream=True
        ):
            models.append(chunk.model)
        stream_done.set()

    streamer = threading.Thread(target=stream)
    streamer.start()
    try:
        wait_until(lambda: bool(models), "the keep1 stream's first chunk", WAIT)
        assert oai.completions.create(model="idle1", prompt="hi", max_tokens=1).model == "idle1"
        assert set(engine_state(srv, "ttl")["lora_adapters"]) == {"keep1", "idle1"}
        t0 = time.monotonic()
        wait_until(
            lambda: "idle1" not in engine_state(srv, "ttl")["lora_adapters"],
            "idle1 unloaded from its engine after the idle TTL",
            WAIT,
        )
        assert time.monotonic() - t0 >= TTL * 0.5  # not before it was idle a while
        assert not stream_done.is_set(), "the keep1 stream ended too soon to show anything"
        assert "keep1" in engine_state(srv, "ttl")["lora_adapters"]  # in flight: kept
        assert listed_state(srv, "idle1") == "unloaded"
        assert listed_state(srv, "keep1") == "active"
        assert metric(srv, 'sardeenz_adapter_unloads_total{model="idle1",reason="idle"}') == 1
        assert metric(srv, 'sardeenz_adapter_unloads_total{model="keep1",reason="idle"}') == 0
    finally:
        streamer.join(WAIT + 10)
    assert stream_done.is_set()
    assert set(models) == {"keep1"}
    wait_until(  # its stream over, keep1 goes idle too
        lambda: "keep1" not in engine_state(srv, "ttl")["lora_adapters"],
        "keep1 unloaded once its stream ended and the TTL passed",
        WAIT,
    )
    assert metric(srv, 'sardeenz_adapter_unloads_total{model="keep1",reason="idle"}') == 1
    # The next request loads it again.
    assert oai.completions.create(model="idle1", prompt="hi", max_tokens=1).model == "idle1"
    assert "idle1" in engine_state(srv, "ttl")["lora_adapters"]


def test_a_sleeping_base_keeps_its_adapters(srv: ServerProcess) -> None:
    oai = client(srv)
    for name in ("nap1", "nap2"):
        assert oai.completions.create(model=name, prompt="hi", max_tokens=1).model == name
    # The clock: tick1, used after them on an awake base, is unloaded by the first idle
    # pass past its TTL, so past theirs too (a pass judges every adapter at one instant).
    assert oai.completions.create(model="tick1", prompt="hi", max_tokens=1).model == "tick1"
    ticks = metric(srv, 'sardeenz_adapter_unloads_total{model="tick1",reason="idle"}')
    inst = only_instance(srv, "nap")
    loads = engine_state(srv, "nap")["lora_loads"]
    with srv.client() as c:
        resp = c.post(f"/api/v1/models/{inst['id']}/sleep", json={"level": 1})
        assert resp.status_code == 200, resp.text
    wait_until(lambda: listed_state(srv, "nap1") == "sleeping", "nap1 listed sleeping", WAIT)
    assert listed_state(srv, "nap2") == "sleeping"
    wait_until(  # asleep longer than the TTL: sleeping is not idle time
        lambda: "tick1" not in engine_state(srv, "ttl")["lora_adapters"],
        "tick1 unloaded by an idle pass past nap1's and nap2's TTL",
        WAIT,
    )
    assert metric(srv, 'sardeenz_adapter_unloads_total{model="tick1",reason="idle"}') == ticks + 1
    assert listed_state(srv, "nap1") == "sleeping"
    assert listed_state(srv, "nap2") == "sleeping"
    with srv.client() as c:
        resp = c.post(f"/api/v1/models/{inst['id']}/wake")
        assert resp.status_code == 200, resp.text
    wait_until(
        lambda: listed_state(srv, "nap2") == "active", "nap2 active with its woken base", WAIT
    )
    hits = metric(srv, 'sardeenz_adapter_hits_total{model="nap2"}')
    assert oai.completions.create(model="nap2", prompt="hi", max_tokens=1).model == "nap2"
    assert metric(srv, 'sardeenz_adapter_hits_total{model="nap2"}') == hits + 1
    state = engine_state(srv, "nap")
    assert state["lora_loads"] == loads  # nothing loaded again after the sleep
    assert set(state["lora_adapters"]) == {"nap1", "nap2"}


def unload_the_others(srv: ServerProcess, keep: str) -> None:
    """Unload every adapter but ``keep`` that an earlier test left loaded: the test below
    compares two CLI runs word by word, and one of those idling out between the runs
    (the TTL is short) would change the table under it."""
    with srv.client() as c:
        for adapter in c.get("/api/v1/adapters").json():
            if adapter["name"] != keep and adapter["loadedOn"]:
                resp = c.post(f"/api/v1/adapters/{adapter['name']}/unload")
                assert resp.status_code == 200, resp.text


def test_an_operator_lists_loads_and_unloads_an_adapter(srv: ServerProcess) -> None:
    unload_the_others(srv, keep="ops1")
    with srv.client() as c:
        listed = {a["name"]: a for a in c.get("/api/v1/adapters").json()}
        assert listed["ops1"] == {
            "name": "ops1",
            "base": "ops",
            "adapterPath": listed["ops1"]["adapterPath"],
            "aliases": ["ops-one"],
            "state": "unloaded",
            "loadedOn": [],
        }
        assert "ops" not in listed  # a base is no adapter
        missing = c.post("/api/v1/adapters/ops/load")
        assert missing.status_code == 404
        assert missing.json()["code"] == "adapter_not_found"
        loaded = c.post("/api/v1/adapters/ops1/load", timeout=WAIT + 10)
        assert loaded.status_code == 200, loaded.text
    inst = only_instance(srv, "ops")  # the base was started for it
    assert loaded.json()["state"] == "active"
    assert loaded.json()["loadedOn"] == [
        {"podId": None, "instanceId": inst["id"], "inFlight": 0, "sleeping": False}
    ]
    assert list(engine_state(srv, "ops")["lora_adapters"]) == ["ops1"]

    # A request in flight holds it while the CLI looks, and an unload is refused. The
    # stream would last a minute: the CLI's three runs must all see it (300 tokens, 6 s,
    # ended between two of them on a loaded machine); it is closed below.
    oai = client(srv)
    stream = oai.completions.create(model="ops1", prompt="hi", max_tokens=3000, stream=True)
    assert next(iter(stream)).model == "ops1"
    url = ["--url", srv.url]
    piped = cli("adapters", *url)
    assert piped.returncode == 0, piped.stderr
    code, terminal = cli_tty("adapters", *url)
    assert code == 0
    assert inst["id"] in terminal
    assert_words_whole(terminal, piped.stdout)
    as_json = {a["name"]: a for a in json.loads(cli("adapters", "--json", *url).stdout)}
    assert as_json["ops1"]["state"] == "active"
    assert as_json["ops1"]["loadedOn"][0]["inFlight"] == 1
    with srv.client() as c:
        busy = c.post("/api/v1/adapters/ops1/unload")
    assert busy.status_code == 409
    assert busy.json()["code"] == "adapter_in_use"
    assert list(engine_state(srv, "ops")["lora_adapters"]) == ["ops1"]
    assert [chunk.model for _, chunk in zip(range(5), stream, strict=False)] == ["ops1"] * 5
    stream.close()  # the client leaves: its request ends and lets the adapter go

    def idle() -> bool:
        with srv.client() as c:
            (ops1,) = [a for a in c.get("/api/v1/adapters").json() if a["name"] == "ops1"]
        return all(where["inFlight"] == 0 for where in ops1["loadedOn"])

    wait_until(idle, "the closed stream no longer holds ops1", WAIT)

    unloaded = cli("adapters", "unload", "ops1", "--json", *url)
    assert unloaded.returncode == 0, unloaded.stderr
    assert json.loads(unloaded.stdout)["state"] == "unloaded"
    assert not engine_state(srv, "ops")["lora_adapters"]
    assert metric(srv, 'sardeenz_adapter_unloads_total{model="ops1",reason="operator"}') == 1
    again = cli("adapters", "load", "ops1", "--json", *url)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["state"] == "active"


def test_a_move_to_another_gpu_carries_the_adapters(srv: ServerProcess) -> None:
    oai = client(srv)
    assert oai.completions.create(model="mv1", prompt="hi", max_tokens=1).model == "mv1"
    source = only_instance(srv, "mv")
    with srv.client() as c:
        pod = c.get("/api/cluster/status").json()["podId"]
    # A stream on the source through the move: the adapter stays in use (no idle TTL),
    # and the drain lets it finish.
    stream = oai.completions.create(model="mv1", prompt="hi", max_tokens=300, stream=True)
    assert next(iter(stream)).model == "mv1"
    target_gpu = 1 if source["gpuIds"] == [0] else 0
    with srv.client() as c:
        resp = c.post(
            "/api/cluster/moves",
            json={
                "instanceId": source["id"],
                "targetPodId": pod,
                "gpuIds": [target_gpu],
                "drainSeconds": WAIT,
            },
        )
        assert resp.status_code == 202, resp.text
        move_id = resp.json()["id"]
    assert {chunk.model for chunk in stream} == {"mv1"}  # served through the switch
    move: dict[str, Any] = {}

    def finished() -> bool:
        nonlocal move
        with srv.client() as c:
            move = c.get(f"/api/cluster/moves/{move_id}").json()
        return move["state"] in ("done", "failed")

    wait_until(finished, f"move {move_id} finished", WAIT * 2)
    assert move["state"] == "done", move
    carried = [s["detail"] for s in move["steps"] if s["name"] == "adapters-carried"]
    assert carried == ["loaded on the target: mv1"]
    target = only_instance(srv, "mv")
    assert target["id"] == move["targetInstanceId"]
    assert target["gpuIds"] == [target_gpu]
    state = engine_state(srv, "mv")
    assert list(state["lora_adapters"]) == ["mv1"]
    assert state["lora_loads"] == 1  # by the move, before any request
    hits = metric(srv, 'sardeenz_adapter_hits_total{model="mv1"}')
    assert oai.completions.create(model="mv1", prompt="hi", max_tokens=1).model == "mv1"
    assert metric(srv, 'sardeenz_adapter_hits_total{model="mv1"}') == hits + 1
    assert engine_state(srv, "mv")["lora_loads"] == 1


def test_a_second_instance_gets_the_adapter_only_when_the_first_is_saturated(
    srv: ServerProcess,
) -> None:
    oai = client(srv)
    assert oai.completions.create(model="sat1", prompt="hi", max_tokens=1).model == "sat1"
    first = only_instance(srv, "sat")
    with srv.client() as c:
        second = load_active(
            c,
            "org/sat",
            "--lora-load-ms",
            "100",
            "--enable-lora",
            "--max-loras",
            "1",
            servedModelName="sat",
        )

    def held(inst: dict[str, Any]) -> dict[str, Any]:
        with srv.client() as c:
            state: dict[str, Any] = c.get(f"/api/direct/{inst['port']}/sim/state").json()
        return state

    for _ in range(3):  # one at a time: the holder is never saturated
        assert oai.completions.create(model="sat1", prompt="hi", max_tokens=1).model == "sat1"
    assert held(second)["lora_loads"] == 0
    stream = oai.completions.create(model="sat1", prompt="hi", max_tokens=100, stream=True)
    assert next(iter(stream)).model == "sat1"  # the first instance: 1 in flight, saturated
    assert oai.completions.create(model="sat1", prompt="hi", max_tokens=1).model == "sat1"
    assert list(held(second)["lora_adapters"]) == ["sat1"]  # loaded for that request
    assert list(held(first)["lora_adapters"]) == ["sat1"]
    assert {chunk.model for chunk in stream} == {"sat1"}
    with srv.client() as c:
        placed = {a["name"]: a for a in c.get("/api/v1/adapters").json()}["sat1"]["loadedOn"]
    assert sorted(p["instanceId"] for p in placed) == sorted([first["id"], second["id"]])
