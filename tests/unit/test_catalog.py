"""Catalog entries are checked like load requests; one bad entry never hides the others."""

from __future__ import annotations

from typing import Any

import pytest

from sardeenz.catalog.validation import EntryInvalid, check_catalog, check_entry, load_request
from sardeenz.domain import EngineKind

SIM = EngineKind.SIM


def test_a_good_entry_becomes_the_load_request_it_stands_for() -> None:
    entry = check_entry(
        "chat",
        {
            "modelPath": "org/chat-7b",
            "engine": "sim",
            "aliases": ["gpt-4o"],
            "extraArgs": ["--load-seconds", "0.2"],
            "gpuIds": [0],
            "gpuMemoryLimit": 8,
            "sleepLevel": 1,
            "idleSleepSeconds": 60,
            "idleUnloadSeconds": 600,
            "pinned": False,
            "preload": True,
        },
        SIM,
    )
    req = load_request("chat", entry)
    assert req.served_model_name == "chat"
    assert req.model_path == "org/chat-7b"
    assert req.enable_sleep_mode is True
    assert req.gpu_ids == [0]
    assert req.extra_args == ["--load-seconds", "0.2"]
    assert entry.preload is True


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"modelPath": ""}, "modelPath"),
        ({"modelPath": "m", "gpuMemoryLimit": -1}, "gpu_memory_limit"),
        ({"modelPath": "m", "gpuIds": [5000]}, "gpu_ids"),
        ({"modelPath": "m", "tensorParallelSize": 0}, "tensor_parallel_size"),
        ({"modelPath": "m", "sleepLevel": 3}, "sleepLevel"),
        ({"modelPath": "m", "idleUnloadSeconds": 0}, "idleUnloadSeconds"),
        ({"modelPath": "m", "idleSleepSeconds": 5}, "idleSleepSeconds"),
        ({"modelPath": "m", "engine": "tgi"}, "engine"),
        ({"modelPath": "m", "bogus": 1}, "bogus"),
        ({}, "modelPath"),
        ({"modelPath": "m", "extraArgs": ["--port", "1"]}, "extraArgs"),
        ({"modelPath": "m", "aliases": [" spaced "]}, "aliases"),
        ({"modelPath": "m", "aliases": ["bad"]}, "aliases"),
    ],
)
def test_a_bad_entry_names_the_entry_and_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(EntryInvalid) as err:
        check_entry("bad", data, SIM)
    message = str(err.value)
    assert message.startswith("catalog entry 'bad': ")
    assert field in message


def test_an_entry_that_is_not_a_mapping_is_refused_with_its_name() -> None:
    with pytest.raises(EntryInvalid, match="catalog entry 'x': must be a mapping"):
        check_entry("x", "org/model", SIM)


def test_bad_entries_do_not_stop_the_others_and_names_stay_unique() -> None:
    good, bad = check_catalog(
        {
            "a": {"modelPath": "m1", "aliases": ["shared"]},
            "b": {"modelPath": "m2", "gpuMemoryLimit": 0},
            "c": {"modelPath": "m3", "aliases": ["shared"]},
            "d": {"model_path": "m4"},
            "": {"modelPath": "m5"},
        },
        SIM,
    )
    assert list(good) == ["a", "d"]
    assert set(bad) == {"b", "c", ""}
    assert "gpu_memory_limit" in bad["b"]
    assert "'shared' already names entry 'a'" in bad["c"]
