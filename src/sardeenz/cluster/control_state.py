"""The replicated register as a service: the leader writes, every pod keeps a copy.

The rules are cluster/replicated.py's; this module moves the copies:

* **Write** (leader only, :meth:`ControlRegister.update`): under one lock, the
  change is applied to the current body, the new copy stored here and sent to
  every live pod (``POST /internal/control/write``, fenced by the term); the
  call returns once a majority of the cluster size stored it, and raises 503
  ``no_quorum`` when that cannot happen (the copies already sent stay: such a
  write may still take effect, as any unacknowledged write may). The sends to
  the remaining pods finish in the background.
* **Adoption**: a pod that becomes leader is not *ready* until it has read the
  copies of a majority (``POST /internal/control/read``, which also fences the
  old leader: its pods have now seen the new term), adopted the newest copy of
  each key and written it again under its own term to a majority. Until then
  its writes wait (then 503 ``control_state_not_ready``) and the features that
  act on the control state (preset reconcile, moves) wait too (:meth:`ready`).
* **Catch-up**: the ready leader re-sends every copy a live pod has not
  acknowledged (a pod that was down, partitioned or is new), and everything
  every ``RESEND_ALL_SECONDS`` (a pod whose data directory was replaced).
* **Listeners**: a feature subscribes to a key and is told each body this pod
  receives or adopts from another pod (a follower's catalog reloads, its
  preset table is replaced). Its own writes it applies itself.

A single node has no peers: a write is stored here (majority of one) and
nothing is sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from sardeenz.cluster.control import Change, Listener, not_ready
from sardeenz.cluster.membership.election import PeerState
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.replicated import (
    KEYS,
    Document,
    Verdict,
    decide,
    newest,
    quorum,
    successor,
)
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.leader_loop import LeaderLoop
from sardeenz.cluster.transport.server import Handler, InternalRequest, StaleTerm
from sardeenz.errors import InvalidRequest, SardeenzError, Unavailable
from sardeenz.store.control import ControlRepository, StoredCopy
from sardeenz.tasks import stop_task

log = logging.getLogger(__name__)

TICK_SECONDS = 0.2
RESEND_ALL_SECONDS = 30.0
RETRY_SECONDS = 1.0


class _Write(BaseModel):
    term: int = Field(ge=0)
    document: dict[str, Any]


class ControlRegister:
    def __init__(self, membership: Membership, repo: ControlRepository) -> None:
        self._m = membership
        self._repo = repo
        self._copies: dict[str, Document] = {}
        self._lock = asyncio.Lock()
        """One write at a time (the leader's)."""
        self._storing = asyncio.Lock()
        """One copy stored at a time (any pod)."""
        self._ready_term: int | None = None
        self._listeners: dict[str, list[Listener]] = {}
        self._seeds: dict[str, Callable[[], Awaitable[Any]]] = {}
        self._on_ready: list[Callable[[], Awaitable[None]]] = []
        self._acked: dict[str, dict[str, tuple[int, int]]] = {}
        self._resend_at = 0.0
        self._failed_at: dict[str, float] = {}
        """Pod -> when a send to it last failed: catch-up retries it after RETRY_SECONDS."""
        self._loop = LeaderLoop(
            "control-register",
            membership.is_leader,
            self._tick,
            TICK_SECONDS,
            on_follow=self._follow,
        )
        self._sends: set[asyncio.Task[bool]] = set()
        self.write_timeout = max(5.0, 4 * membership.settings.cluster_request_timeout_seconds)
        """Bound on one write: reaching a majority, or waiting to be ready."""

    # ------------------------------------------------------------- lifecycle
    async def load(self) -> None:
        """Read this pod's copies (before any feature reads its body)."""
        self._copies = {k: _doc(c) for k, c in (await self._repo.all()).items()}

    def start(self) -> None:
        if self._m.active:
            self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        for task in list(self._sends):
            await stop_task(task)

    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        return [
            (routes.CONTROL_WRITE, self.receive_write),
            (routes.CONTROL_READ, self.receive_read),
        ]

    # -------------------------------------------------------------- features
    def subscribe(self, key: str, listener: Listener) -> None:
        """``listener(body)`` for every copy of ``key`` this pod takes from another."""
        self._listeners.setdefault(key, []).append(listener)

    def seed(self, key: str, initial: Callable[[], Awaitable[Any]]) -> None:
        """What a first leader writes for ``key`` when no pod holds a copy (the state an
        earlier version kept per pod, e.g. its preset table)."""
        self._seeds[key] = initial

    def when_ready(self, action: Callable[[], Awaitable[None]]) -> None:
        """Run ``action`` each time this pod becomes a ready leader (moves resume)."""
        self._on_ready.append(action)

    @property
    def replicated(self) -> bool:
        """False on a single node: there is nothing to replicate to (nor to resume)."""
        return self._m.active

    def body(self, key: str, default: Any = None) -> Any:
        doc = self._copies.get(key)
        return doc.body if doc is not None else default

    def ready(self) -> bool:
        """A leader that has adopted the newest control state of its term (single node:
        always): only then may it act on that state."""
        m = self._m
        if not m.active:
            return True
        return m.is_leader() and self._ready_term == m.leadership.term

    def warnings(self) -> list[str]:
        return []  # a copy is checked when it is received: a bad one is refused then

    def view(self) -> dict[str, Any]:
        """``GET /api/cluster/control``: this pod's copies (not redirected)."""
        return {
            "podId": self._m.identity.pod_id,
            "store": "pods",
            "ready": self.ready() if self._m.is_leader() else None,
            "documents": [self._copies[k].as_json() for k in KEYS if k in self._copies],
        }

    async def update(self, key: str, change: Change) -> Document:
        """Write ``await change(current body)`` as the new copy of ``key``; returns once
        a majority stored it (503 ``no_quorum`` / ``control_state_not_ready`` if not)."""
        await self._wait_ready()
        async with self._lock:
            if not self.ready():
                raise _not_ready(self._m)
            body = await change(self.body(key))
            doc = successor(self._copies.get(key), key, self._m.leadership.term, body)
            await self._replicate(doc)
            return doc

    # ------------------------------------------------------------ pod side
    async def receive_write(self, request: InternalRequest) -> dict[str, Any]:
        """``POST /internal/control/write``: store a copy if it is newer (the router has
        fenced the order's term already; the copy's own term is checked here)."""
        try:
            msg = request.parse(_Write)
            doc = Document.from_json(msg.document)
        except (ValidationError, KeyError, ValueError, TypeError) as exc:
            raise InvalidRequest(
                f"bad control document: {exc}"[:500], code="invalid_request"
            ) from exc
        if doc.term != msg.term:
            raise StaleTerm(doc.term, self._m.current_term())
        verdict = await self._offer(doc, tell=True)
        if verdict is Verdict.STALE_TERM:
            raise StaleTerm(doc.term, self._m.current_term())
        return {"key": doc.key, "stored": list(self._copies[doc.key].version)}

    async def receive_read(self, request: InternalRequest) -> dict[str, Any]:
        """``POST /internal/control/read``: a new leader reads our copies; its term, now
        seen here (the route is fenced), refuses any later write of the leader before it."""
        return {"documents": [d.as_json() for d in self._copies.values()]}

    # -------------------------------------------------------------- internals
    async def _offer(self, doc: Document, *, tell: bool = False, fenced: bool = True) -> Verdict:
        """Store ``doc`` here if it is newer (and, with ``tell``, hand it to the features).
        ``fenced=False``: a copy this leader adopted, written under an older term.

        One copy at a time: two copies of a key arriving together (a write and a
        catch-up re-send) must not leave the older one in memory or applied last.
        """
        verdict = Verdict.KEEP

        def replaces(held: StoredCopy | None) -> bool:
            nonlocal verdict
            seen = self._m.leadership.term if fenced else doc.term
            verdict = decide(_doc(held) if held is not None else None, doc, seen)
            return verdict is Verdict.STORE

        async with self._storing:
            await self._repo.put_if(_copy(doc), replaces)
            if verdict is Verdict.STORE:
                self._copies[doc.key] = doc
                if tell:
                    await self._tell(doc)
        return verdict

    async def _tell(self, doc: Document) -> None:
        for listener in self._listeners.get(doc.key, []):
            try:
                await listener(doc.body)
            except Exception:  # the copy is stored; the feature catches up on the next one
                log.exception("control state: applying %s r%d failed", doc.key, doc.revision)

    async def _replicate(self, doc: Document) -> None:
        """Store here, send to every live pod, return once a majority holds ``doc``."""
        m = self._m
        if await self._offer(doc) is not Verdict.STORE:
            raise _not_ready(m)  # a newer term reached us meanwhile: we no longer lead
        need = quorum(m.cluster_size()) if m.active else 1
        stored = 1
        if stored >= need:
            self._start_sends(doc, self._live_peers())
            return
        pending = self._start_sends(doc, self._live_peers())
        deadline = time.monotonic() + self.write_timeout
        while pending and stored < need:
            done, pending = await asyncio.wait(
                pending,
                timeout=max(0.0, deadline - time.monotonic()),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:
                break
            stored += sum(1 for t in done if not t.cancelled() and t.result())
        if stored < need:
            raise Unavailable(
                f"{doc.key} r{doc.revision}: stored by {stored} of the {need} pods a write "
                f"needs (cluster of {m.cluster_size()}); not acknowledged, retry when a "
                "majority of the pods is reachable",
                code="no_quorum",
            )

    def _start_sends(self, doc: Document, pods: list[str]) -> set[asyncio.Task[bool]]:
        tasks = {asyncio.create_task(self._send(p, doc), name=f"control-{p}") for p in pods}
        self._sends |= tasks
        for t in tasks:
            t.add_done_callback(self._sends.discard)
        return tasks

    async def _send(self, pod_id: str, doc: Document) -> bool:
        try:
            client = self._m.client_for(pod_id)
            data = await client.call(
                pod_id,
                routes.CONTROL_WRITE,
                {"document": doc.as_json()},
                timeout=self.write_timeout,
            )
        except SardeenzError as exc:
            self._failed_at[pod_id] = time.monotonic()
            log.info("control state: %s r%d to %s failed: %s", doc.key, doc.revision, pod_id, exc)
            return False
        self._failed_at.pop(pod_id, None)
        stored = data.get("stored")
        if isinstance(stored, list) and len(stored) == 2:
            self._acked.setdefault(pod_id, {})[doc.key] = (int(stored[0]), int(stored[1]))
        return True

    def _live_peers(self) -> list[str]:
        m = self._m
        now = m.now()
        return [
            p.pod_id
            for p in m.peers.all()
            if m.detector.state(p.pod_id, now) is not PeerState.UNAVAILABLE
        ]

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.write_timeout
        while not self.ready():
            if not self._m.is_leader() or time.monotonic() > deadline:
                raise _not_ready(self._m)
            await asyncio.sleep(TICK_SECONDS)

    def _follow(self) -> None:
        """Not leading: what this pod adopted as a leader is of no use to the next term."""
        self._ready_term = None
        self._acked.clear()

    async def _tick(self) -> None:
        """One round on the leader (the loop runs it only there)."""
        m = self._m
        term = m.leadership.term
        if self._ready_term != term:
            if await self._adopt(term):
                self._ready_term = term
                log.warning("control state: adopted in term %d; this leader may act", term)
                for action in self._on_ready:
                    try:
                        await action()
                    except Exception:
                        log.exception("control state: a ready action failed")
            return
        await self._catch_up()

    async def _adopt(self, term: int) -> bool:
        """Read a majority, keep the newest copy of each key, write it under ``term``."""
        m = self._m
        peers = self._live_peers()
        answers = await asyncio.gather(*(self._read(p) for p in peers))
        heard = [a for a in answers if a is not None]
        need = quorum(m.cluster_size())
        if 1 + len(heard) < need:
            log.info("control state: %d of %d pods answered the read", 1 + len(heard), need)
            return False
        async with self._lock:
            for key in KEYS:
                mine = self._copies.get(key)
                best = newest([mine, *(a.get(key) for a in heard)])
                if best is None:
                    seed = self._seeds.get(key)
                    if seed is None:
                        continue
                    body = await seed()
                    if body is None:
                        continue
                    best = Document(key, 0, 0, body)
                elif mine is None or best.version > mine.version:
                    # A majority's state, newer than ours: ours first (the features read
                    # it from here), then the features.
                    await self._offer(best, tell=True, fenced=False)
                if not m.is_leader() or m.leadership.term != term:
                    return False
                try:
                    await self._replicate(successor(best, key, term, best.body))
                except SardeenzError as exc:
                    log.info("control state: re-writing %s failed: %s", key, exc)
                    return False
        return m.is_leader() and m.leadership.term == term

    async def _read(self, pod_id: str) -> dict[str, Document] | None:
        try:
            client = self._m.client_for(pod_id)
            data = await client.call(pod_id, routes.CONTROL_READ, {}, timeout=self.write_timeout)
            docs = [Document.from_json(d) for d in data.get("documents", [])]
        except (SardeenzError, KeyError, ValueError, TypeError) as exc:
            log.info("control state: read from %s failed: %s", pod_id, exc)
            return None
        return {d.key: d for d in docs}

    async def _catch_up(self) -> None:
        now = time.monotonic()
        if now >= self._resend_at:
            self._resend_at = now + RESEND_ALL_SECONDS
            self._acked.clear()
        busy = {t.get_name() for t in self._sends}
        for pod in self._live_peers():
            if (
                f"control-{pod}" in busy
                or now - self._failed_at.get(pod, -RETRY_SECONDS) < RETRY_SECONDS
            ):
                continue
            acked = self._acked.get(pod, {})
            for doc in self._copies.values():
                if acked.get(doc.key) != doc.version:
                    self._start_sends(doc, [pod])


def _doc(copy: StoredCopy) -> Document:
    return Document(copy.key, copy.term, copy.revision, copy.body)


def _copy(doc: Document) -> StoredCopy:
    return StoredCopy(doc.key, doc.term, doc.revision, doc.body)


def _not_ready(m: Membership) -> Unavailable:
    return not_ready(
        m.is_leader(), "a majority of the pods (just elected, or a majority is unreachable)"
    )
