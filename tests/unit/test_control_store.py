"""store/control.py with real SQLite: a copy is stored only when newer, and survives a
reopen of the database (what a pod's acknowledgement promises)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sardeenz.cluster.replicated import Document, Verdict, decide
from sardeenz.store.control import ControlRepository, StoredCopy
from sardeenz.store.db import Database


def copy(doc: Document) -> StoredCopy:
    return StoredCopy(doc.key, doc.term, doc.revision, doc.body)


def newer_than(doc: Document, seen: int) -> Callable[[StoredCopy | None], bool]:
    def replaces(held: StoredCopy | None) -> bool:
        current = Document(*held) if held is not None else None
        return decide(current, doc, seen) is Verdict.STORE

    return replaces


async def test_a_copy_is_kept_only_if_newer_and_survives_a_reopen(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    db = Database(url)
    await db.migrate()
    repo = ControlRepository(db)
    first = Document("catalog", 2, 5, {"a": {"modelPath": "/m/a"}})
    assert await repo.put_if(copy(first), newer_than(first, 2))
    older_revision = Document("catalog", 2, 4, {"stale": {}})
    older_term = Document("catalog", 1, 9, {"deposed": {}})
    for doc in (older_revision, older_term, first):
        stored = await repo.put_if(copy(doc), newer_than(doc, 2))
        assert not stored
    newer = Document("catalog", 3, 6, {"b": {}})
    assert await repo.put_if(copy(newer), newer_than(newer, 2))
    await db.close()

    reopened = Database(url)
    try:
        copies = await ControlRepository(reopened).all()
        assert copies == {"catalog": StoredCopy("catalog", 3, 6, {"b": {}})}
    finally:
        await reopened.close()
