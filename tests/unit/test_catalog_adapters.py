"""Adapter entries and LoRA bases in the catalog: their own fields, then against the base."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sardeenz.catalog.adapterfiles import adapter_rank, probe_ranks
from sardeenz.catalog.validation import EntryInvalid, check_catalog, check_entry, load_request
from sardeenz.domain import EngineKind
from testkit.adapters import make_adapter

SIM = EngineKind.SIM
BASE = {"modelPath": "org/base", "engine": "sim", "loraSlots": 4, "maxLoraRank": 32}


def test_a_lora_base_starts_its_engine_with_vllms_flags() -> None:
    entry = check_entry("base", {**BASE, "extraArgs": ["--load-seconds", "0"]}, SIM)
    req = load_request("base", entry)
    assert req.extra_args == [
        "--load-seconds",
        "0",
        "--enable-lora",
        "--max-loras",
        "4",
        "--max-lora-rank",
        "32",
    ]
    default_rank = load_request("b", check_entry("b", {"modelPath": "m", "loraSlots": 1}, SIM))
    assert default_rank.extra_args[-2:] == ["--max-lora-rank", "16"]  # vLLM's default
    plain = load_request("p", check_entry("p", {"modelPath": "m"}, SIM))
    assert "--enable-lora" not in plain.extra_args


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"modelPath": "m", "maxLoraRank": 16}, "maxLoraRank: needs loraSlots"),
        ({"modelPath": "m", "loraSlots": 2, "maxLoraRank": 12}, "maxLoraRank: must be one of"),
        ({"modelPath": "m", "loraSlots": 0}, "loraSlots: Input should be greater"),
        (
            {"modelPath": "m", "loraSlots": 2, "extraArgs": ["--max-loras", "3"]},
            "extraArgs: --max-loras is set by loraSlots",
        ),
        (
            {"modelPath": "m", "engine": "external", "url": "http://h:1", "loraSlots": 2},
            "loraSlots: does not apply to engine external",
        ),
        ({"adapterPath": "/a"}, "adapterPath: needs adapterOf"),
        ({"adapterOf": "base"}, "adapterPath: an adapter needs the folder"),
        ({"adapterOf": "base", "adapterPath": "/a\n"}, "control character"),
        ({"adapterOf": "base", "adapterPath": "/a", "modelPath": "m"}, "modelPath: does not"),
        ({"adapterOf": "base", "adapterPath": "/a", "sleepLevel": 1}, "sleepLevel: does not"),
        ({"adapterOf": "base", "adapterPath": "/a", "loraSlots": 1}, "loraSlots: does not"),
        ({"adapterOf": " x", "adapterPath": "/a"}, "adapterOf:"),
        ({"adapterOf": "bad", "adapterPath": "/a"}, "adapterOf: an adapter cannot be its own"),
    ],
)
def test_bad_lora_fields_are_named(data: dict[str, Any], reason: str) -> None:
    with pytest.raises(EntryInvalid) as err:
        check_entry("bad", data, SIM)
    assert str(err.value).startswith("catalog entry 'bad': ")
    assert reason in str(err.value)


def test_adapters_are_checked_against_their_base_and_rank(tmp_path: Path) -> None:
    ok = make_adapter(tmp_path / "ok", rank=16)
    big = make_adapter(tmp_path / "big", rank=64)
    raw: dict[str, dict[str, Any]] = {
        # the adapter comes before its base: order does not matter
        "early": {"adapterOf": "base", "adapterPath": str(ok)},
        "base": BASE,
        "plain": {"modelPath": "org/plain"},
        "external": {"modelPath": "m", "engine": "external", "url": "http://h:1"},
        "broken-base": {"modelPath": "m", "loraSlots": 2, "maxLoraRank": 7},
        "big": {"adapterOf": "base", "adapterPath": str(big)},
        "missing": {"adapterOf": "base", "adapterPath": str(tmp_path / "none")},
        "nobase": {"adapterOf": "ghost", "adapterPath": str(ok)},
        "nolora": {"adapterOf": "plain", "adapterPath": str(ok)},
        "ext": {"adapterOf": "external", "adapterPath": str(ok)},
        "chained": {"adapterOf": "early", "adapterPath": str(ok)},
        "of-broken": {"adapterOf": "broken-base", "adapterPath": str(ok)},
        "clash": {"adapterOf": "base", "adapterPath": str(ok), "aliases": ["plain"]},
    }
    paths = {d["adapterPath"] for d in raw.values() if "adapterPath" in d}
    good, bad = check_catalog(raw, SIM, probe_ranks(paths))
    assert set(good) == {"early", "base", "plain", "external"}
    assert "the adapter's rank 64 is greater than 'base''s maxLoraRank 32" in bad["big"]
    assert "adapterPath: cannot read" in bad["missing"]
    assert "no catalog entry named 'ghost'" in bad["nobase"]
    assert "'plain' has no loraSlots" in bad["nolora"]
    assert "is an external server" in bad["ext"]
    assert "'early' is itself an adapter" in bad["chained"]
    assert "its base 'broken-base' is invalid" in bad["of-broken"]
    assert "'plain' already names entry 'plain'" in bad["clash"]


def test_adapter_rank_reads_peft_config(tmp_path: Path) -> None:
    folder = make_adapter(tmp_path / "a", rank=8)
    assert adapter_rank(str(folder)) == 8
    config = json.loads((folder / "adapter_config.json").read_text())
    config["rank_pattern"] = {"q_proj": 64}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    assert adapter_rank(str(folder)) == 64  # what the engine compares with its limit
    (folder / "adapter_config.json").write_text('{"peft_type": "PREFIX_TUNING", "r": 8}')
    with pytest.raises(ValueError, match="not a LoRA adapter"):
        adapter_rank(str(folder))
    (folder / "adapter_config.json").write_text("{nope")
    with pytest.raises(ValueError, match="not valid JSON"):
        adapter_rank(str(folder))
    (folder / "adapter_config.json").write_text('{"r": "8"}')
    with pytest.raises(ValueError, match="must be integers"):
        adapter_rank(str(folder))
