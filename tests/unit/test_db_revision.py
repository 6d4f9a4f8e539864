"""A start migrates without Alembic when nothing is pending, to the same schema.

``store/db.py`` creates a new SQLite database from ``schema.metadata`` and stamps it,
and skips Alembic for a database already at ``HEAD_REVISION`` (Alembic is a fifth of a
server start's CPU). These tests hold that shortcut to what Alembic itself would do:
the same head, the same tables, columns, indexes and keys, and Alembic still runs when
a migration is pending.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from sardeenz.store.db import (
    HEAD_REVISION,
    MIGRATIONS_DIR,
    Database,
    create_at_head,
    current_revisions,
    upgrade_head,
)

Shape = dict[str, object]


def alembic_head() -> str:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    heads = ScriptDirectory.from_config(cfg).get_heads()
    assert len(heads) == 1, heads
    return str(heads[0])


def shape(path: Path) -> dict[str, Shape]:
    """Every table's columns, indexes and foreign keys, as SQLite reports them.

    Column order is left out: a column Alembic added later sits last in a migrated
    table and in its declared place in a created one; nothing reads columns by position.
    """
    con = sqlite3.connect(path)
    try:
        tables = [
            row[0]
            for row in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        found: dict[str, Shape] = {}
        for table in tables:
            columns = {row[1:] for row in con.execute(f"PRAGMA table_info('{table}')")}
            indexes = {}
            for _, name, unique, origin, partial in con.execute(f"PRAGMA index_list('{table}')"):
                cols = tuple(row[2] for row in con.execute(f"PRAGMA index_info('{name}')"))
                # SQLite names the indexes of a UNIQUE or PRIMARY KEY constraint itself
                key = name if origin == "c" else (origin, cols)
                indexes[key] = (unique, origin, partial, cols)
            keys = {row[2:] for row in con.execute(f"PRAGMA foreign_key_list('{table}')")}
            found[table] = {"columns": columns, "indexes": indexes, "foreign_keys": keys}
        return found
    finally:
        con.close()


def test_head_revision_is_alembics_head() -> None:
    assert alembic_head() == HEAD_REVISION


def test_a_created_database_has_the_migrated_schema(tmp_path: Path) -> None:
    migrated, created = tmp_path / "migrated.db", tmp_path / "created.db"
    for path, build in ((migrated, upgrade_head), (created, create_at_head)):
        engine = create_engine(f"sqlite:///{path}")
        with engine.begin() as conn:
            build(conn)
        with engine.connect() as conn:
            assert current_revisions(conn) == {HEAD_REVISION}
        engine.dispose()
    want, got = shape(migrated), shape(created)
    assert sorted(got) == sorted(want)
    assert "instances" in got
    assert "alembic_version" in got
    for table in want:
        assert got[table] == want[table], table


async def test_an_older_database_is_still_migrated_by_alembic(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0008")
        assert current_revisions(conn) == {"0008"}
    engine.dispose()
    assert "tenants" not in shape(path)

    db = Database(f"sqlite+aiosqlite:///{path}")
    try:
        await db.migrate()
        await db.migrate()  # at head now: nothing to do
    finally:
        await db.close()
    assert "tenants" in shape(path)
    con = sqlite3.connect(path)
    try:
        assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (HEAD_REVISION,)
        ]
    finally:
        con.close()


MIGRATE_TWICE = """
import asyncio, sys
from sardeenz.store.db import Database
async def main(url):
    for _ in range(2):  # a first start (new database), then a restart (at head)
        db = Database(url)
        await db.migrate()
        await db.close()
asyncio.run(main(sys.argv[1]))
print(sorted(m for m in sys.modules if m == "alembic" or m.startswith("alembic.")))
"""


def test_a_first_start_and_a_restart_import_no_alembic(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    done = subprocess.run(
        [sys.executable, "-c", MIGRATE_TWICE, f"sqlite+aiosqlite:///{path}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert "instances" in shape(path)
