"""What the admin API reads of the request log: entries and usage, of every pod.

A service over the proxy's ``RequestLog`` (this pod's ring and usage counters),
the request book (telemetry/requestbook.py: this pod's records and, in a
cluster, those the collector pulled from the other pods) and, when retention is
on, the database table (store/requests.py), so the routers ask one narrow
method and never reach into the proxy. The proxy's flusher hands each batch of
this pod's records here (``_ingest``); the collector hands each peer's
(``accept``). Both go to the book, and to the table with retention.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import Field

from sardeenz.domain import CamelModel
from sardeenz.proxy.reqlog import Record, RequestLog, usage_rows
from sardeenz.store.requests import RequestEntry, RequestQuery, RequestRepository
from sardeenz.telemetry.requestbook import MAX_PULL, RequestBook, UsageRows, merge_usage
from sardeenz.telemetry.traffic import Tally, by_instance


class UsageRow(CamelModel):
    key_id: str = Field(description="the API key's id; '_none' without inference keys")
    model: str = Field(description="served name ('_unknown': refused before routing)")
    requests: int
    prompt_tokens: int
    completion_tokens: int


class UsageReport(CamelModel):
    since: datetime = Field(description="the counters count from here (controller start)")
    rows: list[UsageRow] = Field(description="one per (key, model) pair")
    by_key: list[UsageRow] = Field(description="totals per key (model: '*')")
    by_model: list[UsageRow] = Field(description="totals per model (keyId: '*')")


class RequestLogInfo(CamelModel):
    size: int = Field(description="entries the in-memory ring keeps (every pod's, in a cluster)")
    retention: bool = Field(description="also kept in the database")
    max_rows: int | None = None
    pods: list[str] = Field(
        default_factory=list, description="pods with records here (empty: a single node)"
    )


def entry_of(r: Record) -> RequestEntry:
    return RequestEntry(
        id=r.id,
        request_id=r.request_id,
        at=datetime.fromtimestamp(r.at, UTC),
        model=r.model,
        instance_id=r.instance_id,
        pod=r.pod,
        entry_pod=r.entry_pod,
        status=r.status,
        latency_ms=round(r.latency * 1000, 3),
        ttft_ms=round(r.ttft * 1000, 3) if r.ttft is not None else None,
        stream=r.stream,
        key_id=r.key_id,
        prompt_tokens=r.prompt_tokens,
        completion_tokens=r.completion_tokens,
    )


class RequestHistory:
    def __init__(
        self, log: RequestLog, repo: RequestRepository | None = None, *, size: int | None = None
    ) -> None:
        self._log = log
        self._repo = repo
        self._since = datetime.fromtimestamp(time.time(), UTC)
        self.book = RequestBook(size or log.size, log.pod, log.epoch)
        log.sink = self._ingest

    async def _ingest(self, records: list[Record]) -> None:
        """This pod's drained records (the proxy's flusher calls it)."""
        kept = self.book.add_local(records)
        if self._repo is not None:
            await self._repo.add_many([entry_of(r) for r in kept])

    async def accept(self, pod: str, epoch: str, rows: list[list[Any]]) -> int:
        """A peer's records as the collector pulled them; how many were new."""
        kept = self.book.accept(pod, epoch, rows)
        if kept and self._repo is not None:
            await self._repo.add_many([entry_of(r) for r in kept])
        return len(kept)

    async def pull_answer(
        self, epoch: str, seq: int, in_flight: dict[str, int]
    ) -> dict[str, object]:
        """What this pod answers a peer's collector: its own records after ``seq``
        (all it keeps when ``epoch`` is not its own), its usage counters and in-flight."""
        await self._log.flush()
        rows = self.book.local_since(epoch, seq, MAX_PULL)
        return {
            "epoch": self.book.epoch,
            "records": rows,
            "more": len(rows) >= MAX_PULL,
            "usage": [list(r) for r in usage_rows()],
            "inFlight": in_flight,
            "version": self.pull_version(in_flight),
        }

    def pull_version(self, in_flight: Mapping[str, int]) -> str:
        """What a pull of everything would answer, in a few bytes: the same exactly while
        the answer is the same (records and usage grow with ``noted``; the requests in
        flight are digested). Heartbeats carry it, so a collector that holds this
        version has nothing to ask (cluster/observe.py)."""
        flight = orjson.dumps(sorted(in_flight.items()))
        digest = hashlib.blake2b(flight, digest_size=8).hexdigest()
        return f"{self.book.epoch}.{self._log.noted:x}.{digest}"

    async def flush(self) -> None:
        """This pod's requests noted so far, into the book (and the table)."""
        await self._log.flush()

    def info(self) -> RequestLogInfo:
        repo = self._repo
        return RequestLogInfo(
            size=self.book.size,
            retention=repo is not None,
            max_rows=repo.max_rows if repo is not None else None,
            pods=self.book.pods(),
        )

    async def list(self, query: RequestQuery, limit: int) -> list[RequestEntry]:
        """Newest first (in the order they reached this pod): from the database when
        retention is on, else from the book."""
        await self._log.flush()
        if self._repo is not None:
            return await self._repo.list(query, limit)
        return [entry_of(r) for r in self.book.records(query, limit)]

    async def answered_by_instance(self) -> dict[str, Tally]:
        """Each instance's requests among the records kept (every pod's, newest
        ``size``), this pod's latest included: what its ``ResourceMetrics`` latencies
        are read from (telemetry/resources.py)."""
        await self._log.flush()
        return by_instance(self.book.after(0))  # after record 0: every record kept

    def usage(self, pod: str | None = None) -> UsageReport:
        """Counters of every pod (since each started), or of ``pod`` only."""
        self._log.drain()
        own = self.book.pod
        parts: list[UsageRows] = []
        if pod is None or pod == own or own is None:
            parts.append(usage_rows())
        if own is not None and pod != own:
            parts.append(self.book.peer_usage(pod))
        rows = [
            UsageRow(key_id=k, model=m, requests=n, prompt_tokens=p, completion_tokens=c)
            for k, m, n, p, c in merge_usage(*parts)
        ]
        return UsageReport(
            since=self._since,
            rows=rows,
            by_key=_totals(rows, by_key=True),
            by_model=_totals(rows, by_key=False),
        )


def _totals(rows: list[UsageRow], *, by_key: bool) -> list[UsageRow]:
    sums: dict[str, list[int]] = {}
    for row in rows:
        s = sums.setdefault(row.key_id if by_key else row.model, [0, 0, 0])
        s[0] += row.requests
        s[1] += row.prompt_tokens
        s[2] += row.completion_tokens
    return [
        UsageRow(
            key_id=name if by_key else "*",
            model="*" if by_key else name,
            requests=n,
            prompt_tokens=p,
            completion_tokens=c,
        )
        for name, (n, p, c) in sorted(sums.items())
    ]
