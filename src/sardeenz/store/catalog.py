"""Catalog persistence: the entries an operator added through the API.

Rows hold the entry's JSON as it was accepted, not a re-validated object: the
rules may tighten between versions, and an entry that no longer validates must
still be listed (with its error) rather than vanish or stop the others.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from sardeenz.domain import utcnow
from sardeenz.store.db import Database
from sardeenz.store.schema import catalog_entries


class CatalogRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def list_all(self) -> dict[str, dict[str, Any]]:
        """Every stored entry: name -> its JSON (camelCase), in name order."""
        async with self._db.engine.connect() as conn:
            rows = (
                await conn.execute(sa.select(catalog_entries).order_by(catalog_entries.c.name))
            ).mappings()
            return {row["name"]: dict(row["entry"]) for row in rows}

    async def put(self, name: str, entry: dict[str, Any]) -> None:
        values = {"entry": entry, "updated_at": utcnow()}
        async with self._db.engine.begin() as conn:
            updated = await conn.execute(
                catalog_entries.update().where(catalog_entries.c.name == name).values(**values)
            )
            if updated.rowcount == 0:
                await conn.execute(catalog_entries.insert().values(name=name, **values))

    async def delete(self, name: str) -> bool:
        async with self._db.engine.begin() as conn:
            result = await conn.execute(
                catalog_entries.delete().where(catalog_entries.c.name == name)
            )
        return bool(result.rowcount)
