"""Tenant persistence: the tenants added through the API, and the tokens used per period.

A tenant row holds the body as it was accepted (JSON). Usage rows hold, per
tenant scope (``*`` or a served model name) and budget period (``2026-12-04``,
``2026-12``), the tokens counted so far: the tenant service (tenancy/service.py)
writes the counters that changed every few seconds and at shutdown, and reads
the current periods back on start, so a budget survives a restart.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from sardeenz.domain import utcnow
from sardeenz.store.db import Database
from sardeenz.store.schema import tenant_usage, tenants


class TenantRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def list_all(self) -> dict[str, dict[str, Any]]:
        async with self._db.engine.connect() as conn:
            rows = (await conn.execute(sa.select(tenants).order_by(tenants.c.name))).mappings()
            return {row["name"]: dict(row["body"]) for row in rows}

    async def put(self, name: str, body: dict[str, Any]) -> None:
        values = {"body": body, "updated_at": utcnow()}
        async with self._db.engine.begin() as conn:
            updated = await conn.execute(
                tenants.update().where(tenants.c.name == name).values(**values)
            )
            if updated.rowcount == 0:
                await conn.execute(tenants.insert().values(name=name, **values))

    async def delete(self, name: str) -> bool:
        async with self._db.engine.begin() as conn:
            result = await conn.execute(tenants.delete().where(tenants.c.name == name))
        return bool(result.rowcount)

    async def usage(self, periods: list[str]) -> dict[tuple[str, str, str], int]:
        """(tenant, scope, period) -> tokens, for the given period ids."""
        async with self._db.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(tenant_usage).where(tenant_usage.c.period.in_(periods))
            )
            return {(r.tenant, r.scope, r.period): int(r.tokens) for r in rows}

    async def save_usage(self, counts: list[tuple[str, str, str, int]]) -> None:
        """Store (tenant, scope, period, tokens) rows, replacing what they held."""
        if not counts:
            return
        now = utcnow()
        table = tenant_usage
        async with self._db.engine.begin() as conn:
            for tenant, scope, period, tokens in counts:
                where = sa.and_(
                    table.c.tenant == tenant, table.c.scope == scope, table.c.period == period
                )
                updated = await conn.execute(
                    table.update().where(where).values(tokens=tokens, updated_at=now)
                )
                if updated.rowcount == 0:
                    await conn.execute(
                        table.insert().values(
                            tenant=tenant, scope=scope, period=period, tokens=tokens, updated_at=now
                        )
                    )
