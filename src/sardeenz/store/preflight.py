"""Start-up checks of the data dir and the SQLite database, before anything writes to them.

Why a check of our own: SQLite recovers from a damaged write-ahead log by dropping
it without a word. A small database lives entirely in its WAL until a checkpoint,
so a WAL whose header was damaged made the node start on an empty database: its
profiles, benchmark runs and audit trail gone, and its registry empty, so every
running engine looked unaccounted for. Here a WAL that would lose committed
transactions stops the start with one line that names the file and what to do,
and nothing is modified (the checks open the database read-only first). So does a
database file that is missing, empty or shorter than its header says while its WAL
is still there: SQLite would take it for a new database and reset the WAL.

The WAL format is SQLite's documented one (https://sqlite.org/fileformat2.html#walformat):
a 32-byte header, then frames of a 24-byte header plus one page, each carrying the
header's salts and a running checksum. Frames whose salts differ are left over from
an earlier generation of the log and are not data; a frame that fails its checksum
ends the log for SQLite, and everything committed after it is lost.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import struct
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import make_url

from sardeenz.exitcodes import EXIT_STORAGE

__all__ = [
    "EXIT_STORAGE",
    "StorageError",
    "WalReport",
    "check_data_dir",
    "check_db_size",
    "check_sqlite",
    "check_wal",
    "not_writable",
    "preflight",
    "sqlite_file",
]

WAL_MAGIC_LE = 0x377F0682
WAL_MAGIC_BE = 0x377F0683
WAL_VERSION = 3007000
WAL_HEADER = 32
FRAME_HEADER = 24


class StorageError(Exception):
    """The data dir or database cannot be used; ``str()`` is the one line to print."""


@dataclass
class WalReport:
    frames: int = 0
    """Valid frames SQLite will replay."""
    dropped_tail: int = 0
    """Frames after the last valid one that fail their checksum but commit nothing later: a
    write cut short (SQLite drops them, as after a power loss)."""
    warnings: list[str] = field(default_factory=list)


def _checksum(data: bytes, big_endian: bool, s0: int, s1: int) -> tuple[int, int]:
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def check_wal(wal: Path) -> WalReport:
    """Raise ``StorageError`` if replaying ``wal`` would silently lose committed data."""
    data = wal.read_bytes()
    report = WalReport()
    if len(data) < WAL_HEADER:
        return report  # no complete header: no frame was ever written after it
    magic, version, page_size, _seq, salt1, salt2, c1, c2 = struct.unpack(">8I", data[:32])
    frame_size = FRAME_HEADER + page_size
    has_frames = len(data) >= WAL_HEADER + FRAME_HEADER + 512
    big_endian = magic == WAL_MAGIC_BE
    header_ok = (
        magic in (WAL_MAGIC_LE, WAL_MAGIC_BE)
        and version == WAL_VERSION
        and 512 <= page_size <= 65536
        and page_size & (page_size - 1) == 0
    )
    s0 = s1 = 0
    if header_ok:
        s0, s1 = _checksum(data[:24], big_endian, 0, 0)
        header_ok = (s0, s1) == (c1, c2)
    if not header_ok:
        if has_frames:
            raise StorageError(
                f"the write-ahead log {wal} has a damaged header, so SQLite would drop all "
                f"{len(data) - WAL_HEADER} bytes of transactions in it"
            )
        return report
    offsets = range(WAL_HEADER, len(data) - frame_size + 1, frame_size)
    for n, off in enumerate(offsets):
        page_no, _commit, f_salt1, f_salt2, f1, f2 = struct.unpack(">6I", data[off : off + 24])
        if (f_salt1, f_salt2) != (salt1, salt2) or page_no == 0:
            return report  # the end of this generation of the log
        s0, s1 = _checksum(data[off : off + 8], big_endian, s0, s1)
        s0, s1 = _checksum(data[off + 24 : off + frame_size], big_endian, s0, s1)
        if (s0, s1) == (f1, f2):
            report.frames += 1
            continue
        later_commits = sum(
            1
            for later in offsets[n + 1 :]
            if struct.unpack(">I", data[later + 4 : later + 8])[0] != 0
            and data[later + 8 : later + 16] == data[16:24]
        )
        if later_commits:
            raise StorageError(
                f"the write-ahead log {wal} is damaged at frame {n + 1}: SQLite would drop "
                f"it and {later_commits} committed transaction(s) after it"
            )
        report.dropped_tail = len(offsets) - n
        report.warnings.append(
            f"the last {report.dropped_tail} frame(s) of {wal} fail their checksum (a write "
            "cut short); SQLite drops them, as after a power loss"
        )
        return report
    return report


def _recovery(db: Path) -> str:
    return (
        f"nothing was changed. Restore {db.parent} from a backup, or move {db.name} and its "
        f"-wal/-shm files aside to start with an empty database (running engines of this "
        "data dir would then be stopped as unknown)"
    )


def check_data_dir(data_dir: Path) -> None:
    """The data dir exists (or can be made) and takes a write."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe = data_dir / f".write-probe-{os.getpid()}"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"ok")
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    except OSError as exc:
        raise not_writable(data_dir, exc) from exc


def not_writable(data_dir: Path, exc: OSError) -> StorageError:
    """The refusal for a data dir the server cannot create or write in."""
    return StorageError(
        f"the data dir {data_dir} is not writable ({exc.strerror or exc}); give the "
        "server's user write access to it, or point SARDEENZ_DATA_DIR elsewhere"
    )


DB_HEADER = 100
DB_MAGIC = b"SQLite format 3\x00"


def check_db_size(db: Path, wal: Path) -> None:
    """Refuse a database file that is missing, empty or cut short while its WAL is not.

    Opened as it is, SQLite takes a missing or empty file for a new, empty database
    and resets the WAL beside it: every transaction in it is lost, the node starts empty
    and stops the running engines it no longer knows. (``truncate -s0 sardeenz.db``, or
    the database moved or restored without its ``-wal``.) An empty file with no WAL is
    a new database, as SQLite says.
    """
    wal_bytes = wal.stat().st_size if wal.exists() else 0
    size = db.stat().st_size if db.exists() else None
    if size is None or size == 0:
        if wal_bytes:
            state = "missing" if size is None else "empty (0 bytes)"
            raise StorageError(
                f"database {db} is {state} but its write-ahead log {wal.name} holds "
                f"{wal_bytes} bytes: opening it would drop them; {_recovery(db)}"
            )
        return
    with db.open("rb") as f:
        header = f.read(DB_HEADER)
    if len(header) < DB_HEADER or not header.startswith(DB_MAGIC):
        return  # not SQLite's header at all: the integrity check names it
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    change_counter, pages = struct.unpack(">II", header[24:32])
    valid_for = struct.unpack(">I", header[92:96])[0]
    # The in-header size counts only when written by SQLite 3.7.0+ (valid-for == counter).
    declared = page_size * pages if pages and valid_for == change_counter else 0
    if size < declared:
        raise StorageError(
            f"database {db} is {size} bytes, shorter than the {declared} its header "
            f"declares (cut short); {_recovery(db)}"
        )


def check_sqlite(db: Path) -> list[str]:
    """Check a SQLite database before the server opens it; returns warnings to log."""
    wal = db.with_name(db.name + "-wal")
    try:
        check_db_size(db, wal)
    except OSError as exc:
        raise StorageError(f"cannot read {db}: {exc.strerror or exc}") from exc
    if not db.exists():
        return []
    warnings: list[str] = []
    try:
        if wal.exists():
            warnings += check_wal(wal).warnings
    except StorageError as exc:
        raise StorageError(f"database {db}: {exc}; {_recovery(db)}") from None
    except OSError as exc:
        raise StorageError(f"cannot read {wal}: {exc.strerror or exc}") from exc
    try:
        # Read-only first: a damaged file is reported, not "repaired" by a checkpoint.
        with _connect(db, "ro") as conn:
            verdict = [row[0] for row in conn.execute("PRAGMA quick_check(5)")]
        if verdict != ["ok"]:
            raise StorageError(
                f"database {db} fails SQLite's integrity check ({'; '.join(verdict)}); "
                + _recovery(db)
            )
    except sqlite3.DatabaseError as exc:
        raise StorageError(f"database {db} cannot be read ({exc}); {_recovery(db)}") from None
    try:
        with _connect(db, "rw") as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
    except sqlite3.OperationalError as exc:
        raise StorageError(
            f"database {db} cannot be written ({exc}); check the permissions and the mount "
            f"of {db.parent} (the -wal and -shm files beside it must be writable too)"
        ) from None
    return warnings


def _connect(db: Path, mode: str) -> contextlib.closing[sqlite3.Connection]:
    """A connection closed on exit (sqlite3's own context manager only commits)."""
    uri = f"file:{urllib.parse.quote(str(db))}?mode={mode}"
    return contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5))


def sqlite_file(database_url: str) -> Path | None:
    """The file of a SQLite URL (None for another database, or an in-memory one)."""
    url = make_url(database_url)
    if not url.drivername.startswith("sqlite") or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def preflight(data_dir: Path, database_url: str) -> list[str]:
    """Everything ``sardeenz serve`` checks before it starts; returns warnings to log."""
    check_data_dir(data_dir)
    db = sqlite_file(database_url)
    return check_sqlite(db) if db is not None else []
