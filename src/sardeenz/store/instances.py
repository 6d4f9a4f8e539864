"""Instance registry persistence: one row per instance this node supervises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from sardeenz.domain import ModelInstance, utcnow
from sardeenz.store.db import Database
from sardeenz.store.schema import instances


@dataclass(frozen=True, slots=True)
class StoredInstance:
    instance: ModelInstance
    process_create_time: float | None


class InstanceRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def save(self, instance: ModelInstance, process_create_time: float | None) -> None:
        row: dict[str, Any] = {
            "status": str(instance.status),
            "port": instance.port,
            "process_id": instance.process_id,
            "process_create_time": process_create_time,
            "record": instance.model_dump(mode="json"),
            "updated_at": utcnow(),
        }
        async with self._db.engine.begin() as conn:
            updated = await conn.execute(
                instances.update().where(instances.c.id == instance.id).values(**row)
            )
            if updated.rowcount == 0:
                await conn.execute(instances.insert().values(id=instance.id, **row))

    async def delete(self, instance_id: str) -> None:
        async with self._db.engine.begin() as conn:
            await conn.execute(instances.delete().where(instances.c.id == instance_id))

    async def list_all(self) -> list[StoredInstance]:
        async with self._db.engine.connect() as conn:
            rows = (await conn.execute(sa.select(instances))).mappings().all()
        return [
            StoredInstance(
                instance=ModelInstance.model_validate(row["record"]),
                process_create_time=row["process_create_time"],
            )
            for row in rows
        ]
