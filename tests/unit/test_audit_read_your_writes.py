"""A read of the audit trail sees every request that finished before it (security/audit.py).

The writer is a background task, so a slow disk puts it behind the responses; a script
that deletes something and then reads the trail must still find the deletion there.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sardeenz.security.audit import AuditTrail
from sardeenz.store.audit import AuditEntry, AuditRepository
from sardeenz.store.db import Database
from testkit.waiting import within


class SlowDisk(AuditRepository):
    """Writes wait until the test opens the gate."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.gate = asyncio.Event()

    async def add(self, entry: AuditEntry) -> None:
        await self.gate.wait()
        await super().add(entry)


async def _delete(request: Request) -> JSONResponse:
    return JSONResponse({"deleted": request.path_params["name"]})


async def test_a_read_waits_for_the_entries_of_requests_that_finished_before_it(
    tmp_path: Path,
) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    await db.migrate()
    repo = SlowDisk(db)
    trail = AuditTrail(repo)
    app = Starlette(routes=[Route("/api/v1/tenants/{name}", _delete, methods=["DELETE"])])
    transport = httpx.ASGITransport(app=trail.wrap(app))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://sz") as client:
            for name in ("a", "b"):
                assert (await client.delete(f"/api/v1/tenants/{name}")).status_code == 200
        assert await repo.list() == []  # the writer is stuck behind the slow disk

        read = asyncio.create_task(trail.entries())
        await asyncio.sleep(0.05)
        assert not read.done(), "the read did not wait for the writer"
        repo.gate.set()
        entries = await within(read, 5, "the read, once the writer got past the slow disk")
        assert [(e.method, e.path) for e in entries] == [
            ("DELETE", "/api/v1/tenants/b"),
            ("DELETE", "/api/v1/tenants/a"),
        ]
        assert [e.status for e in entries] == [200, 200]
    finally:
        repo.gate.set()  # close() writes what is queued
        await trail.close()
        await db.close()


async def test_a_read_with_nothing_queued_does_not_wait(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    await db.migrate()
    trail = AuditTrail(SlowDisk(db))  # a gate never opened: any write would hang
    try:
        assert await within(trail.entries(), 5, "a read with nothing queued") == []
    finally:
        await trail.close()
        await db.close()
