"""Profile reconciliation's merge (cluster/profile_sync.py): dedup, newest wins, counts kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sardeenz.cluster.profile_sync import _older, _PodSync, merge_profiles
from sardeenz.store.records import MemoryProfile

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def prof(
    pid: str,
    model: str = "m",
    tokens: int = 4096,
    gpu: str | None = "NVIDIA L4",
    minutes: int = 0,
    updated: int | None = None,
) -> MemoryProfile:
    return MemoryProfile(
        id=pid,
        profile_name=pid,
        model_path=model,
        max_tokens=tokens,
        total_gpu_memory_gib=10,
        weights_memory_gib=8,
        cuda_graphs_gib=0,
        overhead_memory_gib=1,
        kv_cache_available_gib=1,
        gpu_name=gpu,
        created_at=T0 + timedelta(minutes=minutes),
        updated_at=None if updated is None else T0 + timedelta(minutes=updated),
    )


def test_newest_measurement_wins_and_counts_are_kept() -> None:
    merged = merge_profiles(
        {
            "pod-a": [prof("p1", minutes=1), prof("other", model="n")],
            "pod-b": [prof("p2", minutes=5), prof("p1", minutes=1)],  # p1 again: one measurement
            "pod-c": [prof("p3", minutes=3, updated=9)],  # updated last: newest
        }
    )
    by_model = {m.profile.model_path: m for m in merged}
    assert set(by_model) == {"m", "n"}
    assert by_model["m"].profile.id == "p3"
    assert by_model["m"].count == 3
    assert by_model["m"].pods == ("pod-a", "pod-b", "pod-c")
    assert (by_model["n"].count, by_model["n"].pods) == (1, ("pod-a",))


def test_model_length_and_gpu_type_are_the_key() -> None:
    merged = merge_profiles(
        {
            "pod-a": [
                prof("a", tokens=4096),
                prof("b", tokens=8192),
                prof("c", gpu="Tesla T4"),
                prof("d", gpu=None),
            ]
        }
    )
    assert sorted(m.profile.id for m in merged) == ["a", "b", "c", "d"]
    assert all(m.count == 1 for m in merged)


def test_same_inputs_same_set_whatever_the_order() -> None:
    a = {"pod-a": [prof("x", minutes=2)], "pod-b": [prof("y", minutes=2)]}  # a tie: larger id
    b = {"pod-b": [prof("y", minutes=2)], "pod-a": [prof("x", minutes=2)]}
    assert merge_profiles(a) == merge_profiles(b)
    assert merge_profiles(a)[0].profile.id == "y"
    assert merge_profiles({}) == []


def test_an_older_heartbeat_version_is_not_new() -> None:
    state = _PodSync(version="tok:5")
    assert _older("tok:4", state)
    assert not _older("tok:6", state)
    assert not _older("other:1", state)  # restarted pod: new token
    assert not _older("tok:4", _PodSync())
