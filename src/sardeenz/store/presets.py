"""Preset persistence: every pod keeps the leader's presets, so any pod can lead.

A row is one preset: its models as accepted (JSON), when it was last changed,
when it was applied (at most one row has ``applied_at``), and ``dropped``: the
served model names an earlier version (or the previously applied preset)
declared and this one does not, whose instances the reconcile loop still has
to remove. Followers replace their whole table with the leader's copy
(``replace_all``), in one transaction, so a pod never holds half a sync.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from sardeenz.domain import utcnow
from sardeenz.store.db import Database
from sardeenz.store.schema import cluster_presets


@dataclass(frozen=True, slots=True)
class PresetRow:
    name: str
    models: list[dict[str, Any]]
    updated_at: datetime
    applied_at: datetime | None
    dropped: list[str]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "models": self.models,
            "updatedAt": self.updated_at.isoformat(),
            "appliedAt": self.applied_at.isoformat() if self.applied_at else None,
            "dropped": self.dropped,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PresetRow:
        applied = data.get("appliedAt")
        return cls(
            name=str(data["name"]),
            models=list(data["models"]),
            updated_at=datetime.fromisoformat(data["updatedAt"]),
            applied_at=datetime.fromisoformat(applied) if applied else None,
            dropped=[str(n) for n in data.get("dropped", [])],
        )


def _row(mapping: Any) -> PresetRow:
    applied = mapping["applied_at"]
    return PresetRow(
        name=mapping["name"],
        models=list(mapping["models"]),
        updated_at=mapping["updated_at"],
        applied_at=applied,
        dropped=list(mapping["dropped"] or []),
    )


class PresetRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def list_all(self) -> list[PresetRow]:
        async with self._db.engine.connect() as conn:
            rows = await conn.execute(sa.select(cluster_presets).order_by(cluster_presets.c.name))
            return [_row(r) for r in rows.mappings()]

    async def get(self, name: str) -> PresetRow | None:
        async with self._db.engine.connect() as conn:
            row = (
                (
                    await conn.execute(
                        sa.select(cluster_presets).where(cluster_presets.c.name == name)
                    )
                )
                .mappings()
                .first()
            )
            return _row(row) if row is not None else None

    async def put(self, name: str, models: list[dict[str, Any]]) -> PresetRow:
        """Create or replace; replacing the applied preset keeps it applied and adds the
        names it no longer declares to ``dropped``."""
        now = utcnow()
        names = {str(m["servedModelName"]) for m in models}
        async with self._db.engine.begin() as conn:
            old = (
                (
                    await conn.execute(
                        sa.select(cluster_presets).where(cluster_presets.c.name == name)
                    )
                )
                .mappings()
                .first()
            )
            if old is None:
                await conn.execute(
                    cluster_presets.insert().values(
                        name=name, models=models, updated_at=now, applied_at=None, dropped=[]
                    )
                )
            else:
                dropped = list(old["dropped"] or [])
                if old["applied_at"] is not None:
                    gone = {str(m["servedModelName"]) for m in old["models"]} - names
                    dropped = sorted((set(dropped) | gone) - names)
                await conn.execute(
                    cluster_presets.update()
                    .where(cluster_presets.c.name == name)
                    .values(models=models, updated_at=now, dropped=dropped)
                )
        row = await self.get(name)
        assert row is not None
        return row

    async def delete(self, name: str) -> bool:
        async with self._db.engine.begin() as conn:
            result = await conn.execute(
                cluster_presets.delete().where(cluster_presets.c.name == name)
            )
        return bool(result.rowcount)

    async def mark_applied(self, name: str) -> PresetRow | None:
        """Make ``name`` the applied preset. The previously applied one's models that
        ``name`` does not declare become ``name``'s ``dropped`` (its instances go)."""
        now = utcnow()
        async with self._db.engine.begin() as conn:
            rows = {
                r["name"]: r
                for r in (await conn.execute(sa.select(cluster_presets))).mappings().all()
            }
            target = rows.get(name)
            if target is None:
                return None
            names = {str(m["servedModelName"]) for m in target["models"]}
            dropped = set(target["dropped"] or [])
            for other in rows.values():
                if other["name"] != name and other["applied_at"] is not None:
                    dropped |= {str(m["servedModelName"]) for m in other["models"]}
                    dropped |= set(other["dropped"] or [])
            await conn.execute(
                cluster_presets.update()
                .where(cluster_presets.c.name != name)
                .values(applied_at=None, dropped=[])
            )
            await conn.execute(
                cluster_presets.update()
                .where(cluster_presets.c.name == name)
                .values(applied_at=now, dropped=sorted(dropped - names))
            )
        return await self.get(name)

    async def set_dropped(self, name: str, dropped: list[str]) -> None:
        async with self._db.engine.begin() as conn:
            await conn.execute(
                cluster_presets.update()
                .where(cluster_presets.c.name == name)
                .values(dropped=sorted(dropped))
            )

    async def replace_all(self, rows: list[PresetRow]) -> None:
        """A follower takes the leader's whole set, atomically."""
        async with self._db.engine.begin() as conn:
            await conn.execute(cluster_presets.delete())
            for r in rows:
                await conn.execute(
                    cluster_presets.insert().values(
                        name=r.name,
                        models=r.models,
                        updated_at=r.updated_at,
                        applied_at=r.applied_at,
                        dropped=r.dropped,
                    )
                )
