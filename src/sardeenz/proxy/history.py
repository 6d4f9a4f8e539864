"""What the admin API reads of the request log: entries and usage.

A service over the proxy's ``RequestLog`` (the ring and the usage counters)
and, when retention is on, the database table (store/requests.py), so the
routers ask one narrow method and never reach into the proxy.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from pydantic import Field

from sardeenz.domain import CamelModel
from sardeenz.proxy.reqlog import Record, RequestLog, usage_rows
from sardeenz.store.requests import RequestEntry, RequestQuery, RequestRepository


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
    size: int = Field(description="entries the in-memory ring keeps")
    retention: bool = Field(description="also kept in the database")
    max_rows: int | None = None


def entry_of(r: Record) -> RequestEntry:
    return RequestEntry(
        id=r.id,
        request_id=r.request_id,
        at=datetime.fromtimestamp(r.at, UTC),
        model=r.model,
        instance_id=r.instance_id,
        pod=r.pod,
        status=r.status,
        latency_ms=round(r.latency * 1000, 3),
        ttft_ms=round(r.ttft * 1000, 3) if r.ttft is not None else None,
        stream=r.stream,
        key_id=r.key_id,
        prompt_tokens=r.prompt_tokens,
        completion_tokens=r.completion_tokens,
    )


class RequestHistory:
    def __init__(self, log: RequestLog, repo: RequestRepository | None = None) -> None:
        self._log = log
        self._repo = repo
        self._since = datetime.fromtimestamp(time.time(), UTC)
        if repo is not None:
            log.sink = self._write

    async def _write(self, records: list[Record]) -> None:
        assert self._repo is not None
        await self._repo.add_many([entry_of(r) for r in records])

    def info(self) -> RequestLogInfo:
        repo = self._repo
        return RequestLogInfo(
            size=self._log.size,
            retention=repo is not None,
            max_rows=repo.max_rows if repo is not None else None,
        )

    async def list(self, query: RequestQuery, limit: int) -> list[RequestEntry]:
        """Newest first: from the database when retention is on, else from the ring."""
        if self._repo is not None:
            await self._log.flush()
            return await self._repo.list(query, limit)
        return [entry_of(r) for r in self._log.records(query, limit)]

    def usage(self) -> UsageReport:
        self._log.drain()
        rows = [
            UsageRow(key_id=k, model=m, requests=n, prompt_tokens=p, completion_tokens=c)
            for k, m, n, p, c in usage_rows()
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
