"""The request log's pure parts: usage from response tails, the ring, filters, counters,
retention batches and its table's bound, and the inference keys file."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest

from sardeenz.proxy import reqlog
from sardeenz.proxy.history import RequestHistory
from sardeenz.proxy.reqlog import NO_KEY, Pending, Record, RequestLog, usage_tokens
from sardeenz.proxy.routing import Endpoint
from sardeenz.security.auth import ApiKey, ApiKeys, read_keys_file
from sardeenz.store.db import Database
from sardeenz.store.requests import RequestQuery, RequestRepository, valid_status

EP = Endpoint("inst-1", "m1", "127.0.0.1", 9000, "http://127.0.0.1:9000")
REMOTE = Endpoint(
    "pod-b/inst-9", "m1", "10.0.0.2", 3000, "http://10.0.0.2:3000", local=False, pod_id="pod-b"
)

JSON_BODY = (
    b'{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":'
    b'{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":12,"total_tokens":19,'
    b'"completion_tokens":7,"prompt_tokens_details":null},"prompt_logprobs":null}'
)
USAGE_CHUNK = (
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[],'
    b'"usage":{"prompt_tokens":3,"total_tokens":8,"completion_tokens":5}}\n\n'
)


def pending(
    status: int = 200,
    *,
    model: str = "m1",
    asked: str | None = None,
    ep: Endpoint | None = EP,
    key: str | None = "team-a",
    stream: bool = False,
    ttfb: float = 0.01,
    at: float | None = None,
    last: bytes = JSON_BODY,
    prev: bytes = b"",
) -> Pending:
    """What the relay paths note (see express.py ``_end``)."""
    return (
        time.time() if at is None else at,
        model,
        asked,
        ep.instance_id if ep is not None else None,
        ep.pod_id if ep is not None else None,
        status,
        0.05,
        ttfb,
        stream,
        key,
        last,
        prev,
    )


@pytest.fixture(autouse=True)
def fresh_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reqlog, "_usage", {})


def test_usage_is_read_from_the_tail_of_a_body_or_a_stream() -> None:
    assert usage_tokens(JSON_BODY) == (12, 7)
    # The usage chunk in the read before [DONE]: the earlier tail is looked at too.
    assert usage_tokens(b"data: [DONE]\n\n", USAGE_CHUNK) == (3, 5)
    assert usage_tokens(USAGE_CHUNK + b"data: [DONE]\n\n") == (3, 5)
    # No usage asked for, or a null one: unknown, never zero.
    assert usage_tokens(b'data: {"choices":[{"delta":{}}]}\n\ndata: [DONE]\n\n') == (None, None)
    assert usage_tokens(b'{"usage":null}') == (None, None)
    # Per-chunk usage (continuous stats): the last one counts.
    two = USAGE_CHUNK.replace(b":5}", b":1}") + USAGE_CHUNK
    assert usage_tokens(two) == (3, 5)
    # Spaced JSON, another field order, no completion (embeddings).
    assert usage_tokens(b'"usage": {"completion_tokens": 9, "prompt_tokens": 4}}') == (4, 9)
    assert usage_tokens(b'"usage":{"prompt_tokens":6,"total_tokens":6}}') == (6, None)


def test_the_ring_keeps_the_newest_entries_only() -> None:
    log = RequestLog(size=3, pod="node-1")
    for _ in range(5):
        log.note(pending())
    records = log.records(RequestQuery(), limit=100)
    assert [r.id for r in records] == [5, 4, 3]
    assert log.size == 3


def test_a_record_has_what_the_relay_saw() -> None:
    log = RequestLog(size=10, pod="node-1")
    log.note(pending())
    log.note(pending(stream=True, ttfb=0.02, last=b"data: [DONE]\n\n", prev=USAGE_CHUNK))
    log.note(pending(ep=REMOTE, key=None, status=502))
    log.note(pending(status=403, model="_unknown", asked="other-model", ep=None, last=b""))
    remote, stream, plain = log.records(RequestQuery(), 10)[1:]
    assert plain.id == 1
    assert (plain.model, plain.instance_id, plain.pod, plain.key_id) == (
        "m1",
        "inst-1",
        "node-1",
        "team-a",
    )
    assert (plain.prompt_tokens, plain.completion_tokens, plain.ttft) == (12, 7, None)
    assert stream.ttft == 0.02
    assert (stream.prompt_tokens, stream.completion_tokens) == (3, 5)
    assert stream.request_id != plain.request_id
    # the pod that ran it, and its instance as that pod names it
    assert (remote.pod, remote.instance_id) == ("pod-b", "inst-9")
    assert remote.prompt_tokens is None  # an error: its body is not searched
    refused = log.records(RequestQuery(status="403"), 1)[0]
    assert (refused.model, refused.instance_id) == ("other-model", None)
    # The responses' tails were only read for usage: the ring keeps no body bytes.
    assert not any(isinstance(field, bytes) for entry in log._ring for field in entry)


def test_filters() -> None:
    log = RequestLog(size=50)
    now = time.time()
    log.note(pending(at=now - 100, key="a"))
    log.note(pending(status=404, model="_unknown", asked="x", ep=None, key="b"))
    log.note(pending(status=503, model="m2", key="b"))
    log.note(pending(status=200, model="m2", key=None))

    def ids(**kw: object) -> list[int]:
        return [r.id for r in log.records(RequestQuery.model_validate(kw), 50)]

    assert ids(model="m2") == [4, 3]
    assert ids(key="b") == [3, 2]
    assert ids(status="error") == [3, 2]
    assert ids(status="5xx") == [3]
    assert ids(status="200") == [4, 1]
    assert ids(since=now - 10) == [4, 3, 2]
    assert ids(before_id=3) == [2, 1]
    assert [r.id for r in log.records(RequestQuery(), 2)] == [4, 3]
    for text in ("200", "5xx", "error"):
        assert valid_status(text)
    for text in ("2x0", "99", "6xx", "abc", "\uff12\uff10\uff10"):
        assert not valid_status(text)


def test_usage_counts_requests_and_tokens_per_key_and_model() -> None:
    log = RequestLog(size=2)  # the counters do not depend on the ring's size
    for _ in range(3):
        log.note(pending(key="a"))
    log.note(pending(key=None, model="m2", stream=True, last=b"data: [DONE]\n\n"))
    log.note(pending(status=403, key="a", model="_unknown", asked="m9", ep=None))
    log.drain()
    assert reqlog.usage_rows() == [
        (NO_KEY, "m2", 1, 0, 0),
        ("a", "_unknown", 1, 0, 0),
        ("a", "m1", 3, 36, 21),
    ]
    report = RequestHistory(log).usage()
    assert [(r.key_id, r.requests, r.prompt_tokens) for r in report.by_key] == [
        (NO_KEY, 1, 0),
        ("a", 4, 36),
    ]
    assert [(r.model, r.requests) for r in report.by_model] == [
        ("_unknown", 1),
        ("m1", 3),
        ("m2", 1),
    ]


async def test_retention_writes_batches_and_keeps_the_table_bounded(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    await db.migrate()
    try:
        repo = RequestRepository(db, max_rows=100)
        log = RequestLog(size=10)
        history = RequestHistory(log, repo)
        for i in range(130):
            log.note(pending(key="a" if i % 2 else "b", at=1000.0 + i))
        await log.flush()
        assert await repo.count() == 100
        newest = await history.list(RequestQuery(key="a"), 3)
        assert [e.at.timestamp() for e in newest] == [1129.0, 1127.0, 1125.0]
        assert newest[0].prompt_tokens == 12
        assert newest[0].latency_ms == pytest.approx(50)
        assert history.info().retention is True
        assert [e.key_id for e in await history.list(RequestQuery(status="2xx"), 200)].count(
            "b"
        ) == 50
    finally:
        await db.close()


async def test_a_failing_sink_never_breaks_the_log() -> None:
    log = RequestLog(size=5)

    async def broken(records: list[Record]) -> None:
        raise OSError("disk full")

    log.sink = broken
    log.note(pending())
    await log.flush()  # logged, not raised
    assert len(log.records(RequestQuery(), 5)) == 1


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_keys_file_ids_and_model_scopes(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(
        "# digest id models\n"
        f"{_digest('k1')} team-a llama,qwen\n"
        f"sha256:{_digest('k2')} ops *   # every model\n"
        f"{_digest('k3')}\n"
    )
    keys = ApiKeys(read_keys_file(path))
    a = keys.identify(b"Bearer k1")
    assert a == ApiKey("team-a", frozenset({"llama", "qwen"}))
    assert a.allows("llama")
    assert not a.allows("mistral")
    ops = keys.identify(b"bearer k2")
    assert ops is not None
    assert ops.models is None
    assert ops.allows("anything")
    anon = keys.identify(b"Bearer k3")
    assert anon is not None
    assert anon.id == f"key-{_digest('k3')[:8]}"
    assert keys.identify(b"Bearer wrong") is None
    assert keys.identify(None) is None
    assert keys.check(b"Bearer k2")
    assert not keys.check(b"Basic k2")
    assert keys.ids == ["team-a", "ops", anon.id]


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("nothex team", "not a SHA-256"),
        (f"{_digest('x')} a b c", "expected"),
        (f"{_digest('x')} bad/id", "key id"),
        (f"{_digest('x')} a ,", "empty model list"),
        (f"{_digest('x')} dup\n{_digest('y')} dup", "used twice"),
    ],
)
def test_keys_file_errors_name_the_line(tmp_path: Path, line: str, error: str) -> None:
    path = tmp_path / "keys"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=error):
        read_keys_file(path)


def _sqlite_full_error(path: Path) -> sqlite3.OperationalError:
    """SQLite's own "database or disk is full", from a database capped at its size."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE t (v TEXT)")
        conn.commit()
        conn.execute(f"PRAGMA max_page_count={conn.execute('PRAGMA page_count').fetchone()[0]}")
        with pytest.raises(sqlite3.OperationalError) as full:
            conn.executemany("INSERT INTO t VALUES (?)", [("x" * 4000,)] * 10)
        return full.value
    finally:
        conn.close()


async def test_a_full_disk_keeps_the_newest_entries_until_there_is_room(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    await db.migrate()
    try:
        repo = RequestRepository(db, max_rows=100)
        error = _sqlite_full_error(tmp_path / "capped.db")
        room = False
        log = RequestLog(size=5)
        RequestHistory(log, repo)  # its sink writes the batches into repo
        ingest = log.sink
        assert ingest is not None

        async def sink(records: list[Record]) -> None:
            if not room:
                raise error
            await ingest(records)

        log.sink = sink
        for i in range(3):
            log.note(pending(at=1000.0 + i))
        await log.flush()
        for i in range(3, 8):
            log.note(pending(at=1000.0 + i))
        await log.flush()
        assert await repo.count() == 0
        room = True
        await log.flush()
        # The newest `size` entries were kept through the outage, and written once.
        stored = await repo.list(RequestQuery(), 100)
        assert sorted(e.at.timestamp() for e in stored) == [1003.0 + i for i in range(5)]
        await log.flush()
        assert await repo.count() == 5
    finally:
        await db.close()
