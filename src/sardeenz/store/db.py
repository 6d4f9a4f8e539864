"""The database handle: one async engine per process, migrated at start-up.

SQLite (WAL mode, in the data dir) is the embedded default; ``DATABASE_URL``
may point elsewhere. Nothing here is SQLite-only except the connection pragmas,
which are applied only to SQLite connections.

Alembic (with the SQLAlchemy dialects it loads: PostgreSQL, MySQL, MSSQL, Oracle) costs
about a quarter of a second of CPU to import, a fifth of a server start, so a start
imports it only when a migration is pending:

* a database at ``HEAD_REVISION`` (every restart) reads one row and is done;
* a new, empty SQLite database (a first start; every test server) is created from
  ``schema.metadata`` and stamped at ``HEAD_REVISION``, as Alembic would leave it
  (tests/unit/test_db_revision.py compares the two, table by table, column by column);
* anything else (an older revision, another database) runs the Alembic migrations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    event,
    inspect,
    text,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

from sardeenz.store.schema import metadata

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
HEAD_REVISION = "0010"
"""The newest migration (``migrations/versions``); tests/unit/test_db_revision.py checks it
against Alembic's own head, so a new migration cannot be skipped by a stale value here."""
SQL_INT_MAX = 2**63 - 1
"""The largest INTEGER SQLite stores: the bound of every id and offset a client may send."""

VERSION_TABLE = Table(
    "alembic_version",
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)
"""Alembic's own bookkeeping table, defined as Alembic creates it."""


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: AsyncEngine = create_async_engine(url, pool_pre_ping=True)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)

    async def migrate(self) -> None:
        """Bring the schema to the newest revision, idempotently (module doc: how)."""
        async with self.engine.begin() as conn:
            await conn.run_sync(_migrate)

    async def close(self) -> None:
        await self.engine.dispose()


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets readers proceed while the supervisor writes; busy_timeout makes a
    # second writer wait instead of failing with "database is locked".
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def current_revisions(connection: Connection) -> set[str]:
    """The revisions Alembic recorded in ``alembic_version`` (none on a new database)."""
    if not inspect(connection).has_table(VERSION_TABLE.name):
        return set()
    rows = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE.name}"))
    return {str(row[0]) for row in rows}


def _migrate(connection: Connection) -> None:
    found = current_revisions(connection)
    if found == {HEAD_REVISION}:
        return
    new_sqlite = connection.dialect.name == "sqlite" and not inspect(connection).get_table_names()
    if not found and new_sqlite:
        create_at_head(connection)
        return
    upgrade_head(connection)


def create_at_head(connection: Connection) -> None:
    """A new database's schema in one step, stamped as if every migration had run."""
    metadata.create_all(connection)
    VERSION_TABLE.create(connection)
    connection.execute(VERSION_TABLE.insert().values(version_num=HEAD_REVISION))


def upgrade_head(connection: Connection) -> None:
    """Run the pending Alembic migrations (the only path that imports Alembic)."""
    # Here, not at the top: imported only when a migration is pending (module doc).
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, "head")
