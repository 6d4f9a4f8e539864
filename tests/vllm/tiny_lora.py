"""Build tiny PEFT LoRA adapters for the tier's tiny Llama, offline.

Run with the vLLM venv's interpreter (``torch`` and ``safetensors``; no ``peft`` needed):
``python tiny_lora.py MODEL_DIR OUT_DIR NAME...``. Each NAME becomes ``OUT_DIR/NAME``
holding what PEFT itself writes for a LoRA of a Llama: ``adapter_config.json`` and
``adapter_model.safetensors`` with ``base_model.model.model.layers.N.<module>.lora_A.weight``
(rank x in) and ``lora_B.weight`` (out x rank) for every attention and MLP projection.

PEFT initialises B to zeros (a fresh adapter changes nothing); here B is random and large
next to the base's 0.02-scale weights, so an adapter's greedy output differs from the base's
and from every other adapter's. Each adapter's seed is derived from its name, so a rebuild
writes the same weights and an adapter reloaded later answers exactly as before.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

RANK = 8
ALPHA = 16
B_STD = 0.2
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def shapes(config: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Module -> (in_features, out_features) of a Llama layer."""
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or hidden // heads
    inter = config["intermediate_size"]
    return {
        "q_proj": (hidden, heads * head_dim),
        "k_proj": (hidden, kv_heads * head_dim),
        "v_proj": (hidden, kv_heads * head_dim),
        "o_proj": (heads * head_dim, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }


def build(model_dir: Path, out: Path) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    seed = int.from_bytes(hashlib.sha256(out.name.encode()).digest()[:4], "little")
    gen = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for layer in range(config["num_hidden_layers"]):
        for module, (fan_in, fan_out) in shapes(config).items():
            group = "self_attn" if module in ATTENTION else "mlp"
            prefix = f"base_model.model.model.layers.{layer}.{group}.{module}"
            a = torch.randn(RANK, fan_in, generator=gen) / fan_in**0.5
            b = torch.randn(fan_out, RANK, generator=gen) * B_STD
            tensors[f"{prefix}.lora_A.weight"] = a.contiguous()
            tensors[f"{prefix}.lora_B.weight"] = b.contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(model_dir),
        "r": RANK,
        "lora_alpha": ALPHA,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": [*ATTENTION, *MLP],
        "fan_in_fan_out": False,
        "inference_mode": True,
        "use_rslora": False,
    }
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))


def main() -> None:
    model_dir, out_dir, *names = sys.argv[1:]
    if not names:
        raise SystemExit("usage: tiny_lora.py MODEL_DIR OUT_DIR NAME...")
    for name in names:
        build(Path(model_dir), Path(out_dir) / name)
    print(json.dumps({"dir": out_dir, "adapters": names, "rank": RANK}))


if __name__ == "__main__":
    main()
