"""The request book's pure parts: cursors, dedup, a restarted pod's epoch, usage sums,
and the collector's backoff."""

from __future__ import annotations

from typing import Any

import pytest

from sardeenz.cluster.observe import QUIET_PULL_SECONDS, Backoff, pull_due
from sardeenz.proxy.history import RequestHistory
from sardeenz.proxy.reqlog import Record, RequestLog
from sardeenz.store.requests import RequestQuery
from sardeenz.telemetry.requestbook import RequestBook, to_wire
from tests.unit.test_request_log import pending


def record(seq: int, *, pod: str = "pod-b", model: str = "m") -> Record:
    return Record(
        seq=seq,
        id=seq,
        request_id=f"e-{seq:x}",
        at=1000.0 + seq,
        model=model,
        instance_id="i-1",
        pod=pod,
        status=200,
        latency=0.1,
        ttft=None,
        stream=False,
        key_id=None,
        prompt_tokens=3,
        completion_tokens=4,
    )


def rows(*seqs: int, pod: str = "pod-b") -> list[list[Any]]:
    return [to_wire(record(s, pod=pod)) for s in seqs]


def test_a_pull_adds_only_what_is_past_the_cursor() -> None:
    book = RequestBook(100, "pod-a", "e1")
    assert [r.seq for r in book.accept("pod-b", "e9", rows(1, 2, 3))] == [1, 2, 3]
    assert book.cursor("pod-b").seq == 3
    # the same answer again (a retry after a timeout), and an overlapping one
    assert book.accept("pod-b", "e9", rows(1, 2, 3)) == []
    assert [r.seq for r in book.accept("pod-b", "e9", rows(2, 3, 4))] == [4]
    kept = book.records(RequestQuery(), 100)
    assert [r.seq for r in kept] == [4, 3, 2, 1]
    assert [r.id for r in kept] == [4, 3, 2, 1]  # numbered by the book, newest first
    assert {r.entry_pod for r in kept} == {"pod-b"}


def test_a_restarted_pod_starts_a_new_cursor() -> None:
    book = RequestBook(100, "pod-a", "e1")
    book.accept("pod-b", "old", rows(1, 2, 3, 4, 5))
    # pod-b restarted: its numbers start from 1 again under a new epoch
    assert [r.seq for r in book.accept("pod-b", "new", rows(1, 2))] == [1, 2]
    assert book.cursor("pod-b").epoch == "new"
    assert len(book.records(RequestQuery(), 100)) == 7


def test_malformed_rows_are_skipped() -> None:
    book = RequestBook(100, "pod-a", "e1")
    good = rows(1)[0]
    assert [r.seq for r in book.accept("pod-b", "e", [good[:5], ["x", *good[1:]], good])] == [1]


def test_local_records_are_served_after_the_askers_cursor() -> None:
    book = RequestBook(100, "pod-a", "e1")
    book.add_local([record(1, pod="pod-a"), record(2, pod="pod-a")])
    book.accept("pod-c", "e7", rows(1, pod="pod-c"))  # someone else's: never served on
    book.add_local([record(3, pod="pod-b")])  # ran on pod-b, entered here: ours to serve
    assert [r[0] for r in book.local_since("e1", 0)] == [1, 2, 3]
    assert [r[0] for r in book.local_since("e1", 2)] == [3]
    assert book.local_since("e1", 3) == []
    # an asker holding another epoch (we restarted) gets everything we keep
    assert [r[0] for r in book.local_since("old", 3)] == [1, 2, 3]
    assert [r[0] for r in book.local_since("e1", 0, limit=2)] == [1, 2]


def test_the_ring_is_bounded_and_filters_by_pod() -> None:
    book = RequestBook(3, "pod-a", "e1")
    book.add_local([record(1, pod="pod-a")])
    book.accept("pod-b", "e", rows(1, 2, 3))
    assert len(book.records(RequestQuery(), 100)) == 3
    assert [r.pod for r in book.records(RequestQuery(pod="pod-b"), 100)] == ["pod-b"] * 3
    assert book.records(RequestQuery(pod="pod-a"), 100) == []
    assert book.records(RequestQuery(entry_pod="pod-b"), 1)[0].seq == 3


def test_usage_sums_every_run_of_every_other_pod() -> None:
    book = RequestBook(10, "pod-a", "e1")
    book.set_usage("pod-b", "run1", [("k", "m", 5, 50, 10)], {"m": 1})
    book.set_usage("pod-b", "run1", [("k", "m", 7, 70, 14)], {"m": 2})  # newer snapshot
    book.set_usage("pod-b", "run2", [("k", "m", 1, 10, 2)], {})  # it restarted
    book.set_usage("pod-c", "x", [("k", "m", 2, 0, 0), ("j", "m", 1, 0, 0)], {"m": 3})
    book.set_usage("pod-a", "e1", [("k", "m", 100, 0, 0)], {})  # our own: never from the book
    assert book.peer_usage() == [("j", "m", 1, 0, 0), ("k", "m", 10, 80, 16)]
    assert book.peer_usage("pod-b") == [("k", "m", 8, 80, 16)]
    assert book.peer_in_flight() == {"pod-b": {}, "pod-c": {"m": 3}}
    book.forget_in_flight("pod-c")
    assert book.peer_in_flight()["pod-c"] == {}


def test_backoff_doubles_up_to_the_cap_and_resets() -> None:
    b = Backoff(2.0, cap=10.0)
    assert b.due("p", 0.0)
    assert [b.failed("p", 0.0) for _ in range(4)] == [2.0, 4.0, 8.0, 10.0]
    assert not b.due("p", 9.9)
    assert b.due("p", 10.0)
    b.ok("p")
    assert b.due("p", 0.0)
    assert b.failed("p", 0.0) == pytest.approx(2.0)


def test_a_pod_is_pulled_when_its_heartbeat_says_the_answer_changed() -> None:
    """``pull_due``: the collector's rule (cluster/observe.py)."""
    assert pull_due("v1", None, float("inf"), 2.0)  # never pulled
    assert not pull_due("v1", "v1", 5.0, 2.0)  # holds what a pull would answer
    assert pull_due("v2", "v1", 2.0, 2.0)  # something new
    assert not pull_due("v2", "v1", 1.9, 2.0)  # but not twice within an interval
    assert pull_due(None, "v1", 2.0, 2.0)  # an older pod: every interval
    assert pull_due("v1", None, 2.0, 2.0)  # the last answer had more to come
    assert pull_due("v1", "v1", QUIET_PULL_SECONDS, 2.0)  # and every pod now and then


async def test_the_pull_version_changes_exactly_when_the_answer_does() -> None:
    """Equal versions, equal answers: a record (noted, not yet drained), a change of the
    requests in flight; the same state again gives the same version, which is what the
    answer carries."""
    log = RequestLog(size=10, pod="pod-b")
    history = RequestHistory(log)
    idle = history.pull_version({})
    assert history.pull_version({}) == idle
    busy = history.pull_version({"m1": 1})
    assert busy != idle
    assert history.pull_version({"m1": 2}) not in (idle, busy)
    assert history.pull_version({"m1": 1}) == busy
    log.note(pending())
    noted = history.pull_version({})
    assert noted != idle  # before the flusher drained it
    answer = await history.pull_answer("", 0, {})
    assert answer["version"] == noted
    records = answer["records"]
    assert isinstance(records, list)
    assert len(records) == 1
    assert history.pull_version({}) == noted
    other = RequestHistory(RequestLog(size=10, pod="pod-b"))
    other.book.epoch = "restarted"
    assert other.pull_version({}) != idle  # a restarted pod (new epoch) is pulled again
