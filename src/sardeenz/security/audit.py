"""Records every state-changing admin request in the audit trail.

An ASGI wrapper around the admin API: after a POST/PUT/PATCH/DELETE under
``/api`` finishes, it writes who (from the principal the route policy put on
``request.state``), what (method and path, never the query or body, which may
carry secrets), when, and the status. One writer task this object owns takes
the entries from a queue in the order the requests finished, so a slow disk
never delays a response and ids follow time (concurrent writes used to land
out of order); ``close()`` waits for the queue to drain.
"""

from __future__ import annotations

import asyncio
import logging

from sardeenz.asgi import ASGIApp, Message, Receive, Scope, Send
from sardeenz.domain import utcnow
from sardeenz.security.auth import Principal
from sardeenz.security.policy import is_mutation
from sardeenz.store.audit import AuditEntry, AuditRepository

log = logging.getLogger(__name__)


def outcome_of(status: int) -> str:
    if status in (401, 403):
        return "denied"
    return "ok" if status < 400 else "error"


class AuditTrail:
    def __init__(self, repo: AuditRepository) -> None:
        self.repo = repo
        self._queue: asyncio.Queue[AuditEntry] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None

    def wrap(self, app: ASGIApp) -> ASGIApp:
        async def audited(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or not is_mutation(scope["method"], scope["path"]):
                await app(scope, receive, send)
                return
            status = 500

            async def capture(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                await send(message)

            try:
                await app(scope, receive, capture)
            finally:
                self._record(scope, status)

        return audited

    def _record(self, scope: Scope, status: int) -> None:
        principal = scope.get("state", {}).get("principal")
        client = scope.get("client")
        entry = AuditEntry(
            at=utcnow(),
            subject=principal.subject if isinstance(principal, Principal) else "anonymous",
            role=principal.role if isinstance(principal, Principal) else None,
            method=scope["method"],
            path=scope["path"][:1024],
            status=status,
            outcome=outcome_of(status),
            remote=client[0] if client else None,
        )
        self._queue.put_nowait(entry)
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(
                self._drain(), name="audit-writer"
            )

    async def entries(self, limit: int = 100, before_id: int | None = None) -> list[AuditEntry]:
        """The trail, newest first: what ``GET /api/audit`` pages through."""
        return await self.repo.list(limit=limit, before_id=before_id)

    async def _drain(self) -> None:
        while True:
            entry = await self._queue.get()
            try:
                await self.repo.add(entry)
            except Exception:  # the trail must never break the API it records
                log.exception("could not write audit entry for %s %s", entry.method, entry.path)
            finally:
                self._queue.task_done()

    async def close(self) -> None:
        """Write what is queued, then stop the writer."""
        if self._writer is None:
            return
        await self._queue.join()
        self._writer.cancel()
        await asyncio.gather(self._writer, return_exceptions=True)
        self._writer = None
