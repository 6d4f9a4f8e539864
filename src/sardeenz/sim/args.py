"""The simulated engine's command line: vLLM's flag style, parsed into a ``SimConfig``.

The flags are part of the contract with the controller (the SimAdapter builds them
like vLLM's), so they live apart from the server that acts on them: argparse exits 2
with ``unrecognized arguments`` on an unknown flag, exactly as vLLM does, and the
supervisor reads that from the log. Sizes take vLLM's ``4k``/``4K`` forms.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["SimConfig", "build_parser", "parse_args"]


def _human_int(text: str) -> int:
    """Parse ``4096``, ``4k`` (x1000) or ``4K`` (x1024) like vLLM's ``--max-model-len``."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kKmMgG]?)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"invalid integer value: {text!r}")
    number, suffix = float(m.group(1)), m.group(2)
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    value = int(number * scale[suffix])
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


def _positive(text: str) -> float:
    value = _non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _factor(text: str) -> float:
    value = _positive(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text!r}")
    return value


def _fraction(text: str) -> float:
    value = _positive(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1]: {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {text!r}")
    return value


MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""vLLM's ``--max-lora-rank`` choices (its ``LoRAConfig.MaxLoRARanks``)."""


def _loras(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """vLLM-like flags; argparse errors (exit 2) on anything unknown, as vLLM does."""
    p = argparse.ArgumentParser(
        prog="sardeenz sim-engine",
        description="Simulated vLLM OpenAI-compatible server (no GPU, no model weights).",
        allow_abbrev=False,
    )
    p.add_argument("--model", required=True, help="model name or path (only echoed)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_port, required=True)
    p.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        metavar="NAME",
        help="names accepted in requests; the first is used in replies (default: --model)",
    )
    p.add_argument("--load-seconds", type=_non_negative, default=1.0)
    p.add_argument("--ttft-ms", type=_non_negative, default=20.0)
    p.add_argument("--itl-ms", type=_non_negative, default=5.0)
    p.add_argument("--memory-gib", type=_positive, default=4.0, help="simulated GPU footprint")
    p.add_argument("--max-model-len", type=_human_int, default=4096)
    p.add_argument("--gpu-memory-utilization", type=_fraction, default=None)
    p.add_argument("--enable-sleep-mode", action="store_true")
    # Accepted and echoed like vLLM's flag, so the pre-Ampere rule is visible end to end.
    p.add_argument("--attention-backend", default=None)
    p.add_argument(
        "--wake-ms",
        type=_non_negative,
        default=None,
        help="time a wake-up takes (default: load-seconds/10, at most 500 ms)",
    )
    p.add_argument(
        "--wake-slowdown",
        type=_factor,
        default=1.0,
        metavar="FACTOR",
        help="the first request admitted after a wake-up runs FACTOR times slower (its TTFT "
        "and every token), as vLLM's does until its caches are warm again; vLLM published "
        "4.12 s vs 0.96 s after a 1-token warm-up, about 4.3 (default 1: no slowdown)",
    )
    p.add_argument(
        "--fail-after-load",
        action="store_true",
        help="fail like vLLM with a KV cache too small for max-model-len",
    )
    p.add_argument("--enable-lora", action="store_true", help="serve LoRA adapters (vLLM's)")
    p.add_argument(
        "--max-loras",
        type=_loras,
        default=1,
        help="adapters whose weights stay loaded (vLLM's cache; a request for another "
        "reloads it, taking --lora-load-ms)",
    )
    p.add_argument(
        "--max-lora-rank",
        type=int,
        choices=MAX_LORA_RANKS,
        default=16,
        help="largest adapter rank accepted (vLLM's choices)",
    )
    p.add_argument(
        "--lora-load-ms",
        type=_non_negative,
        default=50.0,
        help="simulated time to load one adapter's weights",
    )
    p.add_argument("--disable-uvicorn-access-log", action="store_true")
    p.add_argument(
        "--api-key",
        default=None,
        help="like vLLM: /v1 requests need 'Authorization: Bearer <key>' (401 otherwise)",
    )
    return p


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The parsed command line, in seconds and GiB."""

    model: str
    host: str
    port: int
    served_model_names: tuple[str, ...]
    load_seconds: float
    ttft_s: float
    itl_s: float
    memory_gib: float
    max_model_len: int
    gpu_memory_utilization: float | None
    enable_sleep_mode: bool
    wake_s: float
    fail_after_load: bool
    access_log: bool
    api_key: str | None = None
    wake_slowdown: float = 1.0
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int = 16
    lora_load_s: float = 0.05
    non_default_args: dict[str, object] = field(default_factory=dict)

    @property
    def served_name(self) -> str:
        return self.served_model_names[0]


def parse_args(argv: Sequence[str] | None = None) -> SimConfig:
    """Parse flags; raises SystemExit like argparse (2 on errors, 0 for ``--help``)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    names: list[str] = ns.served_model_name or [ns.model]
    wake_ms: float = ns.wake_ms if ns.wake_ms is not None else min(500.0, ns.load_seconds * 100)
    non_default = {k: v for k, v in vars(ns).items() if parser.get_default(k) != v}
    if "api_key" in non_default:
        non_default["api_key"] = "<hidden>"  # a secret never goes to the log
    return SimConfig(
        model=ns.model,
        host=ns.host,
        port=ns.port,
        served_model_names=tuple(names),
        load_seconds=ns.load_seconds,
        ttft_s=ns.ttft_ms / 1000,
        itl_s=ns.itl_ms / 1000,
        memory_gib=ns.memory_gib,
        max_model_len=ns.max_model_len,
        gpu_memory_utilization=ns.gpu_memory_utilization,
        enable_sleep_mode=ns.enable_sleep_mode,
        wake_s=wake_ms / 1000,
        fail_after_load=ns.fail_after_load,
        access_log=not ns.disable_uvicorn_access_log,
        api_key=ns.api_key,
        wake_slowdown=ns.wake_slowdown,
        enable_lora=ns.enable_lora,
        max_loras=ns.max_loras,
        max_lora_rank=ns.max_lora_rank,
        lora_load_s=ns.lora_load_ms / 1000,
        non_default_args=non_default,
    )
