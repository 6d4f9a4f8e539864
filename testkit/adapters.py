"""PEFT-style LoRA adapter folders for tests: what vLLM (and the simulated engine) read."""

from __future__ import annotations

import json
from pathlib import Path


def make_adapter(folder: Path, *, rank: int = 8, bias: str = "none", weights: bool = True) -> Path:
    """Write ``adapter_config.json`` (and a weights file) in ``folder``; returns the folder.

    The weights file only has to exist for the simulated engine; the real-vLLM tier
    needs real tensors and makes its own.
    """
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": 2 * rank,
        "target_modules": ["q_proj", "v_proj"],
        "bias": bias,
        "task_type": "CAUSAL_LM",
    }
    (folder / "adapter_config.json").write_text(json.dumps(config))
    if weights:
        header = b"{}      "  # a safetensors file holding no tensor: 8-byte size, then JSON
        size = len(header).to_bytes(8, "little")
        (folder / "adapter_model.safetensors").write_bytes(size + header)
    return folder
