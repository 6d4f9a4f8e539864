"""How much GPU memory a model needs, from its directory alone (no GPU, no torch).

Used by the fit check when no measured profile exists. Three parts:

* **Weights**, exact: the sum of every tensor's bytes as declared in the
  safetensors headers. Only each file's 8-byte little-endian header length
  and its JSON header are read, never the tensor data, so a 140 GB model is
  sized in milliseconds. Sharded checkpoints are read through
  ``model.safetensors.index.json`` (its ``weight_map`` names the shards);
  without an index every ``*.safetensors`` file in the directory counts.
* **KV cache per token**, from ``config.json``: ``2 (K and V) x
  num_hidden_layers x num_key_value_heads x head_dim x dtype bytes``, where
  ``head_dim`` is ``hidden_size / num_attention_heads`` when the config does
  not give it, ``num_key_value_heads`` defaults to ``num_attention_heads``
  (no GQA), and the dtype is the KV-cache dtype: ``auto`` means the model's
  dtype (the config's ``torch_dtype``/``dtype``), ``fp8*`` one byte.
  Multi-head latent attention (DeepSeek V2/V3: ``kv_lora_rank``) caches one
  latent vector per layer instead: ``layers x (kv_lora_rank +
  qk_rope_head_dim) x dtype bytes``. Sliding-window layers are counted as
  full attention, so the figure is an upper bound for such models.
* **Overhead**, an allowance rather than a measurement (a profile replaces
  it): ``CUDA_GRAPHS_ALLOWANCE_BYTES`` for CUDA-graph capture (vLLM logs
  0.1 to 0.9 GiB for dense 1B to 70B models with its default capture sizes)
  plus the activation peak of vLLM's profiling forward pass, approximated as
  ``PROFILE_BATCH_TOKENS x (4 x hidden_size + 2 x intermediate_size) x dtype
  bytes`` (attention projections, residual and the SwiGLU gate/up outputs of
  one layer over a full batch) plus the sampler's float32 logits
  ``SAMPLER_SEQS x vocab_size x 4``. The CUDA context itself is not counted:
  the 2 GB per-GPU reserve of the placement rule covers it.

Everything is a pure function of the files; callers run it in a worker
thread (:func:`estimate_model_memory` does blocking file I/O).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

GIB: Final = 2**30
MIB: Final = 2**20

MAX_HEADER_BYTES: Final = 100 * 10**6
"""The safetensors format's own limit on the JSON header (the Rust reader refuses more)."""

CUDA_GRAPHS_ALLOWANCE_BYTES: Final = 512 * MIB
PROFILE_BATCH_TOKENS: Final = 8192
"""vLLM V1's default ``max_num_batched_tokens`` on data-centre GPUs: the profiling batch."""
SAMPLER_SEQS: Final = 256
"""vLLM's default ``max_num_seqs``: the sampler materialises float32 logits for each."""

DTYPE_BITS: Final[Mapping[str, int]] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "F64": 64,
    "I64": 64,
    "U64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}
"""Bits per element of every safetensors dtype (sub-byte types pack; bytes round up)."""

_TORCH_DTYPE_BYTES: Final[Mapping[str, int]] = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float64": 8,
    "double": 8,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
    "uint8": 1,
}


class EstimateError(ValueError):
    """The directory cannot be sized; the message says what is missing or broken."""


@dataclass(frozen=True, slots=True)
class WeightsInfo:
    total_bytes: int
    tensor_count: int
    files: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class KvCacheInfo:
    bytes_per_token: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    mla: bool = False


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """What a model needs on one GPU (tensor parallelism divides weights and KV).

    ``needed_bytes``: weights + overhead + the KV cache of one request of
    ``max_tokens``, the least vLLM accepts to start (it refuses when the KV
    cache cannot hold one full-length request).
    """

    weights_bytes: int
    kv_bytes_per_token: int
    max_tokens: int
    overhead_bytes: int
    tensor_parallel_size: int
    notes: tuple[str, ...] = ()

    @property
    def kv_bytes_per_request(self) -> int:
        return self.kv_bytes_per_token * self.max_tokens

    @property
    def needed_bytes(self) -> int:
        tp = self.tensor_parallel_size
        return math.ceil((self.weights_bytes + self.kv_bytes_per_request) / tp) + (
            self.overhead_bytes
        )


# --- safetensors -----------------------------------------------------------------


def tensor_bytes(dtype: str, shape: Iterable[int]) -> int:
    """Bytes of one tensor of ``dtype`` (a safetensors dtype name) and ``shape``."""
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        raise EstimateError(f"unknown safetensors dtype {dtype!r}")
    count = 1
    for dim in shape:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
            raise EstimateError(f"invalid tensor shape dimension {dim!r}")
        count *= dim
    return (count * bits + 7) // 8


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of one safetensors file; reads only ``8 + header length`` bytes."""
    try:
        with path.open("rb") as f:
            raw_len = f.read(8)
            if len(raw_len) != 8:
                raise EstimateError(f"{path.name}: too short to be a safetensors file")
            (length,) = struct.unpack("<Q", raw_len)
            if length == 0 or length > MAX_HEADER_BYTES:
                raise EstimateError(f"{path.name}: invalid safetensors header length {length}")
            raw = f.read(length)
    except OSError as exc:
        raise EstimateError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(raw) != length:
        raise EstimateError(f"{path.name}: truncated safetensors header")
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EstimateError(f"{path.name}: safetensors header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise EstimateError(f"{path.name}: safetensors header is not a JSON object")
    return header


def header_weight_bytes(header: Mapping[str, Any], name: str = "file") -> tuple[int, int]:
    """``(bytes, tensor count)`` declared by one header; checked against ``data_offsets``."""
    total = 0
    count = 0
    for key, info in header.items():
        if key == "__metadata__":
            continue
        if not isinstance(info, dict) or "dtype" not in info or "shape" not in info:
            raise EstimateError(f"{name}: tensor {key!r} has no dtype/shape")
        size = tensor_bytes(str(info["dtype"]), info["shape"])
        offsets = info.get("data_offsets")
        if (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) for o in offsets)
            and offsets[1] - offsets[0] != size
        ):
            raise EstimateError(
                f"{name}: tensor {key!r} declares {offsets[1] - offsets[0]} bytes "
                f"but dtype {info['dtype']} x shape {info['shape']} is {size}"
            )
        total += size
        count += 1
    return total, count


def _weight_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            data = json.loads(index.read_text())
            weight_map = data["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError("weight_map is not an object")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EstimateError(f"{index.name}: unreadable index: {exc}") from exc
        names = sorted({str(v) for v in weight_map.values()})
        files = []
        for name in names:
            path = (model_dir / name).resolve()
            if model_dir.resolve() not in path.parents:
                raise EstimateError(f"{index.name}: shard {name!r} is outside the model directory")
            if not path.is_file():
                raise EstimateError(f"{index.name}: shard {name} is missing")
            files.append(path)
        return files
    files = sorted(p for p in model_dir.glob("*.safetensors") if p.is_file())
    if not files:
        raise EstimateError(f"no *.safetensors files in {model_dir}")
    return files


def weights_info(model_dir: Path) -> WeightsInfo:
    """Exact weight bytes of a model directory from its safetensors headers."""
    total = 0
    tensors = 0
    files = _weight_files(model_dir)
    for path in files:
        size, count = header_weight_bytes(read_safetensors_header(path), path.name)
        total += size
        tensors += count
    return WeightsInfo(total_bytes=total, tensor_count=tensors, files=tuple(p.name for p in files))


# --- config.json -------------------------------------------------------------------


def read_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise EstimateError(f"no config.json in {model_dir}") from exc
    except (OSError, ValueError) as exc:
        raise EstimateError(f"config.json is unreadable: {exc}") from exc
    if not isinstance(data, dict):
        raise EstimateError("config.json is not a JSON object")
    return data


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a config (multimodal configs nest it)."""
    for key in ("text_config", "llm_config", "language_config"):
        nested = config.get(key)
        if isinstance(nested, dict) and "num_hidden_layers" in nested:
            return nested
    return config


def _int(cfg: Mapping[str, Any], key: str) -> int | None:
    value = cfg.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def model_dtype_bytes(config: Mapping[str, Any], dtype: str = "auto") -> int:
    """Bytes per element of the model's dtype (``dtype`` as vLLM's ``--dtype``)."""
    name = dtype.lower()
    if name == "auto":
        cfg = text_config(config)
        found = cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype")
        name = str(found or "bfloat16").lower().removeprefix("torch.")
    size = _TORCH_DTYPE_BYTES.get(name)
    if size is None:
        raise EstimateError(f"unknown dtype {name!r}")
    return size


def kv_dtype_bytes(
    config: Mapping[str, Any], kv_cache_dtype: str = "auto", dtype: str = "auto"
) -> int:
    """Bytes per KV-cache element: vLLM's ``--kv-cache-dtype`` (auto = the model's dtype)."""
    name = kv_cache_dtype.lower()
    if name == "auto":
        return model_dtype_bytes(config, dtype)
    if name.startswith("fp8"):
        return 1
    size = _TORCH_DTYPE_BYTES.get(name)
    if size is None:
        raise EstimateError(f"unknown kv-cache dtype {kv_cache_dtype!r}")
    return size


def kv_cache_info(
    config: Mapping[str, Any], kv_cache_dtype: str = "auto", dtype: str = "auto"
) -> KvCacheInfo:
    """KV-cache bytes per token of a ``config.json`` (module docstring)."""
    cfg = text_config(config)
    layers = _int(cfg, "num_hidden_layers") or _int(cfg, "n_layer") or _int(cfg, "num_layers")
    if layers is None:
        raise EstimateError("config.json has no num_hidden_layers")
    elem = kv_dtype_bytes(config, kv_cache_dtype, dtype)
    lora_rank = _int(cfg, "kv_lora_rank")
    if lora_rank is not None:  # multi-head latent attention: one latent per layer
        rope = _int(cfg, "qk_rope_head_dim") or 0
        width = lora_rank + rope
        return KvCacheInfo(
            bytes_per_token=layers * width * elem,
            num_layers=layers,
            num_kv_heads=1,
            head_dim=width,
            dtype_bytes=elem,
            mla=True,
        )
    heads = _int(cfg, "num_attention_heads") or _int(cfg, "n_head")
    hidden = _int(cfg, "hidden_size") or _int(cfg, "n_embd")
    kv_heads = _int(cfg, "num_key_value_heads") or heads
    head_dim = _int(cfg, "head_dim")
    if head_dim is None:
        if heads is None or hidden is None:
            raise EstimateError("config.json has neither head_dim nor hidden_size/heads")
        head_dim = hidden // heads
    if kv_heads is None:
        raise EstimateError("config.json has no num_key_value_heads/num_attention_heads")
    return KvCacheInfo(
        bytes_per_token=2 * layers * kv_heads * head_dim * elem,
        num_layers=layers,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        dtype_bytes=elem,
    )


def overhead_bytes(config: Mapping[str, Any], dtype: str = "auto") -> int:
    """CUDA graphs plus the profiling activation peak (module docstring): an allowance."""
    cfg = text_config(config)
    hidden = _int(cfg, "hidden_size") or _int(cfg, "n_embd") or 0
    intermediate = _int(cfg, "intermediate_size") or 4 * hidden
    vocab = _int(cfg, "vocab_size") or _int(config, "vocab_size") or 0
    elem = model_dtype_bytes(config, dtype)
    activations = PROFILE_BATCH_TOKENS * (4 * hidden + 2 * intermediate) * elem
    logits = SAMPLER_SEQS * vocab * 4
    return CUDA_GRAPHS_ALLOWANCE_BYTES + activations + logits


def max_position_embeddings(config: Mapping[str, Any]) -> int | None:
    cfg = text_config(config)
    for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        value = _int(cfg, key)
        if value is not None:
            return value
    return None


def estimate_model_memory(
    model_dir: Path,
    *,
    max_tokens: int | None = None,
    tensor_parallel_size: int = 1,
    kv_cache_dtype: str = "auto",
    dtype: str = "auto",
) -> MemoryEstimate:
    """Size a local model directory. Blocking file I/O: call it in a worker thread.

    ``max_tokens`` (vLLM's ``--max-model-len``) defaults to the config's
    ``max_position_embeddings``, as vLLM derives it. Every failure (a path
    that is not a directory, unreadable or malformed files) is an
    :class:`EstimateError` saying what is wrong.
    """
    try:
        return _estimate(model_dir, max_tokens, tensor_parallel_size, kv_cache_dtype, dtype)
    except EstimateError:
        raise
    except (OSError, ValueError) as exc:  # e.g. a NUL byte in the path, EACCES
        raise EstimateError(f"cannot read {model_dir}: {exc}") from exc


def _estimate(
    model_dir: Path,
    max_tokens: int | None,
    tensor_parallel_size: int,
    kv_cache_dtype: str,
    dtype: str,
) -> MemoryEstimate:
    if not model_dir.is_dir():
        raise EstimateError(f"{model_dir} is not a local model directory")
    if tensor_parallel_size < 1:
        raise EstimateError("tensor_parallel_size must be at least 1")
    config = read_config(model_dir)
    weights = weights_info(model_dir)
    kv = kv_cache_info(config, kv_cache_dtype, dtype)
    notes: list[str] = []
    tokens = max_tokens or max_position_embeddings(config)
    if tokens is None:
        raise EstimateError("no max_tokens given and config.json has no max_position_embeddings")
    if max_tokens is None:
        notes.append(f"maxTokens not given: using the config's context length {tokens}")
    if kv.mla:
        notes.append("multi-head latent attention: one latent vector per layer and token")
    return MemoryEstimate(
        weights_bytes=weights.total_bytes,
        kv_bytes_per_token=kv.bytes_per_token,
        max_tokens=tokens,
        overhead_bytes=overhead_bytes(config, dtype),
        tensor_parallel_size=tensor_parallel_size,
        notes=tuple(notes),
    )
