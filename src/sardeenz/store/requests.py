"""The request log's schema and its optional retention in the database.

The proxy keeps the log in a ring (proxy/reqlog.py); with
``SARDEENZ_REQUEST_LOG_RETENTION`` on, its flusher hands batches here, written
in one transaction per batch and trimmed to ``request_log_max_rows`` (the oldest
rows go first), so the table stays bounded however long the node runs.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import sqlalchemy as sa
from pydantic import Field

from sardeenz.domain import CamelModel
from sardeenz.store.db import Database
from sardeenz.store.schema import request_log


class RequestEntry(CamelModel):
    """One finished ``/v1`` request. Never its body, never the API key itself."""

    id: int
    request_id: str = Field(description="the client's X-Request-Id, else one of ours")
    at: datetime = Field(description="when the request ended")
    model: str = Field(description="the served model (or the name asked for, if refused)")
    instance_id: str | None = Field(None, description="the instance that answered")
    pod: str | None = Field(
        None, description="the pod that ran it (refused: the pod that answered); null: single node"
    )
    entry_pod: str | None = Field(
        None, description="the pod the client sent it to (differs from pod when forwarded)"
    )
    status: int = Field(description="HTTP status sent (499: the client left first)")
    latency_ms: float
    ttft_ms: float | None = Field(None, description="streams: time to the first body byte")
    stream: bool
    key_id: str | None = Field(None, description="the inference API key's id (never the key)")
    prompt_tokens: int | None = Field(None, description="from the engine's usage, if sent")
    completion_tokens: int | None = None


class RequestQuery(CamelModel):
    """Filters shared by the ring and the table (see ``GET /api/v1/requests``)."""

    model: str | None = None
    status: str | None = None
    """An exact status (``"200"``), a class (``"5xx"``) or ``"error"`` (400 and up)."""
    key: str | None = None
    pod: str | None = None
    """The pod that ran it (refused requests: the pod that refused them)."""
    entry_pod: str | None = None
    """The pod the client sent it to."""
    since: float | None = None
    """Unix seconds: entries that ended at or after it."""
    before_id: int | None = None


_STATUS = re.compile(r"error|[1-5]xx|[1-5][0-9][0-9]")


def valid_status(text: str) -> bool:
    """Is ``text`` a status filter: ``200``, ``5xx`` or ``error``?"""
    return _STATUS.fullmatch(text) is not None


def status_matches(text: str, status: int) -> bool:
    if text == "error":
        return status >= 400
    if text.endswith("xx"):
        return status // 100 == int(text[0])
    return status == int(text)


def _row(entry: RequestEntry) -> dict[str, object]:
    return {
        "request_id": entry.request_id,
        "at": entry.at.timestamp(),
        "model": entry.model,
        "instance_id": entry.instance_id,
        "pod": entry.pod,
        "entry_pod": entry.entry_pod,
        "status": entry.status,
        "latency": entry.latency_ms / 1000,
        "ttft": entry.ttft_ms / 1000 if entry.ttft_ms is not None else None,
        "stream": entry.stream,
        "key_id": entry.key_id,
        "prompt_tokens": entry.prompt_tokens,
        "completion_tokens": entry.completion_tokens,
    }


class RequestRepository:
    def __init__(self, db: Database, max_rows: int) -> None:
        self._db = db
        self.max_rows = max_rows

    async def add_many(self, entries: list[RequestEntry]) -> None:
        """One batch in one transaction, then the oldest rows beyond ``max_rows`` go."""
        if not entries:
            return
        async with self._db.engine.begin() as conn:
            await conn.execute(request_log.insert(), [_row(e) for e in entries])
            newest = (await conn.execute(sa.select(sa.func.max(request_log.c.id)))).scalar()
            if newest is not None and newest > self.max_rows:
                await conn.execute(
                    request_log.delete().where(request_log.c.id <= newest - self.max_rows)
                )

    async def list(self, query: RequestQuery, limit: int) -> list[RequestEntry]:
        """Newest first."""
        c = request_log.c
        stmt = sa.select(request_log).order_by(c.id.desc()).limit(limit)
        if query.model is not None:
            stmt = stmt.where(c.model == query.model)
        if query.key is not None:
            stmt = stmt.where(c.key_id == query.key)
        if query.pod is not None:
            stmt = stmt.where(c.pod == query.pod)
        if query.entry_pod is not None:
            stmt = stmt.where(c.entry_pod == query.entry_pod)
        if query.since is not None:
            stmt = stmt.where(c.at >= query.since)
        if query.before_id is not None:
            stmt = stmt.where(c.id < query.before_id)
        if query.status is not None:
            text = query.status
            if text == "error":
                stmt = stmt.where(c.status >= 400)
            elif text.endswith("xx"):
                low = int(text[0]) * 100
                stmt = stmt.where(c.status >= low, c.status < low + 100)
            else:
                stmt = stmt.where(c.status == int(text))
        async with self._db.engine.connect() as conn:
            rows = (await conn.execute(stmt)).mappings().all()
        return [
            RequestEntry(
                id=row["id"],
                request_id=row["request_id"],
                at=datetime.fromtimestamp(row["at"], UTC),
                model=row["model"],
                instance_id=row["instance_id"],
                pod=row["pod"],
                entry_pod=row["entry_pod"],
                status=row["status"],
                latency_ms=row["latency"] * 1000,
                ttft_ms=row["ttft"] * 1000 if row["ttft"] is not None else None,
                stream=bool(row["stream"]),
                key_id=row["key_id"],
                prompt_tokens=row["prompt_tokens"],
                completion_tokens=row["completion_tokens"],
            )
            for row in rows
        ]

    async def count(self) -> int:
        async with self._db.engine.connect() as conn:
            n = (await conn.execute(sa.select(sa.func.count()).select_from(request_log))).scalar()
        return int(n or 0)
