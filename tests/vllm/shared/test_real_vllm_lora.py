"""LoRA adapters on demand with real vLLM (the CPU build): no simulated engine.

The folder's catalog base ``tiny-a`` (the tier's tiny Llama with ``loraSlots: 2``,
tests/vllm/shared/conftest.py) and three adapters made here for it
(tests/vllm/tiny_lora.py: random, non-zero B matrices, so each adapter's greedy output
differs from the base's), put in the catalog by this module. The base is the engine
test_real_vllm.py started on demand and ran its tests on (run alone, this module's first
request starts it); the unload test stops it and a request for an adapter starts it
again. Each test requests what it relies on itself (a greedy request costs a fraction of
a second), so it holds whichever test ran before it.

What is checked against vLLM itself, not against Sardeenz's books: the engine's own
``GET /v1/models`` (an adapter is listed with ``parent``), its greedy outputs, and its
own reason when it cannot load an adapter. The adapter entries stay in the catalog for
test_real_vllm_restart.py, which re-adopts the base with its adapters loaded.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from openai import OpenAI

from testkit.servers import ServerProcess, openai_client
from tests.vllm.conftest import READY_TIMEOUT_SECONDS, cached_build, timed
from tests.vllm.shared.conftest import BASE, LORA_SLOTS, MAX_LORA_RANK, ensure_base

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

LORA_SCRIPT = Path(__file__).parent.parent / "tiny_lora.py"
ONE, TWO, THREE = "lora-one", "lora-two", "lora-three"
BROKEN = "lora-broken"
"""A valid adapter_config.json and no weights: passes the catalog's check, fails vLLM's."""
PROMPT = "The quick brown fox"
TOKENS = 8


@pytest.fixture(scope="module")
def adapters(vllm_python: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three PEFT adapters for the tiny model, written by torch/safetensors once (cached
    like the model: the script derives each adapter's weights from its name), copied into
    the module's own folder with the broken one beside them."""
    built = cached_build(
        "tiny-lora",
        LORA_SCRIPT,
        vllm_python,
        lambda out: [str(tiny_model), str(out), ONE, TWO, THREE],
        f"{THREE}/adapter_model.safetensors",
    )
    out = tmp_path_factory.mktemp("adapters")
    for name in (ONE, TWO, THREE):
        shutil.copytree(built / name, out / name)
    (out / BROKEN).mkdir()
    shutil.copy(out / ONE / "adapter_config.json", out / BROKEN / "adapter_config.json")
    return out


@pytest.fixture(scope="module")
def lora_server(
    shared_vllm_server: ServerProcess, tiny_model: Path, adapters: Path
) -> ServerProcess:
    """The folder's server with the adapters of ``tiny-a`` in its catalog."""
    with shared_vllm_server.client() as api:
        ensure_base(api, tiny_model)
        for name in (ONE, TWO, THREE, BROKEN):
            entry = {"adapterOf": BASE, "adapterPath": str(adapters / name)}
            resp = api.put(f"/api/v1/catalog/{name}", json=entry)
            assert resp.status_code == 200, resp.text
    return shared_vllm_server


def client(srv: ServerProcess) -> OpenAI:
    # A request may wait for a whole engine start (the base started on first request).
    return openai_client(f"{srv.url}/v1", READY_TIMEOUT_SECONDS + 30)


def greedy(srv: ServerProcess, model: str) -> list[int]:
    """The token ids of a greedy completion of PROMPT by ``model``, all TOKENS of them."""
    done = client(srv).completions.create(
        model=model,
        prompt=PROMPT,
        max_tokens=TOKENS,
        temperature=0,
        extra_body={"ignore_eos": True, "min_tokens": TOKENS, "return_token_ids": True},
    )
    assert done.model == model  # vLLM answers an adapter's request with its name
    ids = (done.choices[0].model_extra or {}).get("token_ids")
    assert isinstance(ids, list), done
    assert len(ids) == TOKENS, done
    return ids


def base_instances(srv: ServerProcess) -> list[dict[str, Any]]:
    with srv.client() as api:
        return [i for i in api.get("/api/v1/models").json() if i["servedModelName"] == BASE]


def engine_adapters(srv: ServerProcess) -> dict[str, str]:
    """Adapter -> parent, as the (only) vLLM instance of the base lists them itself."""
    (inst,) = base_instances(srv)
    cards = httpx.get(f"http://127.0.0.1:{inst['port']}/v1/models", timeout=30).json()["data"]
    assert {c["id"] for c in cards if c.get("parent") is None} == {BASE}
    return {c["id"]: c["parent"] for c in cards if c.get("parent") is not None}


def listed(srv: ServerProcess) -> dict[str, dict[str, Any]]:
    """Sardeenz's own ``GET /v1/models`` cards, by id."""
    with srv.client() as api:
        return {m["id"]: m for m in api.get("/v1/models").json()["data"]}


def metric(srv: ServerProcess, series: str) -> float:
    with srv.client() as api:
        text = api.get("/metrics").text
    values = [float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(series)]
    return values[0] if values else 0.0


def test_an_adapter_answers_differently_from_its_base(lora_server: ServerProcess) -> None:
    """The base runs with vLLM's LoRA flags (started on first request, by this test when
    the module runs alone); the adapter is loaded on its first request and changes the
    greedy output; the base's own output is untouched."""
    with timed("LoRA base: first request (a start when the module runs alone)"):
        base = greedy(lora_server, BASE)
    (inst,) = base_instances(lora_server)
    proc = psutil.Process(inst["processId"])
    argv = proc.cmdline()
    assert argv[argv.index("--max-loras") + 1] == str(LORA_SLOTS) == "2"
    assert argv[argv.index("--max-lora-rank") + 1] == str(MAX_LORA_RANK) == "8"
    assert "--enable-lora" in argv
    assert proc.environ()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1"
    assert engine_adapters(lora_server) == {}

    with timed("first request to an adapter (vLLM load included)"):
        one = greedy(lora_server, ONE)
    assert one != base
    assert greedy(lora_server, ONE) == one  # a hit, and greedy: the same tokens
    assert greedy(lora_server, BASE) == base  # the adapter applies to its requests only
    assert engine_adapters(lora_server) == {ONE: BASE}
    assert metric(lora_server, f'sardeenz_adapter_loads_total{{model="{ONE}"}}') == 1
    assert metric(lora_server, f'sardeenz_adapter_misses_total{{model="{ONE}"}}') == 1
    assert metric(lora_server, f'sardeenz_adapter_hits_total{{model="{ONE}"}}') >= 1


def test_two_adapters_on_one_instance(lora_server: ServerProcess) -> None:
    base, one, two = (greedy(lora_server, m) for m in (BASE, ONE, TWO))
    assert len({tuple(base), tuple(one), tuple(two)}) == 3
    assert len(base_instances(lora_server)) == 1
    assert engine_adapters(lora_server) == {ONE: BASE, TWO: BASE}
    # Interleaved on the one engine, each name still gets its own adapter.
    assert [greedy(lora_server, m) for m in (TWO, ONE, BASE, TWO)] == [two, one, base, two]
    cards = listed(lora_server)
    for name in (ONE, TWO):
        assert cards[name]["parent"] == BASE
        assert cards[name]["state"] == "active"
    assert cards[THREE]["state"] == "unloaded"


def test_slots_full_unload_the_least_recently_used_adapter(lora_server: ServerProcess) -> None:
    one = greedy(lora_server, ONE)
    greedy(lora_server, TWO)  # now ONE is the least recently used of the two slots
    lru = f'sardeenz_adapter_unloads_total{{model="{ONE}",reason="lru"}}'
    evicted_before = metric(lora_server, lru)

    three = greedy(lora_server, THREE)
    assert three != one
    assert engine_adapters(lora_server) == {TWO: BASE, THREE: BASE}
    assert metric(lora_server, lru) == evicted_before + 1

    # ONE comes back (TWO is now the least recently used) with the very same weights.
    assert greedy(lora_server, ONE) == one
    assert engine_adapters(lora_server) == {THREE: BASE, ONE: BASE}
    assert listed(lora_server)[TWO]["state"] == "unloaded"


def test_unloading_the_base_drops_its_adapters_and_a_request_reloads_them(
    lora_server: ServerProcess,
) -> None:
    three, one = greedy(lora_server, THREE), greedy(lora_server, ONE)
    held = engine_adapters(lora_server)
    assert set(held) == {THREE, ONE}
    (inst,) = base_instances(lora_server)
    gone_before = {
        a: metric(lora_server, f'sardeenz_adapter_unloads_total{{model="{a}",reason="base_gone"}}')
        for a in held
    }
    loads_before = metric(lora_server, f'sardeenz_adapter_loads_total{{model="{THREE}"}}')

    with lora_server.client() as api:
        resp = api.post(f"/api/v1/models/{inst['id']}/unload", timeout=60)
        assert resp.status_code == 200, resp.text
    deadline = time.monotonic() + 60
    while base_instances(lora_server):
        assert time.monotonic() < deadline, "the LoRA base instance was not gone 60 s after unload"
        time.sleep(0.1)
    for adapter, before in gone_before.items():
        series = f'sardeenz_adapter_unloads_total{{model="{adapter}",reason="base_gone"}}'
        assert metric(lora_server, series) == before + 1
    cards = listed(lora_server)
    assert {cards[a]["state"] for a in (ONE, TWO, THREE)} == {"unloaded"}

    # The next request for an adapter starts the base again and loads it into the new
    # instance: the same weights, the same greedy tokens.
    with timed("LoRA base: adapter request to a stopped base (start + load)"):
        assert greedy(lora_server, THREE) == three
    (again,) = base_instances(lora_server)
    assert again["id"] != inst["id"]
    assert engine_adapters(lora_server) == {THREE: BASE}
    assert metric(lora_server, f'sardeenz_adapter_loads_total{{model="{THREE}"}}') == (
        loads_before + 1
    )
    assert greedy(lora_server, ONE) == one
    assert engine_adapters(lora_server) == {THREE: BASE, ONE: BASE}


def test_an_adapter_vllm_cannot_load_answers_with_vllms_reason(
    lora_server: ServerProcess,
) -> None:
    three = greedy(lora_server, THREE)
    with lora_server.client() as api:
        entry = {e["name"]: e for e in api.get("/api/v1/catalog").json()}[BROKEN]
        assert entry["state"] == "unloaded"  # it passed the catalog's check
        body = {"model": BROKEN, "prompt": PROMPT, "max_tokens": 1}
        first = api.post("/v1/completions", json=body, timeout=60)
        again = api.post("/v1/completions", json=body, timeout=60)
    assert first.status_code == 500, first.text
    error = first.json()["error"]
    assert error["code"] == "adapter_load_failed"
    # vLLM 0.32's own words (it writes <path> for file paths in its messages).
    assert error["message"].startswith(
        f"LoRA adapter '{BROKEN}' could not be loaded: Call to add_lora method failed: "
    )
    assert "doesn't contain tensors" in error["message"]
    # Within the failure hold the same answer comes at once, without another load.
    assert again.status_code == 500
    assert again.json()["error"] == error
    assert metric(lora_server, f'sardeenz_adapter_load_failures_total{{model="{BROKEN}"}}') == 1
    assert BROKEN not in engine_adapters(lora_server)
    # The engine and the other adapters are unharmed.
    assert greedy(lora_server, THREE) == three
