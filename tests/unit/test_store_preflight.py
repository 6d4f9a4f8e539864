"""The start-up check of the SQLite files, on real WAL files written by SQLite itself."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sardeenz.store.preflight import (
    FRAME_HEADER,
    WAL_HEADER,
    StorageError,
    check_sqlite,
    check_wal,
    preflight,
    sqlite_file,
)

ROWS = 40


def crashed_copy(tmp_path: Path) -> Path:
    """A database whose committed rows live only in its WAL, as a SIGKILL leaves it."""
    live = tmp_path / "live" / "sardeenz.db"
    live.parent.mkdir()
    conn = sqlite3.connect(live)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE audit (id INTEGER PRIMARY KEY, what TEXT)")
    conn.commit()
    for i in range(ROWS):  # one transaction (and at least one commit frame) each
        conn.execute("INSERT INTO audit (what) VALUES (?)", (f"entry {i} " + "x" * 200,))
        conn.commit()
    copy = tmp_path / "node" / "sardeenz.db"
    copy.parent.mkdir()
    shutil.copy(live, copy)  # copied while open: no checkpoint has run
    shutil.copy(live.with_name("sardeenz.db-wal"), copy.with_name("sardeenz.db-wal"))
    conn.close()
    return copy


def wal_of(db: Path) -> Path:
    return db.with_name(db.name + "-wal")


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def rows(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT count(*) FROM audit").fetchone()[0])
    except sqlite3.OperationalError:
        return 0  # no table: the schema itself was only in the WAL
    finally:
        conn.close()


def frame_size(wal: Path) -> int:
    return FRAME_HEADER + int.from_bytes(wal.read_bytes()[8:12], "big")


def test_an_intact_wal_passes_and_keeps_every_row(tmp_path: Path) -> None:
    db = crashed_copy(tmp_path)
    report = check_wal(wal_of(db))
    assert report.frames >= ROWS
    assert report.warnings == []
    assert check_sqlite(db) == []
    assert rows(db) == ROWS


def test_a_damaged_header_is_refused_before_sqlite_drops_everything(tmp_path: Path) -> None:
    db = crashed_copy(tmp_path)
    flip(wal_of(db), 20)  # salt-2: the header checksum no longer holds
    before = (db.read_bytes(), wal_of(db).read_bytes())
    with pytest.raises(StorageError) as refused:
        check_sqlite(db)
    message = str(refused.value)
    assert str(wal_of(db)) in message
    assert "damaged header" in message
    assert "nothing was changed" in message
    assert "\n" not in message
    assert (db.read_bytes(), wal_of(db).read_bytes()) == before  # the check wrote nothing
    # What the check prevents: SQLite itself opens it without a word, and empty.
    assert rows(db) == 0


def test_a_damaged_frame_with_commits_after_it_is_refused(tmp_path: Path) -> None:
    db = crashed_copy(tmp_path)
    wal = wal_of(db)
    flip(wal, WAL_HEADER + 9 * frame_size(wal) + FRAME_HEADER + 100)  # page data of frame 10
    with pytest.raises(StorageError, match="damaged at frame 10"):
        check_sqlite(db)
    assert 0 < rows(db) < ROWS  # SQLite would keep the start and drop the rest


def test_a_torn_last_frame_is_a_warning_not_a_refusal(tmp_path: Path) -> None:
    db = crashed_copy(tmp_path)
    wal = wal_of(db)
    size = frame_size(wal)
    last = WAL_HEADER + ((wal.stat().st_size - WAL_HEADER) // size - 1) * size
    flip(wal, last + FRAME_HEADER + 7)
    warnings = check_sqlite(db)
    assert len(warnings) == 1
    assert "fail their checksum" in warnings[0]
    assert rows(db) == ROWS - 1


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "sardeenz.db"
    db.write_bytes(b"this is not SQLite" * 100)
    with pytest.raises(StorageError, match="cannot be read"):
        check_sqlite(db)


def test_a_new_node_has_nothing_to_check(tmp_path: Path) -> None:
    data = tmp_path / "new"
    url = f"sqlite+aiosqlite:///{data / 'sardeenz.db'}"
    assert preflight(data, url) == []
    assert data.is_dir()
    assert list(data.iterdir()) == []


def test_sqlite_file_of_urls() -> None:
    assert sqlite_file("sqlite+aiosqlite:////var/x/s.db") == Path("/var/x/s.db")
    assert sqlite_file("sqlite+aiosqlite:///:memory:") is None
    assert sqlite_file("postgresql+asyncpg://u@h/db") is None


def test_a_data_dir_below_a_file_is_one_clear_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StorageError) as refused:
        preflight(blocker / "data", f"sqlite+aiosqlite:///{blocker / 'data' / 's.db'}")
    assert str(blocker / "data") in str(refused.value)
    assert "not writable" in str(refused.value)


def checkpointed(tmp_path: Path) -> Path:
    """A database of several pages, checkpointed, with new rows in its WAL after."""
    db = tmp_path / "node" / "sardeenz.db"
    db.parent.mkdir()
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE audit (id INTEGER PRIMARY KEY, what TEXT)")
    conn.executemany("INSERT INTO audit (what) VALUES (?)", [("x" * 500,)] * 50)
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    live = tmp_path / "live"
    live.mkdir()
    conn.execute("INSERT INTO audit (what) VALUES ('after')")
    conn.commit()
    shutil.copy(db, live / db.name)  # as a SIGKILL leaves them: database and WAL
    shutil.copy(wal_of(db), live / wal_of(db).name)
    conn.close()
    shutil.copy(live / db.name, db)
    shutil.copy(live / wal_of(db).name, wal_of(db))
    return db


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda db: db.unlink(), "is missing but its write-ahead log"),
        (lambda db: db.write_bytes(b""), "is empty (0 bytes) but its write-ahead log"),
        (lambda db: db.write_bytes(db.read_bytes()[:4096]), "shorter than the"),
    ],
    ids=["moved-aside", "truncated-to-zero", "cut-short"],
)
def test_a_database_lost_beside_its_wal_is_refused_and_left_alone(
    tmp_path: Path, damage: Any, said: str
) -> None:
    db = checkpointed(tmp_path)
    damage(db)
    before = {p.name: p.read_bytes() for p in db.parent.iterdir()}
    with pytest.raises(StorageError, match="nothing was changed") as refused:
        check_sqlite(db)
    assert said in str(refused.value)
    assert {p.name: p.read_bytes() for p in db.parent.iterdir()} == before


def test_an_empty_database_without_a_wal_is_a_new_one(tmp_path: Path) -> None:
    db = tmp_path / "sardeenz.db"
    db.write_bytes(b"")
    assert check_sqlite(db) == []
    wal_of(db).write_bytes(b"")  # an empty WAL holds nothing to lose either
    assert check_sqlite(db) == []
