"""``is_storage_full``: the one place a full disk is recognised, on real SQLite errors."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from sardeenz.errors import StorageFull, is_storage_full, storage_full


def _full_sqlite(path: Path) -> sqlite3.Connection:
    """A database capped at its current size: its next growth is SQLITE_FULL."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (v TEXT)")
    conn.commit()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count={pages}")
    return conn


def test_sqlite_full_is_storage_full(tmp_path: Path) -> None:
    conn = _full_sqlite(tmp_path / "db.sqlite")
    with pytest.raises(sqlite3.OperationalError) as raised:
        conn.executemany("INSERT INTO t VALUES (?)", [("x" * 4000,)] * 10)
    assert "full" in str(raised.value)
    assert is_storage_full(raised.value)
    conn.close()


def test_sqlalchemy_wrapped_sqlite_full_is_storage_full(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE t (v TEXT)"))
        pages = conn.execute(sa.text("PRAGMA page_count")).scalar_one()
    rows = [{"v": "x" * 4000}] * 10
    with engine.begin() as conn:
        conn.execute(sa.text(f"PRAGMA max_page_count={pages}"))
        with pytest.raises(sa.exc.OperationalError) as raised:
            conn.execute(sa.text("INSERT INTO t VALUES (:v)"), rows)
    assert is_storage_full(raised.value)
    engine.dispose()


def _wrapped_enospc() -> None:
    try:
        raise OSError(errno.ENOSPC, "No space left on device")
    except OSError as exc:
        raise RuntimeError("write failed") from exc


def test_enospc_anywhere_in_the_chain_is_storage_full() -> None:
    with pytest.raises(RuntimeError) as outer:
        _wrapped_enospc()
    assert is_storage_full(outer.value)
    assert is_storage_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert is_storage_full(storage_full(OSError(errno.ENOSPC, "x")))


@pytest.mark.parametrize(
    "exc",
    [
        sqlite3.OperationalError("database is locked"),
        OSError(errno.EACCES, "Permission denied"),
        ConnectionResetError(errno.ECONNRESET, "reset"),
        ValueError("database or disk is full"),  # the words alone, not SQLite's error
    ],
)
def test_other_errors_are_not_storage_full(exc: Exception) -> None:
    assert not is_storage_full(exc)


def test_the_client_error_is_507_insufficient_storage() -> None:
    err = storage_full(OSError(errno.ENOSPC, "x"))
    assert isinstance(err, StorageFull)
    assert (err.status, err.code) == (507, "insufficient_storage")
