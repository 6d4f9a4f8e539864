"""Billable usage buckets: what tenants' requests consumed, per minute, then per hour.

The usage service (tenancy/usage.py) writes the minute buckets the meter
gathered, in one transaction per batch, adding to a bucket already stored (a
batch may straddle a minute). ``roll_up`` folds minute buckets older than the
minute retention into hour buckets and deletes hour buckets older than the
hour retention: the table holds at most (minutes kept + hours kept) rows per
tenant, key, model and reason, however long the node runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from sardeenz.store.db import Database
from sardeenz.store.schema import usage_buckets

MINUTE: Final = 60
HOUR: Final = 3600
COUNTS: Final = ("requests", "failed", "prompt_tokens", "completion_tokens", "estimated")
DIMENSIONS: Final = ("tenant", "key_id", "model")

UsageRow = tuple[int, str, str, str, str, int, int, int, int, int]
"""(bucket start, tenant, key id, model, reason, requests, failed, prompt tokens,
completion tokens, estimated requests); a dimension not grouped by is ``""``."""


class UsageRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, rows: Sequence[UsageRow], step: int = MINUTE) -> None:
        """Add ``rows`` to the buckets of ``step`` seconds (created when absent)."""
        if not rows:
            return
        async with self._db.engine.begin() as conn:
            await _add(conn, step, rows)

    async def roll_up(self, minutes_before: int, hours_before: int) -> int:
        """Fold minute buckets that start before ``minutes_before`` into hour buckets, and
        delete hour buckets that start before ``hours_before``; one transaction. Returns
        the minute buckets folded."""
        t = usage_buckets
        hour = (t.c.start // HOUR) * HOUR
        old_minutes = sa.and_(t.c.step == MINUTE, t.c.start < minutes_before)
        async with self._db.engine.begin() as conn:
            folded = (
                await conn.execute(
                    sa.select(
                        hour,
                        t.c.tenant,
                        t.c.key_id,
                        t.c.model,
                        t.c.reason,
                        *(sa.func.sum(t.c[c]) for c in COUNTS),
                    )
                    .where(old_minutes)
                    .group_by(hour, t.c.tenant, t.c.key_id, t.c.model, t.c.reason)
                )
            ).all()
            rows: list[UsageRow] = [
                (int(r[0]), r[1], r[2], r[3], r[4], *(int(n) for n in r[5:])) for r in folded
            ]
            await _add(conn, HOUR, rows)
            gone = await conn.execute(t.delete().where(old_minutes))
            await conn.execute(t.delete().where(t.c.step == HOUR, t.c.start < hours_before))
        return int(gone.rowcount or 0)

    async def query(
        self, start: int, end: int, step: int | None, group_by: Sequence[str]
    ) -> list[UsageRow]:
        """Buckets that start in [start, end), summed per ``step`` seconds counted from
        ``start`` (None: one bucket for the whole range) and per grouped dimension
        (``tenant``, ``key_id``, ``model``) and reason."""
        t = usage_buckets
        bucket: sa.ColumnElement[int] = (
            sa.literal(start) + ((t.c.start - start) // step) * step
            if step is not None
            else sa.literal(start)
        )
        dims = [t.c[d] if d in group_by else sa.literal("") for d in DIMENSIONS]
        keys = [bucket, *(t.c[d] for d in DIMENSIONS if d in group_by), t.c.reason]
        stmt = (
            sa.select(bucket, *dims, t.c.reason, *(sa.func.sum(t.c[c]) for c in COUNTS))
            .where(t.c.start >= start, t.c.start < end)
            .group_by(*keys)
        )
        async with self._db.engine.connect() as conn:
            found = (await conn.execute(stmt)).all()
        return [(int(r[0]), r[1], r[2], r[3], r[4], *(int(n) for n in r[5:])) for r in found]

    async def count(self) -> int:
        async with self._db.engine.connect() as conn:
            n = (await conn.execute(sa.select(sa.func.count()).select_from(usage_buckets))).scalar()
        return int(n or 0)


async def _add(conn: AsyncConnection, step: int, rows: Sequence[UsageRow]) -> None:
    if not rows:
        return
    t = usage_buckets
    values = [
        {
            "step": step,
            "start": r[0],
            "tenant": r[1],
            "key_id": r[2],
            "model": r[3],
            "reason": r[4],
            **dict(zip(COUNTS, r[5:], strict=True)),
        }
        for r in rows
    ]
    if conn.dialect.name == "sqlite":
        stmt = sqlite_insert(t)
        await conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["step", "start", "tenant", "key_id", "model", "reason"],
                set_={c: t.c[c] + stmt.excluded[c] for c in COUNTS},
            ),
            values,
        )
        return
    for v in values:  # another database: update, else insert (a batch is small)
        where = sa.and_(*(t.c[k] == v[k] for k in ("step", "start", *DIMENSIONS, "reason")))
        updated = await conn.execute(
            t.update().where(where).values({c: t.c[c] + v[c] for c in COUNTS})
        )
        if updated.rowcount == 0:
            await conn.execute(t.insert().values(v))
