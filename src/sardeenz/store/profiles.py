"""Memory profile persistence: one row per profile, looked up by model, length and GPU.

Every method is one short transaction, so a benchmark saving results and an
operator creating profiles never hold the SQLite write lock for long (WAL and
``busy_timeout`` let the other writer wait instead of failing).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from sardeenz.store.db import Database
from sardeenz.store.records import MemoryProfile
from sardeenz.store.schema import memory_profiles

_COLUMNS = (
    "id",
    "profile_name",
    "model_path",
    "max_tokens",
    "total_gpu_memory_gib",
    "weights_memory_gib",
    "cuda_graphs_gib",
    "overhead_memory_gib",
    "kv_cache_available_gib",
    "kv_cache_per_request_mib",
    "gpu_name",
    "gpu_total_memory_gib",
    "comments",
    "created_by",
    "created_at",
    "updated_at",
)


def as_utc(value: datetime | None) -> datetime | None:
    """Datetimes come back naive from SQLite (it stores no zone); all of ours are UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _profile(row: RowMapping) -> MemoryProfile:
    data = {k: row[k] for k in _COLUMNS}
    data["created_at"] = as_utc(data["created_at"])
    data["updated_at"] = as_utc(data["updated_at"])
    return MemoryProfile.model_validate(data)


class ProfileRepository:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._token = uuid.uuid4().hex[:12]
        self._changes = itertools.count(1)
        self._version = 0

    @property
    def version(self) -> str:
        """``<token>:<n>``: changes whenever this process writes a profile (the cluster's
        profile sync collects a pod's profiles when its version changes; the token is
        new in every process, so a restarted pod is collected again)."""
        return f"{self._token}:{self._version}"

    def _changed(self) -> None:
        self._version = next(self._changes)

    async def create(self, profile: MemoryProfile) -> MemoryProfile:
        values = profile.model_dump(by_alias=False, include=set(_COLUMNS))
        async with self._db.engine.begin() as conn:
            await conn.execute(memory_profiles.insert().values(**values))
        self._changed()
        return profile

    async def merge(self, profiles: Sequence[MemoryProfile]) -> int:
        """Store profiles measured elsewhere: a new id is inserted, a known one updated
        when the incoming copy is newer; returns how many rows changed. Idempotent."""
        if not profiles:
            return 0
        c = memory_profiles.c
        changed = 0
        async with self._db.engine.begin() as conn:
            ids = [p.id for p in profiles]
            rows = (
                await conn.execute(sa.select(c.id, c.created_at, c.updated_at).where(c.id.in_(ids)))
            ).all()
            known = {r.id: as_utc(r.updated_at) or as_utc(r.created_at) for r in rows}
            for p in profiles:
                values = p.model_dump(by_alias=False, include=set(_COLUMNS))
                stamp = p.updated_at or p.created_at
                if p.id not in known:
                    await conn.execute(memory_profiles.insert().values(**values))
                    changed += 1
                elif (mine := known[p.id]) is not None and stamp > mine:
                    values.pop("id")
                    await conn.execute(
                        memory_profiles.update().where(c.id == p.id).values(**values)
                    )
                    changed += 1
        if changed:
            self._changed()
        return changed

    async def get(self, profile_id: str) -> MemoryProfile | None:
        async with self._db.engine.connect() as conn:
            row = (
                (
                    await conn.execute(
                        sa.select(memory_profiles).where(memory_profiles.c.id == profile_id)
                    )
                )
                .mappings()
                .first()
            )
        return _profile(row) if row is not None else None

    async def list_all(self, model_path: str | None = None) -> list[MemoryProfile]:
        """Newest first; only one model's profiles when ``model_path`` is given."""
        query = sa.select(memory_profiles).order_by(
            memory_profiles.c.created_at.desc(), memory_profiles.c.id
        )
        if model_path is not None:
            query = query.where(memory_profiles.c.model_path == model_path)
        async with self._db.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [_profile(r) for r in rows]

    async def lookup(
        self, model_path: str, max_tokens: int, gpu_name: str | None = None
    ) -> MemoryProfile | None:
        """The newest profile for exactly this model and length (and GPU model, if given)."""
        c = memory_profiles.c
        query = sa.select(memory_profiles).where(
            c.model_path == model_path, c.max_tokens == max_tokens
        )
        if gpu_name is not None:
            query = query.where(c.gpu_name == gpu_name)
        query = query.order_by(sa.func.coalesce(c.updated_at, c.created_at).desc(), c.id).limit(1)
        async with self._db.engine.connect() as conn:
            row = (await conn.execute(query)).mappings().first()
        return _profile(row) if row is not None else None

    async def delete(self, profile_id: str) -> bool:
        async with self._db.engine.begin() as conn:
            result = await conn.execute(
                memory_profiles.delete().where(memory_profiles.c.id == profile_id)
            )
        if result.rowcount:
            self._changed()
        return bool(result.rowcount)
