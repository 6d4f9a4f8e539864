"""Kubernetes mode's control state: one ConfigMap per document, kept by the API server.

The API server is already a consensus store (etcd's quorum): a write it
acknowledged is durable and every later read sees it, whichever pod reads. So
nothing is replicated by hand here (static mode's cluster/control_state.py):

* **Reads** are a watch of the ``sardeenz.io/control=document`` ConfigMaps
  (list, then watch from the list's resourceVersion; 410 Gone or any failure:
  list again after a backoff), level-triggered: this pod's view becomes the API
  server's, and each change is handed to the features that subscribed (a
  follower's catalog reloads, its preset table is replaced), but for the echo
  of this pod's own write, which the features made. A pod that was
  restarted or partitioned lists on its way back. The last view is also kept
  in this pod's SQLite (the same table as static mode's copies), so a pod that
  starts while the API server is unreachable serves its last catalog.
* **Writes** stay the leader's (a follower answers 307, as in static mode: the
  features that act on the state, preset reconcile and moves, run there, and
  an operator sees one behaviour whatever the mode). Each write is an update
  naming the resourceVersion it read (cluster/control_configmap.py): on 409 it
  re-reads, applies its change to what it read and retries, bounded. It is
  acknowledged once the API server accepted it: a leader killed right after
  loses nothing, the next one reads it.
* **Fencing**: a new leader is *ready* once it has listed the documents (a
  consistent read) and written each again under its own term; a deposed
  leader's later write then conflicts, re-reads a newer term, and is refused
  (503 ``no_leader``).
* A ConfigMap that does not decode is reported (log, ``GET /api/cluster/status``
  warnings, ``GET /api/cluster/control``) and never applied; writes of that
  document are refused (409 ``control_document_corrupt``) until it is fixed or
  deleted. A deleted ConfigMap is written again by the leader from its copy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sardeenz.cluster.control import Change, Listener, not_ready
from sardeenz.cluster.control_configmap import (
    SELECTOR,
    ConflictRetries,
    CorruptDocument,
    WriteConflict,
    decode,
    encode,
    key_of,
    name_of,
    retry_on_conflict,
)
from sardeenz.cluster.control_watch import ConfigMapWatch
from sardeenz.cluster.membership.kube_api import KubeApi, describe, status_code
from sardeenz.cluster.replicated import KEYS, Document, successor
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.backoff import Backoff as RetrySchedule
from sardeenz.cluster.transport.leader_loop import LeaderLoop
from sardeenz.cluster.transport.server import Handler
from sardeenz.config import Settings
from sardeenz.errors import Conflict, InvalidRequest, SardeenzError, Unavailable
from sardeenz.store.control import ControlRepository, StoredCopy
from sardeenz.tasks import stop_task

log = logging.getLogger(__name__)

TICK_SECONDS = 0.2
MAX_BACKOFF_SECONDS = 30.0
ROUND = "round"
RESOURCE = "configmaps"
WHERE = "the Kubernetes API server (just elected, or the API server is unreachable)"


class KubeControlState:
    """cluster/control.py's ``ControlState`` over ConfigMaps."""

    def __init__(
        self,
        pod_id: str,
        leads: Callable[[], bool],
        term: Callable[[], int],
        api: Callable[[], KubeApi | None],
        settings: Settings,
        cache: ControlRepository,
    ) -> None:
        self._pod_id = pod_id
        self._leads = leads
        self._term = term
        self._client = api
        """Membership's API client (started before this, stopped after)."""
        self._cache = cache
        self._copies: dict[str, Document] = {}
        self._versions: dict[str, str] = {}
        """Key -> the ConfigMap's resourceVersion as last seen (absent: no ConfigMap)."""
        self._corrupt: dict[str, CorruptDocument] = {}
        self._writing_now: dict[str, Document] = {}
        """Key -> the document this pod is writing: the watch may bring it back before
        the write returns, and it is this pod's own, not a copy from elsewhere."""
        self._writing = asyncio.Lock()
        """One write at a time (the leader's)."""
        self._applying = asyncio.Lock()
        """One copy taken at a time (the watch's and a write's)."""
        self._ready_term: int | None = None
        self._listeners: dict[str, list[Listener]] = {}
        self._seeds: dict[str, Callable[[], Awaitable[Any]]] = {}
        self._on_ready: list[Callable[[], Awaitable[None]]] = []
        self._watch: ConfigMapWatch | None = None
        self._watching: asyncio.Task[None] | None = None
        self._loop = LeaderLoop(
            "control-configmaps",
            leads,
            self._tick,
            TICK_SECONDS,
            on_follow=self._follow,
        )
        self._retry = settings.kube_retry_period_seconds
        self._rounds = RetrySchedule(self._retry, MAX_BACKOFF_SECONDS)
        """The leader's rounds back off while they fail, as every API call does."""
        self.backoff = ConflictRetries()
        self.write_timeout = max(5.0, 4 * settings.kube_request_timeout_seconds)
        """Bound on waiting to be ready before a write."""

    # ------------------------------------------------------------- lifecycle
    async def load(self) -> None:
        self._copies = {
            k: Document(c.key, c.term, c.revision, c.body)
            for k, c in (await self._cache.all()).items()
        }

    def start(self) -> None:
        if self._watching is None:
            self._watch = ConfigMapWatch(self._api(), self, self._retry)
            self._watching = asyncio.get_running_loop().create_task(
                self._watch.run(), name="sardeenz-kube-control"
            )
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        task, self._watching = self._watching, None
        await stop_task(task)

    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        return []  # the pods never exchange copies: each reads the API server

    # -------------------------------------------------------------- features
    def subscribe(self, key: str, listener: Listener) -> None:
        self._listeners.setdefault(key, []).append(listener)

    def seed(self, key: str, initial: Callable[[], Awaitable[Any]]) -> None:
        self._seeds[key] = initial

    def when_ready(self, action: Callable[[], Awaitable[None]]) -> None:
        self._on_ready.append(action)

    @property
    def replicated(self) -> bool:
        return True

    def body(self, key: str, default: Any = None) -> Any:
        doc = self._copies.get(key)
        return doc.body if doc is not None else default

    def ready(self) -> bool:
        return self._leads() and self._ready_term == self._term()

    def view(self) -> dict[str, Any]:
        return {
            "podId": self._pod_id,
            "store": "kubernetes",
            "ready": self.ready() if self._leads() else None,
            "documents": [self._copies[k].as_json() for k in KEYS if k in self._copies],
            "problems": self.warnings(),
        }

    def warnings(self) -> list[str]:
        return [_corrupt_text(k, c) for k, c in sorted(self._corrupt.items())]

    async def update(self, key: str, change: Change) -> Document:
        deadline = time.monotonic() + self.write_timeout
        while not self.ready():
            if not self._leads() or time.monotonic() > deadline:
                raise not_ready(self._leads(), WHERE)
            await asyncio.sleep(TICK_SECONDS)
        async with self._writing:
            term = self._ready_term
            if term is None or not self.ready():
                raise not_ready(self._leads(), WHERE)
            return await self._write(key, change, term)

    # ----------------------------------------------------------------- write
    def _api(self) -> KubeApi:
        api = self._client()
        if api is None:
            raise Unavailable(
                "the Kubernetes API client is not started", code="control_store_unavailable"
            )
        return api

    async def _write(self, key: str, change: Change, term: int) -> Document:
        """``change`` applied to the API server's copy of ``key`` under ``term``,
        retried on 409 against a fresh read (cluster/control_configmap.py)."""
        api = self._api()

        async def attempt(n: int) -> Document:
            if n:
                await self._reread(api, key)
            if key in self._corrupt:
                raise Conflict(
                    _corrupt_text(key, self._corrupt[key]), code="control_document_corrupt"
                )
            # The copy and its resourceVersion as one snapshot, taken before ``change``
            # awaits: the watch may take a newer one meanwhile, and the write must then
            # conflict, not overwrite it.
            current, version = self._copies.get(key), self._versions.get(key)
            if (current is not None and current.term > term) or self._term() != term:
                raise not_ready(False, WHERE)  # a newer leader wrote: we are deposed
            doc = successor(current, key, term, await change(current.body if current else None))
            manifest = encode(doc, version)  # 413 before the API server refuses it
            verb = "update" if version is not None else "create"
            self._writing_now[key] = doc
            try:
                if version is not None:
                    obj = await api.replace_config_map(name_of(key), manifest)
                else:
                    obj = await api.create_config_map(manifest)
            except asyncio.CancelledError:
                await self._landed_anyway(doc)
                raise
            except Exception as exc:
                await self._landed_anyway(doc)
                raise self._failed(api, verb, key, exc) from exc
            finally:
                self._writing_now.pop(key, None)
            api.allowed(verb, RESOURCE)
            held = self._copies.get(key)
            if held is None or doc.version >= held.version:  # else the watch brought a newer
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                await self._take(doc, rv, tell=False)
            return doc

        return await retry_on_conflict(attempt, f"the cluster's {key}", self.backoff)

    async def _landed_anyway(self, doc: Document) -> None:
        """A write whose call failed (a timeout, a cancel) may still have been stored, and
        its echo taken from the watch without telling the features (``observe``): the
        caller sees an error, yet the copy holds the write, so the features follow it."""
        async with self._applying:
            if self._copies.get(doc.key) == doc:
                await self._tell(doc)

    def _failed(self, api: KubeApi, verb: str, key: str, exc: BaseException) -> Exception:
        status = status_code(exc)
        if status == 409:
            return WriteConflict(key)
        if status == 403:
            problem = api.forbidden(verb, RESOURCE, exc)
            return Unavailable(str(problem), code="kube_forbidden")
        if status == 422:  # refused by validation (a limit encode() does not check)
            return InvalidRequest(
                f"the API server refused {name_of(key)}: {describe(exc)}",
                code="control_document_refused",
            )
        return Unavailable(
            f"the cluster's {key} was not stored: the API server did not answer the "
            f"{verb} ({describe(exc)}); retry",
            code="control_store_unavailable",
        )

    async def _reread(self, api: KubeApi, key: str) -> None:
        """The API server's copy of ``key`` now (after a conflict)."""
        try:
            data = await api.list_config_maps(SELECTOR, f"metadata.name={name_of(key)}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise self._failed(api, "list", key, exc) from exc
        items = data.get("items") or []
        if not items:
            self.gone(key)
        for obj in items:
            await self.observe(obj, fresh=True)

    # ------------------------------------------------------------------ read
    async def observe(self, obj: dict[str, Any], *, fresh: bool) -> None:
        """A ConfigMap as the API server holds it (``fresh``: a list, the current
        state; else a watch event, which may be older than this pod's own write)."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        key = key_of(name)
        if key is None:
            return
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        try:
            stored = decode(obj)
        except CorruptDocument as exc:
            if key not in self._corrupt or str(self._corrupt[key]) != str(exc):
                log.error("control state: %s; not applied (fix or delete the ConfigMap)", exc)
            self._corrupt[key] = exc
            self._versions[key] = version
            return
        if stored is None:
            return
        if self._corrupt.pop(key, None) is not None:
            log.warning("control state: ConfigMap %s decodes again", name)
        held = self._copies.get(key)
        if not fresh and held is not None and stored.doc.version < held.version:
            return  # an event older than a write of ours this pod has taken already
        # This pod's own write, back from the watch before the write returned: taken, not
        # told. Telling it would run a feature's listener inside the feature's own write
        # (its lock held across ``update``, waiting on this: a deadlock), and hand a
        # feature back what it wrote, perhaps after it changed again.
        mine = self._writing_now.get(key) == stored.doc
        await self._take(stored.doc, version, tell=not mine)

    async def _take(self, doc: Document, version: str, *, tell: bool) -> None:
        """Hold ``doc`` as the API server's copy at resourceVersion ``version``.

        The copy and its version change together, with no await between them: a write
        snapshots both, and a new version beside an old copy would let it replace the
        ConfigMap with a body that lacks the newer write (a lost update)."""
        async with self._applying:
            if self._copies.get(doc.key) == doc:
                self._versions[doc.key] = version
                return
            self._copies[doc.key] = doc
            self._versions[doc.key] = version
            await self._cache.put_if(
                StoredCopy(doc.key, doc.term, doc.revision, doc.body), lambda _: True
            )
            if tell:
                await self._tell(doc)

    async def _tell(self, doc: Document) -> None:
        """``doc`` handed to the features that subscribed (``_applying`` held)."""
        for listener in self._listeners.get(doc.key, []):
            try:
                await listener(doc.body)
            except Exception:  # the copy is taken; the feature catches up on the next
                log.exception("control state: applying %s r%d failed", doc.key, doc.revision)

    def gone(self, key: str) -> None:
        """``key``'s ConfigMap is not in the API server (deleted, or never written)."""
        self._versions.pop(key, None)
        self._corrupt.pop(key, None)

    # ---------------------------------------------------------------- leader
    def _follow(self) -> None:
        self._ready_term = None
        self._rounds.ok(ROUND)

    async def _tick(self) -> None:
        if not self._rounds.due(ROUND, time.monotonic()):
            return  # backing off after a failed round (the API server down, a 403)
        term = self._term()
        if self._ready_term != term:
            if not await self._adopt(term):
                self._rounds.failed(ROUND, time.monotonic())
                return
            self._rounds.ok(ROUND)
            self._ready_term = term
            log.warning("control state: read from the API server in term %d", term)
            for action in self._on_ready:
                try:
                    await action()
                except Exception:
                    log.exception("control state: a ready action failed")
            return
        if (
            self._watch is not None and self._watch.listed
        ):  # a ConfigMap deleted by hand: the leader's copy is written again
            for key in [k for k in self._copies if k not in self._versions]:
                async with self._writing:
                    if not await self._rewrite(key, term):
                        self._rounds.failed(ROUND, time.monotonic())
                        return
            self._rounds.ok(ROUND)

    async def _adopt(self, term: int) -> bool:
        """List the documents (a consistent read), then write each again under ``term``
        (or seed it), so that a deposed leader's next write conflicts and is refused."""
        if self._watch is None:
            return False
        api = self._api()
        try:
            await self._watch.relist(api)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if status_code(exc) == 403:
                api.forbidden("list", RESOURCE, exc)
            else:
                log.info("control state: reading the ConfigMaps failed: %s", describe(exc))
            return False
        async with self._writing:
            for key in KEYS:
                if key in self._corrupt:
                    continue  # reported; the other documents still count
                if key not in self._copies:
                    seed = self._seeds.get(key)
                    body = await seed() if seed is not None else None
                    if body is None:
                        continue
                    self._copies[key] = Document(key, 0, 0, body)
                if not await self._rewrite(key, term):
                    return False
        return self._leads() and self._term() == term

    async def _rewrite(self, key: str, term: int) -> bool:
        """This pod's copy of ``key`` written again under ``term`` (if older)."""
        held = self._copies.get(key)
        if held is not None and held.term >= term and key in self._versions:
            return True

        async def same(body: Any) -> Any:
            return body

        try:
            await self._write(key, same, term)
        except SardeenzError as exc:
            if exc.code != "kube_forbidden":  # that one is logged once, by KubeApi.forbidden
                log.info("control state: writing %s again failed: %s", key, exc)
            return False
        return True


def _corrupt_text(key: str, problem: CorruptDocument) -> str:
    return (
        f"control state: {problem} (not applied; writes of the cluster's {key} are refused "
        "until the ConfigMap is fixed, or deleted: the leader then writes its last good copy)"
    )
