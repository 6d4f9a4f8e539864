"""CUDA compute capability from a GPU's name, and the pre-Ampere attention rule.

Real GPUs report their capability through NVML; simulated GPUs (``--sim-gpus``)
only have a name, yet the demo must behave like the real thing (a simulated
T4 gets the same TRITON_ATTN override a real one would). The name table is
also NVML's fallback when ``nvmlDeviceGetCudaComputeCapability`` fails.

The seed's rule: vLLM's default attention kernels (FlashInfer/FlashAttention)
need compute capability 8.0 (Ampere). On an older GPU model loading fails, so
``--attention-backend TRITON_ATTN`` is appended unless the user chose a
backend, and the load response carries a warning saying why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sardeenz.gpu.inventory import GpuInfo

AMPERE: tuple[int, int] = (8, 0)
"""Lowest capability vLLM's default FlashInfer/FlashAttention kernels run on."""

FALLBACK_BACKEND = "TRITON_ATTN"
"""Backend that works on pre-Ampere GPUs (Triton kernels, sm 7.0 and up)."""

ATTENTION_BACKEND_FLAG = "--attention-backend"

# Ordered: the first match wins, so specific names come before the generic
# patterns they would also match (RTX 5000 Ada before GeForce RTX 50x0, L40
# before L4, A100 before A10). Names are upper-cased with '-' and '_' turned
# into spaces first, so "A100-SXM4-80GB" reads as "A100 SXM4 80GB".
_RULES: tuple[tuple[re.Pattern[str], tuple[int, int]], ...] = tuple(
    (re.compile(pattern), cap)
    for pattern, cap in (
        # Blackwell workstation/consumer (sm_120) and DGX Spark (sm_121)
        (r"\bRTX PRO \d+\b.*\bBLACKWELL\b", (12, 0)),
        (r"\bGB10\b", (12, 1)),
        (r"\bRTX 50[5-9]0\b", (12, 0)),
        # Blackwell data centre
        (r"\bG?B300\b", (10, 3)),
        (r"\bG?B[12]00\b", (10, 0)),
        # Hopper
        (r"\bG?H(100|200|800|20)\b", (9, 0)),
        # Ada Lovelace
        (r"\bRTX \d+ ADA\b|\bADA GENERATION\b", (8, 9)),
        (r"\bL(4|40|40S|20)\b", (8, 9)),
        (r"\bRTX 40[5-9]0\b", (8, 9)),
        # Turing workstation cards named like later GeForce models
        (r"\bQUADRO RTX \d+\b", (7, 5)),
        # Ampere
        (r"\bA(100|800|30)\b", (8, 0)),
        (r"\bA(10|10G|40|16|2)\b", (8, 6)),
        (r"\bRTX A\d{4}\b|\bA\d000\b", (8, 6)),
        (r"\bRTX 30[5-9]0\b", (8, 6)),
        # Turing
        (r"\bT4\b|\bTITAN RTX\b|\bRTX 20[6-8]0\b|\bGTX 16[5-6]0\b|\bT(400|600|1000)\b", (7, 5)),
        # Volta
        (r"\bV100\b|\bTITAN V\b|\bGV100\b", (7, 0)),
        # Pascal
        (r"\bP100\b|\bGP100\b", (6, 0)),
        (r"\bP(4|6|40)\b|\bGTX 10[5-8]0\b|\bTITAN XP\b", (6, 1)),
        # Maxwell
        (r"\bM(4|6|40|60)\b|\bGTX 9[5-8]0\b", (5, 2)),
        # Kepler
        (r"\bK80\b", (3, 7)),
        (r"\bK(20|20X|40)\b", (3, 5)),
    )
)


def capability_from_name(name: str) -> tuple[int, int] | None:
    """CUDA compute capability of a GPU model, from its marketing name.

    ``"Tesla T4"`` -> ``(7, 5)``, ``"NVIDIA A100-SXM4-80GB"`` -> ``(8, 0)``.
    Unknown names give None: guessing wrong would add or drop a backend flag
    for no reason, while None simply leaves vLLM's default in place.
    """
    text = re.sub(r"[-_/]+", " ", name.upper())
    text = re.sub(r"\s+", " ", text).strip()
    for pattern, cap in _RULES:
        if pattern.search(text):
            return cap
    return None


def format_capability(cap: tuple[int, int]) -> str:
    return f"{cap[0]}.{cap[1]}"


def user_attention_backend(extra_args: Sequence[str]) -> str | None:
    """The backend the user chose in ``extra_args``, '' if the value is missing.

    Accepts ``--attention-backend X`` and ``--attention-backend=X`` and the
    underscore spelling, which vLLM's argument parser also accepts.
    """
    for i, arg in enumerate(extra_args):
        flag, sep, value = arg.partition("=")
        if flag.replace("_", "-") != ATTENTION_BACKEND_FLAG:
            continue
        if sep:
            return value
        return extra_args[i + 1] if i + 1 < len(extra_args) else ""
    return None


def attention_backend_override(
    gpus: Sequence[GpuInfo], extra_args: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Arguments to append for the chosen GPUs, and warnings for the user.

    Any chosen GPU below 8.0 -> ``["--attention-backend", "TRITON_ATTN"]``
    plus a warning naming the GPU(s), unless the user already picked a
    backend (then nothing is added: their choice wins; a note is returned
    only if they picked a kernel family known to need Ampere). GPUs whose
    capability is unknown are left alone.
    """
    old: list[tuple[GpuInfo, tuple[int, int]]] = [
        (g, g.compute_capability)
        for g in gpus
        if g.compute_capability is not None and g.compute_capability < AMPERE
    ]
    if not old:
        return [], []
    if len(old) == 1:
        gpu, cap = old[0]
        what = f"GPU {gpu.index} ({gpu.name}) has compute capability {format_capability(cap)}"
    else:
        names = " and ".join(f"GPU {g.index} ({g.name}, {format_capability(c)})" for g, c in old)
        what = f"{names} have compute capability"
    chosen = user_attention_backend(extra_args)
    if chosen is not None:
        if chosen.upper().startswith(("FLASH_ATTN", "FLASHINFER")):
            return [], [
                f"{what} < 8.0 but --attention-backend {chosen} was requested; "
                f"those kernels need Ampere ({FALLBACK_BACKEND} works on older GPUs)"
            ]
        return [], []
    return [ATTENTION_BACKEND_FLAG, FALLBACK_BACKEND], [
        f"{what} < 8.0: FlashInfer/FlashAttention kernels need Ampere; "
        f"using {ATTENTION_BACKEND_FLAG} {FALLBACK_BACKEND}"
    ]
