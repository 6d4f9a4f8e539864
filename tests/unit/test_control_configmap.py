"""cluster/control_configmap.py: the control documents as ConfigMaps (size limit,
corrupt data) and the bounded retry on 409 Conflict."""

from __future__ import annotations

import json

import pytest

from sardeenz.cluster.control_configmap import (
    MAX_DATA_BYTES,
    ConflictRetries,
    CorruptDocument,
    WriteConflict,
    data_bytes,
    decode,
    encode,
    key_of,
    name_of,
    retry_on_conflict,
)
from sardeenz.cluster.replicated import KEYS, Document
from sardeenz.errors import Conflict, PayloadTooLarge


def as_served(manifest: dict[str, object], version: str = "7") -> dict[str, object]:
    """What the API server answers for ``manifest`` (its resourceVersion set)."""
    meta = dict(manifest["metadata"])  # type: ignore[call-overload]
    meta["resourceVersion"] = version
    return {**manifest, "metadata": meta}


def test_a_document_survives_the_round_trip() -> None:
    doc = Document("catalog", 3, 12, {"a": {"modelPath": "/m/a", "extraArgs": ["--x"]}})
    manifest = encode(doc, None)
    assert manifest["metadata"]["name"] == "sardeenz-control-catalog"
    assert "resourceVersion" not in manifest["metadata"]  # a create
    stored = decode(as_served(manifest, "41"))
    assert stored is not None
    assert stored.doc == doc
    assert stored.resource_version == "41"
    assert encode(doc, "41")["metadata"]["resourceVersion"] == "41"  # an update names it


def test_names_map_to_the_three_keys_only() -> None:
    assert [key_of(name_of(k)) for k in KEYS] == list(KEYS)
    assert key_of("sardeenz-control-other") is None
    assert key_of("presets") is None
    assert decode({"metadata": {"name": "sardeenz-control-other"}, "data": {}}) is None


def test_a_document_too_large_for_a_configmap_is_refused_with_413() -> None:
    fits = Document("catalog", 1, 1, "x" * (MAX_DATA_BYTES - 200))
    assert data_bytes(encode(fits, None)["data"]) <= MAX_DATA_BYTES
    big = Document("catalog", 1, 1, {"e": "é" * (MAX_DATA_BYTES // 2)})  # 2 bytes a char
    with pytest.raises(PayloadTooLarge) as refused:
        encode(big, None)
    assert refused.value.code == "control_document_too_large"
    assert str(MAX_DATA_BYTES) in refused.value.message


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"term": "1", "revision": "2", "body": "{not json"}, "not JSON"),
        ({"term": "x", "revision": "2", "body": "{}"}, "integers"),
        ({"term": "1", "revision": "-1", "body": "{}"}, ">= 0"),
        ({"term": "1", "revision": "2"}, "missing"),
        ({}, "integers"),
    ],
)
def test_corrupt_data_is_named_not_a_crash(data: dict[str, str], says: str) -> None:
    obj = {"metadata": {"name": "sardeenz-control-presets", "resourceVersion": "3"}, "data": data}
    with pytest.raises(CorruptDocument) as corrupt:
        decode(obj)
    assert corrupt.value.name == "sardeenz-control-presets"
    assert says in str(corrupt.value)


def test_the_body_is_compact_sorted_json() -> None:
    body = encode(Document("moves", 1, 1, {"b": 1, "a": [1, 2]}), None)["data"]["body"]
    assert body == '{"a":[1,2],"b":1}'
    assert json.loads(body) == {"b": 1, "a": [1, 2]}


# --- retry on 409 -----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


async def test_a_conflict_is_retried_against_a_fresh_read_until_it_lands() -> None:
    """Two writers, one stored value: each attempt re-reads and applies its change to
    what it read, so a write that lost the race still lands, on top of the other."""
    store = {"version": 1, "entries": {"theirs": 1}}
    seen_versions: list[int] = []
    conflicts = 2

    async def attempt(n: int) -> int:
        nonlocal conflicts
        read_version = store["version"]
        seen_versions.append(read_version)  # type: ignore[arg-type]
        if conflicts:  # another writer got there first
            conflicts -= 1
            store["version"] = read_version + 1  # type: ignore[operator]
            raise WriteConflict("catalog")
        store["entries"] = {**store["entries"], "mine": 2}  # type: ignore[dict-item]
        store["version"] = read_version + 1  # type: ignore[operator]
        return n

    clock = Clock()
    landed = await retry_on_conflict(
        attempt, "catalog", ConflictRetries(5, 0.1, 1.0), clock.sleep, lambda: 0.5
    )
    assert landed == 2
    assert seen_versions == [1, 2, 3]  # each attempt read what the previous lost to
    assert store["entries"] == {"theirs": 1, "mine": 2}
    assert clock.slept == [0.1, 0.2]  # doubling, jitter 0.5 -> x1.0


async def test_conflicts_without_end_are_a_clear_409_after_a_bounded_number() -> None:
    attempts: list[int] = []

    async def attempt(n: int) -> None:
        attempts.append(n)
        raise WriteConflict("presets")

    clock = Clock()
    with pytest.raises(Conflict) as lost:
        await retry_on_conflict(
            attempt,
            "the cluster's presets",
            ConflictRetries(4, 0.1, 0.25),
            clock.sleep,
            lambda: 0.5,
        )
    assert lost.value.code == "control_write_conflict"
    assert "the cluster's presets" in lost.value.message
    assert attempts == [0, 1, 2, 3]
    assert clock.slept == [0.1, 0.2, 0.25]  # capped at ``most``


async def test_other_errors_are_not_retried() -> None:
    calls = 0

    async def attempt(n: int) -> None:
        nonlocal calls
        calls += 1
        raise PayloadTooLarge("too big", code="control_document_too_large")

    with pytest.raises(PayloadTooLarge):
        await retry_on_conflict(attempt, "catalog", ConflictRetries(), Clock().sleep)
    assert calls == 1


def test_backoff_delays_grow_and_are_spread() -> None:
    b = ConflictRetries(6, 0.05, 1.0)
    assert [b.delay(n, 0.5) for n in range(1, 7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
    assert b.delay(1, 0.0) == 0.025
    assert b.delay(1, 0.999) == pytest.approx(0.07495)
