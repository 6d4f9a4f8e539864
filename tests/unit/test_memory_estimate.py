"""The memory estimator on model directories written here, and on well-known configs."""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sardeenz.memory.estimate import (
    CUDA_GRAPHS_ALLOWANCE_BYTES,
    EstimateError,
    estimate_model_memory,
    kv_cache_info,
    tensor_bytes,
    weights_info,
)

KIB = 1024

# numpy dtypes that exist for the safetensors dtypes we write with real data
_NP = {"F32": np.float32, "F16": np.float16, "I8": np.int8, "U8": np.uint8, "I64": np.int64}
_ITEM = {"F32": 4, "F16": 2, "BF16": 2, "I8": 1, "U8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8}


def write_safetensors(
    path: Path,
    tensors: Mapping[str, tuple[str, tuple[int, ...]]],
    *,
    rng: np.random.Generator,
    with_data: bool = True,
    metadata: dict[str, str] | None = None,
) -> int:
    """Write a safetensors file (random data, the real byte layout); returns tensor bytes.

    With ``with_data=False`` the file ends right after the header: a reader that
    touched tensor data would fail on it.
    """
    header: dict[str, Any] = {}
    blobs: list[bytes] = []
    offset = 0
    for name, (dtype, shape) in tensors.items():
        count = int(np.prod(shape)) if shape else 1
        size = count * _ITEM[dtype]
        if not with_data:
            blob = b""
        elif dtype in _NP:
            blob = rng.standard_normal(count).astype(_NP[dtype]).tobytes()
        else:  # BF16 / FP8: any bytes are valid values
            blob = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert len(blob) == (size if with_data else 0)
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        blobs.append(blob)
        offset += size
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        if with_data:
            for blob in blobs:
                f.write(blob)
    return offset


LLAMA3_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}


def _tiny_model(tmp_path: Path, **config: Any) -> Path:
    d = tmp_path / "tiny"
    d.mkdir()
    cfg = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "max_position_embeddings": 512,
        "vocab_size": 1000,
        "torch_dtype": "bfloat16",
        **config,
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_weights_equal_the_sum_of_tensor_bytes_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    d = _tiny_model(tmp_path)
    tensors = {
        "model.embed_tokens.weight": ("BF16", (1000, 64)),
        "model.layers.0.self_attn.q_proj.weight": ("F16", (64, 64)),
        "model.layers.0.mlp.up_proj.weight": ("F8_E4M3", (128, 64)),
        "model.layers.0.mlp.up_proj.weight_scale": ("F32", (128,)),
        "model.layers.1.mlp.down_proj.qweight": ("I8", (64, 128)),
        "model.norm.weight": ("F32", (64,)),
        "scalar": ("F32", ()),
    }
    expected = write_safetensors(
        d / "model.safetensors", tensors, rng=rng, metadata={"format": "pt"}
    )
    info = weights_info(d)
    assert info.total_bytes == expected
    assert (
        info.total_bytes == 1000 * 64 * 2 + 64 * 64 * 2 + 128 * 64 + 128 * 4 + 64 * 128 + 64 * 4 + 4
    )
    assert info.tensor_count == len(tensors)
    est = estimate_model_memory(d)
    assert est.weights_bytes == expected


def test_sharded_checkpoint_is_read_through_its_index(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    d = _tiny_model(tmp_path)
    total = 0
    weight_map = {}
    for i in range(3):
        name = f"model-0000{i + 1}-of-00003.safetensors"
        tensors = {f"layer{i}.w{j}": ("BF16", (int(rng.integers(1, 300)), 64)) for j in range(4)}
        total += write_safetensors(d / name, tensors, rng=rng)
        weight_map.update(dict.fromkeys(tensors, name))
    # A stray file the index does not name must not be counted.
    write_safetensors(d / "consolidated.safetensors", {"x": ("F32", (1000,))}, rng=rng)
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    info = weights_info(d)
    assert info.total_bytes == total
    assert len(info.files) == 3


def test_only_headers_are_read(tmp_path: Path) -> None:
    """A 'model' whose files hold headers only (data absent) sizes the same."""
    rng = np.random.default_rng(3)
    d = _tiny_model(tmp_path)
    declared = write_safetensors(
        d / "model.safetensors", {"huge": ("BF16", (1 << 20, 4096))}, rng=rng, with_data=False
    )
    assert (d / "model.safetensors").stat().st_size < 1000
    assert weights_info(d).total_bytes == declared == (1 << 20) * 4096 * 2


def test_broken_files_are_reported_not_crashed_on(tmp_path: Path) -> None:
    d = _tiny_model(tmp_path)
    (d / "model.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(EstimateError, match="invalid safetensors header length"):
        weights_info(d)
    (d / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"[]")
    with pytest.raises(EstimateError, match="not a JSON object"):
        weights_info(d)
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(EstimateError, match="declares 8 bytes"):
        weights_info(d)
    with pytest.raises(EstimateError, match="not a local model directory"):
        estimate_model_memory(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    with pytest.raises(EstimateError, match=r"no \*\.safetensors"):
        weights_info(empty)


def test_sub_byte_and_every_listed_dtype() -> None:
    assert tensor_bytes("F4", (3, 5)) == 8  # 15 x 4 bits = 7.5 bytes, rounded up
    assert tensor_bytes("F6_E2M3", (4,)) == 3
    assert tensor_bytes("BF16", (2, 3)) == 12
    assert tensor_bytes("F8_E4M3", (10,)) == 10
    assert tensor_bytes("C64", (2,)) == 16
    with pytest.raises(EstimateError, match="unknown safetensors dtype"):
        tensor_bytes("Q4_K", (2,))


# --- KV cache per token from config.json of well-known architectures ----------------


def test_llama3_8b_needs_128_kib_of_kv_per_token_in_bf16() -> None:
    kv = kv_cache_info(LLAMA3_8B)
    assert kv.bytes_per_token == 128 * KIB  # 2 x 32 layers x 8 kv heads x 128 x 2 bytes
    assert (kv.num_layers, kv.num_kv_heads, kv.head_dim, kv.dtype_bytes) == (32, 8, 128, 2)
    assert kv_cache_info(LLAMA3_8B, kv_cache_dtype="fp8").bytes_per_token == 64 * KIB
    assert kv_cache_info(LLAMA3_8B, kv_cache_dtype="fp8_e5m2").bytes_per_token == 64 * KIB
    assert kv_cache_info(LLAMA3_8B, kv_cache_dtype="float32").bytes_per_token == 256 * KIB


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # Llama-2-7B: no GQA (kv heads default to attention heads), fp16: 512 KiB
        (
            {
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "hidden_size": 4096,
                "torch_dtype": "float16",
            },
            512 * KIB,
        ),
        # Qwen2.5-7B: 28 layers, 4 kv heads, head_dim 3584/28 = 128, bf16: 56 KiB
        (
            {
                "num_hidden_layers": 28,
                "num_attention_heads": 28,
                "num_key_value_heads": 4,
                "hidden_size": 3584,
                "torch_dtype": "bfloat16",
            },
            56 * KIB,
        ),
        # Gemma-2-9B: explicit head_dim 256 (not 3584/16 = 224), 42 layers, 8 kv heads
        (
            {
                "num_hidden_layers": 42,
                "num_attention_heads": 16,
                "num_key_value_heads": 8,
                "hidden_size": 3584,
                "head_dim": 256,
                "torch_dtype": "bfloat16",
            },
            2 * 42 * 8 * 256 * 2,
        ),
        # Mistral-Small-style nested multimodal config: the text_config counts
        (
            {
                "torch_dtype": "bfloat16",
                "text_config": {
                    "num_hidden_layers": 40,
                    "num_attention_heads": 32,
                    "num_key_value_heads": 8,
                    "hidden_size": 5120,
                    "head_dim": 128,
                },
            },
            2 * 40 * 8 * 128 * 2,
        ),
        # DeepSeek-V3: multi-head latent attention, one 512+64 latent per layer
        (
            {
                "num_hidden_layers": 61,
                "num_attention_heads": 128,
                "num_key_value_heads": 128,
                "hidden_size": 7168,
                "kv_lora_rank": 512,
                "qk_rope_head_dim": 64,
                "torch_dtype": "bfloat16",
            },
            61 * 576 * 2,
        ),
        # float32 config with "dtype" (newer transformers) instead of torch_dtype
        (
            {
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "hidden_size": 128,
                "dtype": "float32",
            },
            2 * 2 * 4 * 32 * 4,
        ),
    ],
)
def test_kv_per_token_of_known_architectures(config: dict[str, Any], expected: int) -> None:
    assert kv_cache_info(config).bytes_per_token == expected


def test_estimate_adds_one_full_request_of_kv_and_a_documented_overhead(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    d = _tiny_model(tmp_path)
    weights = write_safetensors(d / "model.safetensors", {"w": ("BF16", (64, 64))}, rng=rng)
    est = estimate_model_memory(d, max_tokens=256)
    per_token = 2 * 2 * 2 * 16 * 2  # layers 2, kv heads 2, head_dim 64/4, bf16
    assert est.kv_bytes_per_token == per_token
    assert est.kv_bytes_per_request == 256 * per_token
    assert est.overhead_bytes >= CUDA_GRAPHS_ALLOWANCE_BYTES
    assert est.needed_bytes == weights + 256 * per_token + est.overhead_bytes
    # Without max_tokens: the config's context length, as vLLM derives it.
    assert estimate_model_memory(d).max_tokens == 512
    # Tensor parallelism splits weights and KV cache, not the per-GPU overhead.
    tp2 = estimate_model_memory(d, max_tokens=256, tensor_parallel_size=2)
    assert tp2.needed_bytes == (weights + 256 * per_token) // 2 + tp2.overhead_bytes


def test_config_problems_are_estimate_errors(tmp_path: Path) -> None:
    with pytest.raises(EstimateError, match="num_hidden_layers"):
        kv_cache_info({"hidden_size": 4})
    with pytest.raises(EstimateError, match="unknown kv-cache dtype"):
        kv_cache_info(LLAMA3_8B, kv_cache_dtype="int3")
    d = tmp_path / "noconfig"
    d.mkdir()
    with pytest.raises(EstimateError, match=r"no config\.json"):
        estimate_model_memory(d)
