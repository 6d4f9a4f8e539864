"""Records every state-changing admin request in the audit trail.

An ASGI wrapper around the admin API: after a POST/PUT/PATCH/DELETE under
``/api`` finishes, it writes who (from the principal the route policy put on
``request.state``), what (method and path, never the query or body, which may
carry secrets), its target, when, and the status. One writer task this object
owns takes the entries from a queue in the order the requests finished, so a
slow disk never delays a response and ids follow time (concurrent writes used to
land out of order); ``close()`` waits for the queue to drain.

A caller reads its own writes: an entry is queued before the last byte of its
response is sent, and a read of the trail first waits (up to ``READ_WAIT_SECONDS``)
for the writer to have taken every entry queued before it. A script that deletes
something and then looks for the deletion in the trail finds it, however far
behind a slow disk has put the writer.

The target is named by the ids the request acted on (instance, model, benchmark
run), read from the route's path parameters, the few naming fields of the
request body (``modelPath``, ``servedModelName``, ``model``), in JSON or
form-encoded alike, and the response (the id of a created instance or run); a
refused request keeps its error ``code``. Only those fields are kept, never the
bodies. A request refused before its route checked the caller (a body that is
not JSON fails before the route's policy runs) is still attributed: the writer
verifies its bearer token itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from collections import deque
from typing import Any

import orjson

from sardeenz.asgi import ASGIApp, Message, Receive, Scope, Send, header
from sardeenz.domain import utcnow
from sardeenz.errors import SardeenzError, is_storage_full
from sardeenz.security.auth import Authenticator, Principal
from sardeenz.security.policy import is_mutation
from sardeenz.store.audit import AuditEntry, AuditRepository
from sardeenz.tasks import await_within

log = logging.getLogger(__name__)

HELD_MAX = 10_000
"""Entries held in memory while the data dir is full (a few hundred bytes each)."""
READ_WAIT_SECONDS = 5.0
"""How long a read of the trail waits for the writer to catch up (a full data dir holds
entries in memory, so the writer only falls this far behind on a disk that stalls)."""
PEEK_BYTES = 64 * 1024
"""How much of a request or response body is looked at for the target's names."""
_MODEL_FIELDS = ("servedModelName", "served_model_name", "modelPath", "model_path", "model")


def outcome_of(status: int) -> str:
    if status in (401, 403):
        return "denied"
    return "ok" if status < 400 else "error"


def _document(body: bytes, content_type: bytes | None) -> dict[str, Any]:
    """The body's top-level fields: a JSON object or a form (other bodies: nothing)."""
    if not body:
        return {}
    ctype = (content_type or b"").split(b";", 1)[0].strip().lower()
    if ctype == b"application/x-www-form-urlencoded":
        try:
            pairs = urllib.parse.parse_qsl(body.decode("utf-8"), max_num_fields=100)
        except (UnicodeDecodeError, ValueError):
            return {}
        return dict(pairs)
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _text(value: Any, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


def target_of(
    scope: Scope, status: int, request: bytes, response: bytes
) -> tuple[str | None, str | None, str | None, str | None]:
    """(instance id, model, run id, refusal code) of a finished mutation."""
    params: dict[str, Any] = scope.get("path_params") or {}
    path: str = scope["path"]
    sent = _document(request, header(scope["headers"], b"content-type"))
    got = _document(response, b"application/json")
    instance = _text(params.get("instance_id"), 64)
    run = _text(params.get("run_id"), 64)
    model = _text(params.get("name"), 512)
    for doc in (got, sent):
        for name in _MODEL_FIELDS:
            model = model or _text(doc.get(name), 512)
    instance = instance or _text(got.get("instanceId"), 64)
    if status < 400 and isinstance(got.get("id"), str):
        if path.startswith("/api/v1/models"):
            instance = instance or _text(got["id"], 64)
        elif path.startswith("/api/benchmarks"):
            run = run or _text(got["id"], 64)
    code = _text(got.get("code"), 64) if status >= 400 else None
    return instance, model, run, code


def _log_lost(entry: AuditEntry, exc: BaseException | None) -> None:
    """An entry that will not be stored, whole in the server log (one line)."""
    log.error(
        "audit entry not stored (%s): %s %s %s by %s at %s",
        "data dir full" if exc is None or is_storage_full(exc) else repr(exc),
        entry.method,
        entry.path,
        entry.status,
        entry.subject,
        entry.at.isoformat(),
    )


class AuditTrail:
    def __init__(self, repo: AuditRepository, auth: Authenticator | None = None) -> None:
        self.repo = repo
        self._auth = auth
        self._queue: asyncio.Queue[tuple[AuditEntry, bytes | None]] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self._held: deque[AuditEntry] = deque()
        """Entries not written yet (the data dir was full), oldest first."""
        self._full = False
        self._queued = 0
        self._taken = 0
        """Entries queued, and those the writer is done with (written, held or lost)."""
        self._progress = asyncio.Event()

    def wrap(self, app: ASGIApp) -> ASGIApp:
        async def audited(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or not is_mutation(scope["method"], scope["path"]):
                await app(scope, receive, send)
                return
            status = 500
            request = bytearray()
            response = bytearray()
            recorded = False

            async def peek_receive() -> Message:
                message = await receive()
                if message["type"] == "http.request" and len(request) < PEEK_BYTES:
                    request.extend(message.get("body", b"")[: PEEK_BYTES - len(request)])
                return message

            async def capture(message: Message) -> None:
                nonlocal status, recorded
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                elif message["type"] == "http.response.body":
                    if len(response) < PEEK_BYTES:
                        response.extend(message.get("body", b"")[: PEEK_BYTES - len(response)])
                    if not message.get("more_body", False):
                        # Queued before the client can have the whole answer (module doc).
                        recorded = True
                        self._record(scope, status, bytes(request), bytes(response))
                await send(message)

            try:
                await app(scope, peek_receive, capture)
            finally:
                if not recorded:
                    self._record(scope, status, bytes(request), bytes(response))

        return audited

    def _record(self, scope: Scope, status: int, request: bytes, response: bytes) -> None:
        principal = scope.get("state", {}).get("principal")
        client = scope.get("client")
        instance, model, run, code = target_of(scope, status, request, response)
        entry = AuditEntry(
            at=utcnow(),
            subject=principal.subject if isinstance(principal, Principal) else "anonymous",
            role=principal.role if isinstance(principal, Principal) else None,
            method=scope["method"],
            path=scope["path"][:1024],
            status=status,
            outcome=outcome_of(status),
            remote=client[0] if client else None,
            instance_id=instance,
            model=model,
            run_id=run,
            code=code,
        )
        # Not checked by the route (refused before its policy ran): the writer checks the
        # token. It stays in memory until then, and is never written.
        unchecked = (
            None if isinstance(principal, Principal) else header(scope["headers"], b"authorization")
        )
        self._queue.put_nowait((entry, unchecked))
        self._queued += 1
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(
                self._drain(), name="audit-writer"
            )

    async def entries(self, limit: int = 100, before_id: int | None = None) -> list[AuditEntry]:
        """The trail, newest first: what ``GET /api/audit`` pages through, with every
        request that finished before this call (module doc)."""
        with contextlib.suppress(TimeoutError):
            await await_within(self._caught_up(self._queued), READ_WAIT_SECONDS)
        return await self.repo.list(limit=limit, before_id=before_id)

    async def _caught_up(self, queued: int) -> None:
        """Until the writer is done with the first ``queued`` entries."""
        while self._taken < queued:
            self._progress.clear()
            await self._progress.wait()

    async def _attribute(self, entry: AuditEntry, authorization: bytes | None) -> AuditEntry:
        auth = self._auth
        if auth is None:
            return entry
        if not auth.enabled:  # no auth: every caller is the local admin, as the route says
            principal = await auth.authenticate(None)
        elif authorization is None:
            return entry
        else:
            try:
                principal = await auth.authenticate(authorization.decode("latin-1"))
            except SardeenzError:
                return entry
        return entry.model_copy(update={"subject": principal.subject, "role": principal.role})

    async def _drain(self) -> None:
        while True:
            entry, authorization = await self._queue.get()
            try:
                if entry.subject == "anonymous":
                    entry = await self._attribute(entry, authorization)
                self._held.append(entry)
                await self._write_held()
            except Exception:  # the trail must never break the API it records
                log.exception("could not write audit entry for %s %s", entry.method, entry.path)
            finally:
                self._queue.task_done()
                self._taken += 1
                self._progress.set()

    async def _write_held(self) -> None:
        """Write the entries held back, oldest first (so ids still follow time).

        With the data dir full they stay held (up to ``HELD_MAX``, one line logged) and
        the next entry, or ``close()``, writes them once there is room; an entry that
        cannot be kept is logged whole, never dropped without a word.
        """
        while self._held:
            entry = self._held[0]
            try:
                await self.repo.add(entry)
            except Exception as exc:
                if is_storage_full(exc) and len(self._held) <= HELD_MAX:
                    if not self._full:
                        log.warning("audit: data dir full; holding entries until it has room")
                    self._full = True
                    return
                self._held.popleft()
                _log_lost(entry, exc)
                continue
            self._held.popleft()
            if self._full:
                log.info("audit: data dir has room again; held entries written")
                self._full = False

    async def close(self) -> None:
        """Write what is queued, then stop the writer."""
        if self._writer is None:
            return
        await self._queue.join()
        with contextlib.suppress(Exception):
            await self._write_held()  # once more: still full, then they are logged below
        while self._held:
            _log_lost(self._held.popleft(), None)
        self._writer.cancel()
        await asyncio.gather(self._writer, return_exceptions=True)
        self._writer = None
