"""PEFT-style LoRA adapter folders for tests: what vLLM (and the simulated engine) read;
and the probe adapter tests share: a metric's value."""

from __future__ import annotations

import json
from pathlib import Path

from testkit.servers import HTTP


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


def metric_value(base_url: str, line_start: str) -> float:
    """The first sample on the server's ``/metrics`` whose line starts with
    ``line_start`` (e.g. ``sardeenz_adapter_hits_total{model="sql"}``); 0 when none."""
    text = HTTP.get(f"{base_url}/metrics", timeout=10).text
    values = [float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(line_start)]
    return values[0] if values else 0.0
