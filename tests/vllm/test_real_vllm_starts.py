"""Real vLLM starts that need no running instance: on first request, and failures.

Apart from test_real_vllm.py (whose module shares one loaded instance and ends with a
controller restart) so that the two run side by side on two xdist workers: each vLLM start
costs 30-90 s on a 2-core machine, and one module holding all of them was the longest
single file of the suite. This module has a `sardeenz serve` of its own (``vllm_server``
is module-scoped) and loads nothing before its tests.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest
from openai import OpenAI

from testkit.servers import ServerProcess, engine_processes, wait_for_status
from tests.vllm.conftest import ENGINE_ARGS, load_vllm, timed

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(480)]


def describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.name()} {' '.join(proc.cmdline()[:6])}"
    except psutil.Error:
        return "?"


# --- load on first request ------------------------------------------------------------------


def test_first_request_to_a_catalog_model_starts_the_real_engine(
    vllm_server: ServerProcess, tiny_model: Path
) -> None:
    with vllm_server.client() as api:
        entry = {"modelPath": str(tiny_model), "engine": "vllm", "extraArgs": ENGINE_ARGS}
        resp = api.put("/api/v1/catalog/tiny-demand", json=entry)
        assert resp.status_code == 200, resp.text
        assert resp.json()["state"] == "unloaded"
        client = OpenAI(
            base_url=f"{vllm_server.url}/v1", api_key="unused", timeout=300, max_retries=0
        )
        listed = {m.id: m for m in client.models.list().data}
        assert (listed["tiny-demand"].model_extra or {})["state"] == "unloaded"
        with timed("first request to an unloaded catalog model (real vLLM start)"):
            chat = client.chat.completions.create(
                model="tiny-demand",
                messages=[{"role": "user", "content": "Hello"}],
                max_tokens=4,
                extra_body={"min_tokens": 4, "ignore_eos": True},
            )
        assert chat.model == "tiny-demand"
        assert chat.usage is not None
        assert chat.usage.completion_tokens == 4
        listed_insts = api.get("/api/v1/models").json()
        insts = [i for i in listed_insts if i["servedModelName"] == "tiny-demand"]
        assert [i["status"] for i in insts] == ["active"]
        assert api.get("/api/v1/catalog/tiny-demand").json()["state"] == "active"
        # Leave the memory to the next tests.
        assert api.post(f"/api/v1/models/{insts[0]['id']}/unload").status_code == 200
        assert api.delete("/api/v1/catalog/tiny-demand").status_code == 200


# --- failures parsed from the real engine's output -------------------------------------------


def test_failures_end_failed_with_the_root_cause(
    vllm_server: ServerProcess, tiny_model: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-model"
    empty = tmp_path / "empty"
    empty.mkdir()
    truncated = tmp_path / "truncated"
    shutil.copytree(tiny_model, truncated)
    weights = truncated / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)  # a download cut short

    cases: dict[str, tuple[Path, list[str], list[str]]] = {
        # name: (model, extra args, what the message must say)
        "missing": (missing, [], [str(missing)]),
        "empty": (empty, [], ["Invalid repository ID or local directory", str(empty)]),
        "truncated": (truncated, [], ["SafetensorError", "incomplete metadata"]),
        "badflag": (tiny_model, ["--no-such-flag"], ["unrecognized arguments: --no-such-flag"]),
    }
    with vllm_server.client() as api, timed("four failing loads, concurrently"):
        insts = {
            name: load_vllm(api, model, f"fail-{name}", extra=extra)
            for name, (model, extra, _) in cases.items()
        }

        def settle(name: str) -> dict[str, Any]:
            return wait_for_status(api, insts[name]["id"], {"failed", "active"}, timeout=180)

        with ThreadPoolExecutor(len(insts)) as pool:
            results = dict(zip(insts, pool.map(settle, insts), strict=True))

        for name, (_, _, needles) in cases.items():
            got = results[name]
            assert got["status"] == "failed", (name, got)
            message = got["errorMessage"]
            for needle in needles:
                assert needle in message, (name, message)
            assert "Engine core initialization failed" not in message, (name, message)
            assert "pid=" not in message, (name, message)

        failed_ids = {i["id"] for i in insts.values()}
        leftovers = [
            describe(p)
            for p in engine_processes(vllm_server.data_dir)
            if p.environ().get("SARDEENZ_INSTANCE_ID") in failed_ids
        ]
        assert leftovers == []
        for inst in insts.values():
            assert api.post(f"/api/v1/models/{inst['id']}/unload").status_code == 200
