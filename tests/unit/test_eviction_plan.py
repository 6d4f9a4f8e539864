"""The eviction plan (pure): sleep before unload, LRU first, cheapest to bring back on a tie."""

from __future__ import annotations

import pytest

from sardeenz.catalog.eviction import Candidate, Step, plan_eviction, shortfall
from sardeenz.catalog.validation import EntryInvalid, check_entry
from sardeenz.domain import EngineKind

GB = 10**9


def _cand(iid: str, last: float, **kw: object) -> Candidate:
    base: dict[str, object] = {
        "instance_id": iid,
        "name": iid,
        "status": "active",
        "pinned": False,
        "in_flight": 0,
        "last_activity": last,
        "resident_for": 100.0,
        "sleep_level": 1,
        "sleep_frees": 5 * GB,
        "unload_frees": 6 * GB,
        "offload_bytes": 3 * GB,
    }
    base.update(kw)
    return Candidate(**base)  # type: ignore[arg-type]


def _steps(plan: list[Step]) -> list[tuple[str, str, int]]:
    return [(s.victim.instance_id, s.action, s.level) for s in plan]


def test_a_sleep_that_frees_enough_is_chosen_over_an_unload() -> None:
    plan = plan_eviction([_cand("a", 10)], 5, need=4 * GB, host_room=None)
    assert _steps(plan) == [("a", "sleep", 1)]


def test_sleeps_alone_come_before_unloading_an_older_model_that_cannot_sleep() -> None:
    cands = [_cand("old", 1, sleep_level=0), _cand("newer", 2)]
    assert _steps(plan_eviction(cands, 5, need=4 * GB, host_room=None)) == [("newer", "sleep", 1)]


def test_level_one_needs_host_ram_for_the_weights() -> None:
    cands = [_cand("a", 10, offload_bytes=3 * GB)]
    assert _steps(plan_eviction(cands, 5, need=4 * GB, host_room=2 * GB)) == [("a", "unload", 0)]
    assert _steps(plan_eviction(cands, 5, need=4 * GB, host_room=3 * GB)) == [("a", "sleep", 1)]
    # level 2 keeps nothing in host RAM
    deep = [_cand("a", 10, sleep_level=2)]
    assert _steps(plan_eviction(deep, 5, need=4 * GB, host_room=0)) == [("a", "sleep", 2)]


def test_host_ram_is_shared_by_the_sleeps_of_one_plan() -> None:
    cands = [_cand("a", 1, sleep_frees=2 * GB), _cand("b", 2, sleep_frees=2 * GB)]
    plan = plan_eviction(cands, 5, need=3 * GB, host_room=4 * GB)
    # both sleeps would free enough, but only one set of weights fits in host RAM
    assert _steps(plan) == [("a", "sleep", 1), ("b", "unload", 0)]
    assert "host RAM" in plan[1].why


def test_unloads_when_sleeping_everything_is_not_enough() -> None:
    cands = [_cand("a", 1), _cand("b", 2)]
    assert _steps(plan_eviction(cands, 5, need=11 * GB, host_room=None)) == [
        ("a", "unload", 0),
        ("b", "unload", 0),
    ]
    assert _steps(plan_eviction([_cand("a", 1)], 5, need=5500 * 10**6, host_room=None)) == [
        ("a", "unload", 0)
    ]


def test_nothing_when_even_unloading_all_is_not_enough() -> None:
    assert plan_eviction([_cand("a", 1)], 5, need=7 * GB, host_room=None) == []


def test_least_recently_used_first_and_on_a_tie_the_cheapest_to_bring_back() -> None:
    cands = [
        _cand("recent", 30),
        _cand("tie-unload", 20, sleep_level=0),
        _cand("tie-level2", 20, sleep_level=2),
        _cand("tie-level1", 20),
        _cand("oldest", 10),
    ]
    plan = plan_eviction(cands, 5, need=None, host_room=None)
    assert _steps(plan) == [("oldest", "sleep", 1)]  # unknown need: one step at a time
    plan = plan_eviction(cands, 5, need=24 * GB, host_room=None)
    # four sleeps free 20 GB: not enough, so what cannot sleep is unloaded in its turn
    assert _steps(plan) == [
        ("oldest", "sleep", 1),
        ("tie-level1", "sleep", 1),
        ("tie-level2", "sleep", 2),
        ("tie-unload", "unload", 0),
        ("recent", "sleep", 1),
    ]


def test_never_a_pinned_busy_fresh_or_asleep_model_put_to_sleep() -> None:
    cands = [
        _cand("pinned", 1, pinned=True),
        _cand("busy", 1, in_flight=1),
        _cand("fresh", 1, resident_for=1),
        _cand("asleep", 2, status="sleeping", unload_frees=GB),
    ]
    assert _steps(plan_eviction(cands, 5, need=GB, host_room=None)) == [("asleep", "unload", 0)]
    assert plan_eviction(cands[:3], 5, need=GB, host_room=None) == []


def test_the_shortfall_is_read_from_the_refusal() -> None:
    placement = {
        "requiredBytesPerGpu": 6 * GB,
        "chosenGpuIds": [0],
        "gpus": [{"index": 0, "availableBytes": 4 * GB}, {"index": 1, "availableBytes": 0}],
    }
    assert shortfall("insufficient_gpu_memory", placement) == 2 * GB
    assert shortfall("insufficient_gpu_memory", {"shortBytesPerGpu": GB}) == GB
    fit = {
        "fit": {
            "gpus": [
                {"neededBytes": 9 * GB, "availableBytes": 4 * GB, "fits": False},
                {"neededBytes": 9 * GB, "availableBytes": 6 * GB, "fits": False},
            ]
        }
    }
    assert shortfall("model_does_not_fit", fit) == 3 * GB  # room on one GPU is enough
    assert shortfall("insufficient_host_memory", {}) is None
    assert shortfall("insufficient_gpu_memory", {"requiredBytesPerGpu": 0}) is None


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"modelPath": "m", "warmup": True}, "warmup"),
        ({"modelPath": "m", "sleepLevel": 1, "warmupPrompt": "hi"}, "warmupPrompt"),
        ({"modelPath": "m", "sleepLevel": 1, "warmup": True, "warmupPrompt": ""}, "warmupPrompt"),
        ({"modelPath": "m", "engine": "external", "url": "http://h", "warmup": True}, "warmup"),
    ],
)
def test_a_bad_warm_up_setting_names_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(EntryInvalid) as err:
        check_entry("bad", data, EngineKind.SIM)
    assert field in str(err.value)


def test_a_warm_up_entry_is_accepted() -> None:
    data = {"modelPath": "m", "sleepLevel": 2, "warmup": True, "warmupPrompt": "Hello there"}
    entry = check_entry("ok", data, EngineKind.SIM)
    assert entry.warmup is True
    assert entry.warmup_prompt == "Hello there"
