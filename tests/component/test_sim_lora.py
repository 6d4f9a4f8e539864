"""The simulated engine's LoRA adapters, as a real process: vLLM's endpoints and answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from testkit.adapters import make_adapter
from testkit.sim import Sim

RUNTIME = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}


@pytest.fixture(scope="module")
def lora_sim() -> Iterator[Sim]:
    sim = Sim(
        "base-model",
        extra=["--enable-lora", "--max-loras", "2", "--max-lora-rank", "16"],
        env=RUNTIME,
    )
    try:
        yield sim.wait_ready()
    finally:
        sim.kill()


def _load(sim: Sim, name: str, path: Path | str) -> httpx.Response:
    return httpx.post(
        f"{sim.url}/v1/load_lora_adapter",
        json={"lora_name": name, "lora_path": str(path)},
        timeout=10,
    )


def _unload(sim: Sim, name: str) -> httpx.Response:
    return httpx.post(f"{sim.url}/v1/unload_lora_adapter", json={"lora_name": name}, timeout=10)


def _state(sim: Sim) -> dict[str, object]:
    data: dict[str, object] = httpx.get(f"{sim.url}/sim/state", timeout=5).json()
    return data


def test_load_list_answer_unload(lora_sim: Sim, tmp_path: Path) -> None:
    folder = make_adapter(tmp_path / "sql", rank=8)
    resp = _load(lora_sim, "sql-lora", folder)
    assert resp.status_code == 200, resp.text
    assert resp.text == "Success: LoRA adapter 'sql-lora' added successfully."

    models = httpx.get(f"{lora_sim.url}/v1/models", timeout=5).json()["data"]
    by_id = {m["id"]: m for m in models}
    assert by_id["sql-lora"]["parent"] == "base-model"
    assert by_id["sql-lora"]["root"] == str(folder)
    assert by_id["base-model"]["parent"] is None

    client = openai.OpenAI(base_url=f"{lora_sim.url}/v1", api_key="x")
    adapted = client.completions.create(model="sql-lora", prompt="hi", max_tokens=3)
    base = client.completions.create(model="base-model", prompt="hi", max_tokens=3)
    assert adapted.model == "sql-lora"  # how a client tells the adapter's answer
    assert base.model == "base-model"
    chat = client.chat.completions.create(
        model="sql-lora", messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True
    )
    assert {chunk.model for chunk in chat} == {"sql-lora"}

    again = _load(lora_sim, "sql-lora", folder)
    assert again.status_code == 400
    assert again.json()["error"]["message"] == (
        "The lora adapter 'sql-lora' has already been loaded. If you want to load the "
        "adapter in place, set 'load_inplace' to True."
    )

    resp = _unload(lora_sim, "sql-lora")
    assert resp.status_code == 200
    assert resp.text == "Success: LoRA adapter 'sql-lora' removed successfully."
    with pytest.raises(openai.NotFoundError, match="The model `sql-lora` does not exist"):
        client.completions.create(model="sql-lora", prompt="hi", max_tokens=1)
    missing = _unload(lora_sim, "sql-lora")
    assert missing.status_code == 404
    assert missing.json()["error"] == {
        "message": "The lora adapter 'sql-lora' cannot be found.",
        "type": "NotFoundError",
        "param": None,
        "code": 404,
    }


def test_vllm_errors(lora_sim: Sim, tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere"
    resp = _load(lora_sim, "ghost", nowhere)
    assert resp.status_code == 404
    assert resp.json()["error"]["message"] == (
        f"Loading lora ghost failed: No adapter found for {nowhere}"
    )

    big = make_adapter(tmp_path / "big", rank=32)
    resp = _load(lora_sim, "big", big)
    assert resp.status_code == 500
    assert resp.json()["error"]["message"] == (
        "Call to add_lora method failed: LoRA rank 32 is greater than max_lora_rank 16."
    )
    assert resp.json()["error"]["type"] == "InternalServerError"

    empty = make_adapter(tmp_path / "empty", weights=False)
    resp = _load(lora_sim, "empty", empty)
    assert resp.status_code == 500
    assert "doesn't contain tensors" in resp.json()["error"]["message"]

    resp = _load(lora_sim, "base-model", make_adapter(tmp_path / "clash"))
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == (
        "The lora adapter 'base-model' conflicts with a served base model."
    )
    resp = httpx.post(
        f"{lora_sim.url}/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": ""}
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "Both 'lora_name' and 'lora_path' must be provided."
    assert "big" not in _state(lora_sim)["lora_adapters"]  # type: ignore[operator]


def test_max_loras_is_a_weight_cache(lora_sim: Sim, tmp_path: Path) -> None:
    """Three adapters on --max-loras 2: vLLM accepts them all, and the least recently
    used one's weights are reloaded when a request needs it again."""
    for name in ("c1", "c2", "c3"):
        assert _load(lora_sim, name, make_adapter(tmp_path / name)).status_code == 200
    state = _state(lora_sim)
    assert state["lora_resident"] == ["c2", "c3"]
    before = state["lora_reloads"]
    client = openai.OpenAI(base_url=f"{lora_sim.url}/v1", api_key="x")
    client.completions.create(model="c1", prompt="hi", max_tokens=1)
    state = _state(lora_sim)
    assert state["lora_reloads"] == before + 1  # type: ignore[operator]
    assert state["lora_resident"] == ["c3", "c1"]
    for name in ("c1", "c2", "c3"):
        assert _unload(lora_sim, name).status_code == 200


def test_without_enable_lora_or_runtime_updating(tmp_path: Path) -> None:
    folder = make_adapter(tmp_path / "a")
    plain = Sim("plain", env=RUNTIME)
    closed = Sim("closed", extra=["--enable-lora"], env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "0"})
    try:
        plain.wait_ready()
        closed.wait_ready()
        resp = _load(plain, "a", folder)
        assert resp.status_code == 500
        assert resp.json()["error"]["message"] == (
            "Call to add_lora method failed: LoRA is not enabled. Use --enable-lora to enable LoRA."
        )
        assert _load(closed, "a", folder).status_code == 404  # no such route, as vLLM
    finally:
        plain.kill()
        closed.kill()
