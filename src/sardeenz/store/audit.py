"""Audit trail persistence: who did what, when, with which result."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from pydantic import Field

from sardeenz.domain import CamelModel
from sardeenz.store.db import Database
from sardeenz.store.schema import audit_log


class AuditEntry(CamelModel):
    id: int | None = None
    at: datetime
    subject: str = Field(description="who: the token's subject, or 'local' without auth")
    role: str | None = None
    method: str
    path: str
    status: int
    outcome: str = Field(description="'ok' (2xx/3xx), 'denied' (401/403) or 'error'")
    remote: str | None = None
    instance_id: str | None = Field(None, description="the instance acted on")
    model: str | None = Field(None, description="the model acted on (served name or path)")
    run_id: str | None = Field(None, description="the benchmark run acted on")
    code: str | None = Field(None, description="the error code of a refused request")


class AuditRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, entry: AuditEntry) -> None:
        async with self._db.engine.begin() as conn:
            await conn.execute(
                audit_log.insert().values(**entry.model_dump(exclude={"id"}, by_alias=False))
            )

    async def list(self, limit: int = 100, before_id: int | None = None) -> list[AuditEntry]:
        query = sa.select(audit_log).order_by(audit_log.c.id.desc()).limit(limit)
        if before_id is not None:
            query = query.where(audit_log.c.id < before_id)
        async with self._db.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        # SQLite hands back naive datetimes; every timestamp we store is UTC.
        return [AuditEntry.model_validate({**row, "at": _utc(row["at"])}) for row in rows]


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
