"""The simulated GPU memory plan: where ``--memory-gib`` goes, with vLLM's KV numbers.

Weights take 60 %, CUDA graphs 3 %, the KV cache the rest; the KV cache holds
``weights_bytes / 131072`` bytes per token (the Llama-3-8B ratio), in blocks of 16
tokens. When the KV cache cannot hold one ``--max-model-len`` request the engine fails
to start like vLLM does. The controller's log parser and memory ledger read these
figures from the log lines, so they must stay consistent with each other: one module
computes them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["KV_BLOCK_TOKENS", "MemoryPlan", "plan_memory"]

_GIB: Final = 1 << 30
KV_BLOCK_TOKENS: Final = 16
_WEIGHTS_SHARE: Final = 0.60
_GRAPHS_SHARE: Final = 0.03
_WEIGHT_BYTES_PER_KV_BYTE: Final = 131_072


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Where the simulated GPU footprint goes, with vLLM's derived KV numbers."""

    total_gib: float
    weights_gib: float
    graphs_gib: float
    kv_gib: float
    kv_bytes_per_token: int
    kv_tokens: int
    max_model_len: int

    @property
    def max_concurrency(self) -> float:
        return self.kv_tokens / self.max_model_len

    @property
    def fits(self) -> bool:
        """Whether one request of ``max_model_len`` tokens fits (else vLLM refuses to start)."""
        return self.kv_tokens >= self.max_model_len

    @property
    def needed_kv_gib(self) -> float:
        return self.max_model_len * self.kv_bytes_per_token / _GIB

    def tokens_for(self, kv_gib: float) -> int:
        blocks = int(kv_gib * _GIB / self.kv_bytes_per_token) // KV_BLOCK_TOKENS
        return blocks * KV_BLOCK_TOKENS


def plan_memory(memory_gib: float, max_model_len: int) -> MemoryPlan:
    """Split ``memory_gib`` like a real load: weights 60 %, graphs 3 %, KV cache the rest."""
    weights = round(memory_gib * _WEIGHTS_SHARE, 4)
    graphs = round(memory_gib * _GRAPHS_SHARE, 2)
    kv = max(0.0, memory_gib - weights - graphs)
    per_token = max(64, int(weights * _GIB) // _WEIGHT_BYTES_PER_KV_BYTE)
    blocks = int(kv * _GIB / per_token) // KV_BLOCK_TOKENS
    return MemoryPlan(
        total_gib=memory_gib,
        weights_gib=weights,
        graphs_gib=graphs,
        kv_gib=kv,
        kv_bytes_per_token=per_token,
        kv_tokens=blocks * KV_BLOCK_TOKENS,
        max_model_len=max_model_len,
    )
