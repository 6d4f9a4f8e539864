"""What a LoRA adapter folder says about itself: the rank in its PEFT ``adapter_config.json``.

The catalog checks an adapter entry's rank against its base's ``maxLoraRank`` when the
entry is read, so a bad adapter is listed ``invalid`` at once rather than failing its
first request. Reading a file blocks: the registry calls :func:`probe_ranks` in a
thread. The engine checks the folder again when it loads the adapter (and answers with
its own reason), so a folder that changes after this check is still caught.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

__all__ = ["AdapterProbe", "adapter_rank", "probe_ranks"]

AdapterProbe = int | str
"""An adapter folder's rank, or why it cannot be read (a message naming the file)."""

_MAX_CONFIG_BYTES = 1 << 20


def adapter_rank(path: str) -> int:
    """The largest rank of the PEFT adapter in folder ``path``; ``ValueError`` says why not.

    The largest of ``r`` and any per-module ``rank_pattern`` value: that is what the
    engine compares with its ``--max-lora-rank``.
    """
    config_file = Path(path).expanduser() / "adapter_config.json"
    try:
        with config_file.open("rb") as f:
            raw = f.read(_MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {config_file}: {exc.strerror or exc}") from None
    if len(raw) > _MAX_CONFIG_BYTES:
        raise ValueError(f"{config_file} is larger than {_MAX_CONFIG_BYTES} bytes")
    try:
        config = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{config_file} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{config_file} must hold a JSON object")
    peft_type = config.get("peft_type", "LORA")
    if peft_type != "LORA":
        raise ValueError(f"{config_file}: peft_type is {peft_type!r}, not a LoRA adapter")
    pattern = config.get("rank_pattern") or {}
    ranks = [config.get("r"), *(pattern.values() if isinstance(pattern, dict) else [None])]
    if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in ranks):
        raise ValueError(f"{config_file}: 'r' (and rank_pattern values) must be integers >= 1")
    return int(max(ranks))


def probe_ranks(paths: Iterable[str]) -> dict[str, AdapterProbe]:
    """Each folder's rank, or why it has none (blocking: run in a thread)."""
    out: dict[str, AdapterProbe] = {}
    for path in paths:
        try:
            out[path] = adapter_rank(path)
        except ValueError as exc:
            out[path] = str(exc)
    return out
