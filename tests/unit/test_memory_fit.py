"""The fit check: profile over estimate, per-GPU answers against free memory after the reserve."""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from sardeenz.config import SimGpuSpec
from sardeenz.domain import LoadRequest, utcnow
from sardeenz.errors import InvalidRequest
from sardeenz.gpu.inventory import SimulatedInventory
from sardeenz.gpu.selection import GB, RESERVED_BYTES
from sardeenz.memory.estimate import GIB, MIB
from sardeenz.memory.fit import check_fit, fit_request_for_load, load_refusal
from sardeenz.memory.models import FitRequest, MemoryProfile
from sardeenz.store.db import Database
from sardeenz.store.profiles import ProfileRepository


@pytest.fixture
async def repo(tmp_path: Path) -> AsyncIterator[ProfileRepository]:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'fit.db'}")
    await db.migrate()
    yield ProfileRepository(db)
    await db.close()


def _inventory(*sizes_gib: int) -> SimulatedInventory:
    return SimulatedInventory(
        [
            SimGpuSpec(index=i, name="NVIDIA L4", memory_bytes=s * GIB)
            for i, s in enumerate(sizes_gib)
        ]
    )


def _profile(model: str, max_tokens: int = 4096, **kw: object) -> MemoryProfile:
    now = utcnow()
    data: dict[str, object] = {
        "id": f"p-{model}-{max_tokens}-{kw.get('gpu_name', '')}",
        "profile_name": model,
        "model_path": model,
        "max_tokens": max_tokens,
        "total_gpu_memory_gib": 10.0,
        "weights_memory_gib": 6.0,
        "cuda_graphs_gib": 0.5,
        "overhead_memory_gib": 0.5,
        "kv_cache_available_gib": 3.0,
        "kv_cache_per_request_mib": 512.0,
        "gpu_name": "NVIDIA L4",
        "created_at": now,
        "updated_at": now,
        **kw,
    }
    return MemoryProfile.model_validate(data)


def _model_dir(tmp_path: Path, weight_elems: int) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "vocab_size": 128256,
                "max_position_embeddings": 8192,
                "torch_dtype": "bfloat16",
            }
        )
    )
    header = json.dumps(
        {"w": {"dtype": "BF16", "shape": [weight_elems], "data_offsets": [0, 2 * weight_elems]}}
    ).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return d


async def test_profile_is_preferred_and_answers_per_gpu(repo: ProfileRepository) -> None:
    inv = _inventory(24, 16)
    inv.allocate("other", [1], 8 * GIB)  # GPU1: 16 - 8 = 8 GiB free, minus the 2 GB reserve
    await repo.create(_profile("m"))
    verdict = await check_fit(FitRequest(model_path="m"), inventory=inv, profiles=repo)
    assert verdict.source == "profile"
    assert verdict.profile_id == "p-m-4096-"
    needed = 6 * GIB + 512 * MIB + GIB  # weights + one request of KV + graphs/overhead
    assert verdict.needed_bytes_per_gpu == needed
    assert verdict.fits is True
    assert verdict.chosen_gpu_ids == [0]
    g0, g1 = verdict.gpus
    assert g0.available_bytes == 24 * GIB - RESERVED_BYTES
    assert g1.available_bytes == 8 * GIB - RESERVED_BYTES
    assert (g0.fits, g1.fits) == (True, False)
    assert verdict.reserved_bytes_per_gpu == 2 * GB


async def test_kv_is_rescaled_to_another_context_length(repo: ProfileRepository) -> None:
    await repo.create(_profile("m", max_tokens=4096))
    v = await check_fit(
        FitRequest(model_path="m", max_tokens=8192), inventory=_inventory(24), profiles=repo
    )
    assert v.source == "profile"
    assert v.breakdown is not None
    assert v.breakdown.kv_cache_bytes == 1024 * MIB
    assert any("rescaled" in n for n in v.notes)


async def test_exact_length_and_gpu_model_win_then_newest(repo: ProfileRepository) -> None:
    old = _profile("m", max_tokens=2048, id="a", created_at=utcnow() - timedelta(days=1))
    other_gpu = _profile("m", max_tokens=2048, id="b", gpu_name="Tesla T4")
    newest = _profile("m", max_tokens=2048, id="c")
    wrong_len = _profile("m", max_tokens=9999, id="d")
    for p in (old, other_gpu, newest, wrong_len):
        await repo.create(p)
    v = await check_fit(
        FitRequest(model_path="m", max_tokens=2048), inventory=_inventory(24), profiles=repo
    )
    assert v.profile_id == "c"


async def test_estimate_from_the_model_directory(tmp_path: Path, repo: ProfileRepository) -> None:
    d = _model_dir(tmp_path, weight_elems=4 * 10**9)  # 8 GB of bf16 weights
    v = await check_fit(
        FitRequest(model_path=str(d), max_tokens=8192), inventory=_inventory(24), profiles=repo
    )
    assert v.source == "estimate"
    assert v.breakdown is not None
    assert v.breakdown.weights_bytes == 8 * 10**9
    assert v.breakdown.kv_cache_bytes == 8192 * 128 * 1024  # Llama-3-8B shape: 1 GiB
    assert v.fits is True
    big = await check_fit(
        FitRequest(model_path=str(d), max_tokens=8192), inventory=_inventory(8), profiles=repo
    )
    assert big.fits is False
    assert "does not fit" in big.reason
    refusal = load_refusal(big)
    assert refusal is not None
    assert refusal.code == "model_does_not_fit"
    assert refusal.status == 409


async def test_unknown_model_is_not_refused(repo: ProfileRepository) -> None:
    v = await check_fit(
        FitRequest(model_path="org/not-local"), inventory=_inventory(24), profiles=repo
    )
    assert v.source == "unknown"
    assert v.fits is None
    assert load_refusal(v) is None
    assert "not a local model directory" in v.reason


async def test_cpu_node_always_fits(repo: ProfileRepository) -> None:
    await repo.create(_profile("m"))
    v = await check_fit(FitRequest(model_path="m"), inventory=_inventory(), profiles=repo)
    assert v.fits is True
    assert v.gpus == []


async def test_memory_limit_and_pinned_gpus(repo: ProfileRepository) -> None:
    await repo.create(_profile("m"))
    inv = _inventory(24, 24)
    inv.allocate("other", [0], 20 * GIB)
    low = await check_fit(
        FitRequest(model_path="m", gpu_memory_limit=2), inventory=inv, profiles=repo
    )
    assert low.fits is False
    assert "below" in low.reason
    pinned = await check_fit(FitRequest(model_path="m", gpu_ids=[0]), inventory=inv, profiles=repo)
    assert pinned.fits is False
    free = await check_fit(
        FitRequest(model_path="m", gpu_ids=[1], gpu_memory_limit=12), inventory=inv, profiles=repo
    )
    assert free.fits is True
    assert free.needed_bytes_per_gpu == 12 * GB
    with pytest.raises(InvalidRequest) as exc:
        await check_fit(FitRequest(model_path="m", gpu_ids=[7]), inventory=inv, profiles=repo)
    assert exc.value.code == "unknown_gpu"
    tp2 = await check_fit(
        FitRequest(model_path="m", tensor_parallel_size=2), inventory=inv, profiles=repo
    )
    assert tp2.fits is False  # only one GPU has room


def test_fit_request_for_a_load_reads_the_engine_flags() -> None:
    req = LoadRequest(
        model_path="/m",
        gpu_ids=[1],
        gpu_memory_limit=8,
        extra_args=["--max-model-len", "8k", "--kv-cache-dtype=fp8", "--dtype", "float16"],
    )
    fr = fit_request_for_load(req)
    assert fr.max_tokens == 8000
    assert fr.kv_cache_dtype == "fp8"
    assert fr.dtype == "float16"
    assert fr.gpu_ids == [1]
    assert fr.gpu_memory_limit == 8
    assert (
        fit_request_for_load(
            LoadRequest(model_path="/m", extra_args=["--max-model-len=4K"])
        ).max_tokens
        == 4096
    )
