"""The cluster's request log as one pod holds it: its own records and those collected.

Why a book of its own, beside the proxy's ring (proxy/reqlog.py): the ring is the
hot path's output, numbered by this process; the book is what the admin API reads,
and in a cluster it also holds every other pod's records, pulled off the hot path
by the collector (cluster/observe.py). Each record keeps the pod that ran it
(``pod``) and the pod the client sent it to (``entry_pod``); the book numbers
records in the order they arrived here (``id``, what ``beforeId`` pages by).

A request forwarded from one pod to another is recorded once, by the pod it
entered (the serving pod does not note a request that made its hop: see
reqlog.py), so nothing here needs to match two records of one request.

Pulling is incremental: every pod numbers its own records (``seq``, from 1 at
each start) under an ``epoch`` (its start, in the request ids' prefix). The
collector asks a peer for its records after ``(epoch, seq)``; ``accept`` keeps
only those past the cursor, so a repeated or overlapping answer adds nothing, and
a new epoch (the peer restarted) starts its cursor again. Usage counters arrive
the same way, one snapshot per (pod, epoch): a restarted pod's old counters stay
counted, a repeated snapshot replaces itself.

Everything runs on the event loop thread; nothing here does I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from sardeenz.proxy.reqlog import Record, matches
from sardeenz.store.requests import RequestQuery

WIRE_FIELDS: Final = (
    "seq",
    "requestId",
    "at",
    "model",
    "instanceId",
    "pod",
    "status",
    "latency",
    "ttft",
    "stream",
    "keyId",
    "promptTokens",
    "completionTokens",
)
"""A pulled record is a list of these, in this order (compact: no key per record)."""
MAX_PULL: Final = 2000
"""Records one answer carries at most; the collector asks again for the rest."""

UsageRows = list[tuple[str, str, int, int, int]]
"""(key id, model, requests, prompt tokens, completion tokens)."""


@dataclass(frozen=True, slots=True)
class Cursor:
    """How far the records of one pod have been collected."""

    epoch: str = ""
    seq: int = 0


def to_wire(r: Record) -> list[Any]:
    """A record as a pull answer carries it: numbered as on the pod it entered."""
    return [
        r.seq,
        r.request_id,
        r.at,
        r.model,
        r.instance_id,
        r.pod,
        r.status,
        r.latency,
        r.ttft,
        r.stream,
        r.key_id,
        r.prompt_tokens,
        r.completion_tokens,
    ]


def from_wire(row: list[Any], entry_pod: str) -> Record:
    """A pulled row as a ``Record`` (``id`` is the sender's ``seq`` until ``accept``)."""
    seq, rid, at, model, inst, pod, status, latency, ttft, stream, key, prompt, compl = row
    return Record(
        id=int(seq),
        request_id=str(rid),
        at=float(at),
        model=str(model),
        instance_id=inst,
        pod=pod,
        status=int(status),
        latency=float(latency),
        ttft=float(ttft) if ttft is not None else None,
        stream=bool(stream),
        key_id=key,
        prompt_tokens=prompt,
        completion_tokens=compl,
        entry_pod=entry_pod,
        seq=int(seq),
    )


@dataclass
class _Origin:
    """What the book knows of one pod's records and counters."""

    cursor: Cursor = field(default_factory=Cursor)
    usage: dict[str, UsageRows] = field(default_factory=dict)
    """epoch -> the newest usage snapshot of that run of the pod."""
    in_flight: dict[str, int] = field(default_factory=dict)


class RequestBook:
    """A bounded ring of every pod's records, in arrival order; see module doc."""

    def __init__(self, size: int, pod: str | None, epoch: str) -> None:
        self._ring: deque[Record] = deque(maxlen=max(1, size))
        self._next_id = 1
        self.pod = pod
        """This pod's id (None: a single node)."""
        self.epoch = epoch
        self._origins: dict[str, _Origin] = {}

    @property
    def size(self) -> int:
        return self._ring.maxlen or 0

    @property
    def newest_id(self) -> int:
        return self._next_id - 1

    # ------------------------------------------------------------- arriving
    def add_local(self, records: Iterable[Record]) -> list[Record]:
        """This pod's records (drained from the proxy's ring), numbered by the book."""
        out = []
        for r in records:
            r.seq = r.id
            r.entry_pod = self.pod
            out.append(self._keep(r))
        return out

    def accept(self, pod: str, epoch: str, rows: list[list[Any]]) -> list[Record]:
        """A peer's answer to a pull: the records past its cursor, numbered by the book.

        A new ``epoch`` (the peer restarted) starts its cursor from 0. Rows at or
        before the cursor (an answer repeated after a timeout) are dropped.
        """
        origin = self._origins.setdefault(pod, _Origin())
        if origin.cursor.epoch != epoch:
            origin.cursor = Cursor(epoch, 0)
        last = origin.cursor.seq
        out = []
        for row in rows:
            if len(row) != len(WIRE_FIELDS) or not isinstance(row[0], int) or row[0] <= last:
                continue
            last = row[0]
            out.append(self._keep(from_wire(row, pod)))
        origin.cursor = Cursor(epoch, last)
        return out

    def cursor(self, pod: str) -> Cursor:
        origin = self._origins.get(pod)
        return origin.cursor if origin is not None else Cursor()

    def set_usage(self, pod: str, epoch: str, rows: UsageRows, in_flight: dict[str, int]) -> None:
        origin = self._origins.setdefault(pod, _Origin())
        origin.usage[epoch] = rows
        origin.in_flight = in_flight

    def forget_in_flight(self, pod: str) -> None:
        """A pod that does not answer has nothing in flight we could vouch for."""
        origin = self._origins.get(pod)
        if origin is not None:
            origin.in_flight = {}

    def _keep(self, r: Record) -> Record:
        r.id = self._next_id
        self._next_id += 1
        self._ring.append(r)
        return r

    # ---------------------------------------------------------------- reading
    def local_since(self, epoch: str, seq: int, limit: int = MAX_PULL) -> list[list[Any]]:
        """This pod's own records after ``seq`` (all kept ones if ``epoch`` is not ours),
        oldest first, at most ``limit``: what a peer's collector pulls."""
        after = seq if epoch == self.epoch else 0
        mine: list[Record] = []
        for r in reversed(self._ring):
            if r.entry_pod != self.pod:
                continue
            if r.seq <= after:
                break
            mine.append(r)
        mine.reverse()
        return [to_wire(r) for r in mine[:limit]]

    def after(self, book_id: int) -> Iterator[Record]:
        """Records that arrived after ``book_id``, oldest first (what the charts sample)."""
        newer: list[Record] = []
        for r in reversed(self._ring):
            if r.id <= book_id:
                break
            newer.append(r)
        return reversed(newer)

    def records(self, query: RequestQuery, limit: int) -> list[Record]:
        """Newest first, filtered."""
        out: list[Record] = []
        for r in reversed(self._ring):
            if matches(query, r):
                out.append(r)
                if len(out) >= limit:
                    break
        return out

    def peer_usage(self, pod: str | None = None) -> UsageRows:
        """The other pods' counters (or ``pod``'s), every run of each, summed by (key, model).

        A pod counts the requests that entered it, so the sum counts each request once."""
        return merge_usage(
            *(
                rows
                for name, origin in self._origins.items()
                if name != self.pod and (pod is None or name == pod)
                for rows in origin.usage.values()
            )
        )

    def peer_in_flight(self) -> dict[str, dict[str, int]]:
        """pod -> model -> requests in flight, as each peer last said."""
        return {pod: dict(o.in_flight) for pod, o in self._origins.items() if pod != self.pod}

    def pods(self) -> list[str]:
        """Every pod the book has records or counters of (this one included)."""
        names = {r.pod for r in self._ring if r.pod} | set(self._origins)
        if self.pod:
            names.add(self.pod)
        return sorted(names)


def merge_usage(*parts: UsageRows) -> UsageRows:
    sums: dict[tuple[str, str], list[int]] = {}
    for rows in parts:
        for key, model, n, p, c in rows:
            s = sums.setdefault((key, model), [0, 0, 0])
            s[0] += n
            s[1] += p
            s[2] += c
    return [(k, m, v[0], v[1], v[2]) for (k, m), v in sorted(sums.items())]
