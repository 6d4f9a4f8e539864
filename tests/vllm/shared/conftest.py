"""One `sardeenz serve` and one real vLLM base instance for every module of this folder.

A real vLLM start of the CPU build is three processes that each import torch and vLLM
(the API server, ``VLLM::EngineCore``, ``VLLM::Worker``: about 28 s of CPU), so the
instances are what a module shares, not only the server. ``tiny-a`` is a catalog LoRA
base (``loraSlots: 2``): test_real_vllm.py starts it on demand with its first request and
checks that start and what runs on it; test_real_vllm_lora.py adds adapters of it and
uses that same engine (its flags are the LoRA ones either way), so the adapters cost no
start of their own; test_real_vllm_restart.py, last, kills the server and re-adopts the
engine. tests/scheduling.py hands this folder to one xdist worker as one unit, so the
modules run one after another in file order (as they do when pytest runs the folder by
hand), the package-scoped server starts once and stops after the last module.

Each module still runs alone: what it needs and did not find (the catalog entry, a
running ``tiny-a``) it makes itself, by the same API calls and requests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from openai import OpenAI

from sardeenz.engines.base import engine_tmp_dir
from testkit.servers import ServerProcess, not_zombie
from testkit.servers import openai_client as proxy_client
from tests.vllm.conftest import ENGINE_ARGS, tier_server

BASE = "tiny-a"
"""The shared catalog model: started on demand, a LoRA base for the adapters."""
LORA_SLOTS = 2
MAX_LORA_RANK = 8


def base_entry(tiny_model: Path) -> dict[str, Any]:
    """``tiny-a``'s catalog entry: the tier's tiny Llama with two LoRA slots of rank 8."""
    return {
        "modelPath": str(tiny_model),
        "engine": "vllm",
        "extraArgs": ENGINE_ARGS,
        "loraSlots": LORA_SLOTS,
        "maxLoraRank": MAX_LORA_RANK,
    }


def ensure_base(api: httpx.Client, tiny_model: Path) -> None:
    """Put ``tiny-a`` in the catalog unless an earlier module of the folder did."""
    if api.get(f"/api/v1/catalog/{BASE}").status_code == 404:
        resp = api.put(f"/api/v1/catalog/{BASE}", json=base_entry(tiny_model))
        assert resp.status_code == 200, resp.text


def tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.name()} {' '.join(proc.cmdline()[:6])}"
    except psutil.Error:
        return "?"


def alive(pids: list[int]) -> list[int]:
    """The ones of ``pids`` still running (a zombie has ended)."""
    return [pid for pid in pids if not_zombie(pid)]


def openai_client(server: ServerProcess, timeout: float = 60) -> OpenAI:
    return proxy_client(f"{server.url}/v1", timeout)


def instance_tmp(server: ServerProcess, instance_id: str) -> Path:
    """The engine's TMPDIR by the product's own rule: ``instances/<id>/tmp``, or a short
    path in the system temp dir once that is too long for vLLM's socket paths (pytest's
    temp paths grow with its run counter: ``pytest-1032/popen-gw3/...`` is one too long)."""
    return engine_tmp_dir(server.data_dir / "instances" / instance_id, instance_id)


@pytest.fixture(scope="package")
def shared_vllm_server(
    vllm_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The folder's server (no catalog file: the modules put their entries through the API)."""
    with tier_server(vllm_python, tmp_path_factory.mktemp("s")) as srv:
        yield srv
