"""The replicated register's copies on this pod: one row per document.

A copy is checked and written in one transaction with ``synchronous=FULL``, so
that a pod that acknowledged a write still holds it after a crash or a power
cut: its acknowledgement counts toward the majority that makes a write survive
a leader change. Which copy wins is the caller's rule (cluster/replicated.py);
this module only keeps the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import sqlalchemy as sa

from sardeenz.domain import utcnow
from sardeenz.store.db import Database
from sardeenz.store.schema import control_documents


class StoredCopy(NamedTuple):
    key: str
    term: int
    revision: int
    body: Any


class ControlRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def all(self) -> dict[str, StoredCopy]:
        async with self._db.engine.connect() as conn:
            rows = (await conn.execute(sa.select(control_documents))).mappings()
            return {
                r["key"]: StoredCopy(r["key"], r["term"], r["revision"], r["body"]) for r in rows
            }

    async def put_if(self, copy: StoredCopy, replaces: Callable[[StoredCopy | None], bool]) -> bool:
        """Store ``copy`` if ``replaces(the copy held)`` says so, atomically; True if stored."""
        sqlite = self._db.engine.dialect.name == "sqlite"
        table = control_documents
        async with self._db.engine.connect() as conn:
            if sqlite:
                await conn.exec_driver_sql("PRAGMA synchronous=FULL")
                await conn.commit()  # the pragma autobegan a transaction; ours comes next
            try:
                async with conn.begin():
                    found = await conn.execute(sa.select(table).where(table.c.key == copy.key))
                    row = found.mappings().first()
                    held = (
                        StoredCopy(row["key"], row["term"], row["revision"], row["body"])
                        if row is not None
                        else None
                    )
                    if not replaces(held):
                        return False
                    values = {
                        "term": copy.term,
                        "revision": copy.revision,
                        "body": copy.body,
                        "updated_at": utcnow(),
                    }
                    if held is None:
                        await conn.execute(table.insert().values(key=copy.key, **values))
                    else:
                        await conn.execute(
                            table.update().where(table.c.key == copy.key).values(**values)
                        )
                    return True
            finally:
                if sqlite:  # the pooled connection goes back as the others are
                    await conn.exec_driver_sql("PRAGMA synchronous=NORMAL")
                    await conn.commit()
