"""Catalog entries with ``engine: external``: servers Sardeenz routes to but does not run.

An operator puts an existing OpenAI-compatible server (another vLLM, a llama.cpp
server, a gateway) behind this node's endpoint by naming it in the catalog. Such a
server is never started, slept or unloaded; one background loop health-checks every
external entry every ``external_check_seconds`` (``GET /health``, or ``/v1/models``
for a server without one) and publishes the healthy ones into the routing table as
endpoints of their own source (``RoutingTable.set_remote``), so requests reach them
through the same proxy paths, express included, with the same metrics.

The API key is read from the entry's ``apiKeyEnv`` / ``apiKeyFile`` at every check
(a rotated key is picked up; catalog/keys.py says which variables and files may
be named), kept only in the endpoint's ``ExternalTarget`` (whose
repr hides it) and sent only to that server: never in the catalog, a response or a
log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import math
import socket
import time
from dataclasses import dataclass, field
from typing import cast

import httpx
import psutil

from sardeenz.catalog.keys import KeySources, KeyUnavailable, read_key
from sardeenz.catalog.models import CatalogState
from sardeenz.catalog.registry import Catalog
from sardeenz.catalog.validation import ExternalUrl, is_external, parse_external_url
from sardeenz.config import Settings
from sardeenz.proxy.routing import REMOTE_WEIGHT, Endpoint, ExternalTarget, RoutingTable
from sardeenz.proxy.wire import ErrorReply
from sardeenz.store.records import CatalogEntry
from sardeenz.tasks import await_within, stop_task
from sardeenz.tls import client_tls

log = logging.getLogger(__name__)

SOURCE = "catalog:external"
"""The routing table's name for the endpoints this module contributes."""
_PROBE_TIMEOUT = 3.0


@dataclass(slots=True)
class _Server:
    name: str
    entry: CatalogEntry
    url: ExternalUrl
    state: str = "starting"
    """starting (not checked yet), active, unreachable, or failed (no usable key)."""
    error: str | None = None
    endpoint: Endpoint | None = None
    since: int = field(default_factory=lambda: int(time.time()))


class ExternalServers:
    """Health checks and routes the catalog's external servers; owns one task."""

    def __init__(self, settings: Settings, catalog: Catalog, table: RoutingTable) -> None:
        self._catalog = catalog
        self._table = table
        self._interval = settings.external_check_seconds
        self._key_sources = KeySources.from_settings(settings)
        self._host, self._port = settings.host, settings.port
        self._servers: dict[str, _Server] = {}
        self._published: list[Endpoint] = []
        self._kick = asyncio.Event()
        self._round_done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._http: httpx.AsyncClient | None = None
        self.version = 0
        """Bumped whenever a server's state or error changes (``/v1/models`` caches)."""

    # ------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self._task is not None:
            return
        self._http = httpx.AsyncClient(
            timeout=_PROBE_TIMEOUT, follow_redirects=False, verify=client_tls()
        )
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="sardeenz-external-health"
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()
        if self._published:
            self._published = []
            self._table.set_remote(SOURCE, [])

    # -------------------------------------------------------------- checks
    async def refusal(self, entry: CatalogEntry) -> str | None:
        """Why an external entry may not be stored (``PUT``), or None.

        What can be known before a request: its key source (catalog/keys.py) and a
        ``url`` that is this server's own address and port, which would send every
        request back here (the ``Via`` check of proxy/remote.py catches loops through
        other servers, at request time).
        """
        why = self._key_sources.refusal(entry)
        if why is not None or entry.url is None:
            return why
        url = parse_external_url(entry.url)
        if url.port == self._port and await self._is_own_address(url.host):
            return (
                f"url: {url.base} is this server's own address: requests for the entry "
                "would come back here (a forwarding loop)"
            )
        return None

    async def _is_own_address(self, host: str) -> bool:
        """Does ``host`` reach this server's listening socket (at our port)?"""
        own = await _addresses(self._host)
        wildcard = any(a.is_unspecified for a in own)
        for addr in await _addresses(host):
            if addr.is_unspecified or addr in own:
                return True
            if wildcard and (addr.is_loopback or addr in await _interface_addresses()):
                return True
        return False

    # ----------------------------------------------------------------- reads
    def manages(self, name: str) -> bool:
        entry = self._catalog.entry(name)
        return entry is not None and is_external(entry)

    def state(self, name: str) -> str | None:
        """``GET /v1/models``'s state of an external entry, None for other names."""
        if not self.manages(name):
            return None
        server = self._servers.get(name)
        return server.state if server is not None else "starting"

    def catalog_state(self, name: str) -> tuple[CatalogState, str | None] | None:
        """(state, why) for ``GET /api/v1/catalog``; None for a name that is not external."""
        state = self.state(name)
        if state is None:
            return None
        server = self._servers.get(name)
        return cast(CatalogState, state), server.error if server is not None else None

    async def wait(self, name: str) -> Endpoint | ErrorReply:
        """A request for an external entry that is not routable: wait for its first
        check if it has had none, then route or answer 503 with the reason."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * _PROBE_TIMEOUT + 1
        while (server := self._servers.get(name)) is None or (
            # "active" is set during a round, published to the table at its end
            server.state == "starting"
            or (server.state == "active" and not self._published_as(name))
        ):
            remaining = deadline - loop.time()
            if remaining <= 0 or self._task is None:
                break
            done = self._round_done
            self._kick.set()
            with contextlib.suppress(TimeoutError):
                await await_within(done.wait(), remaining)
        ep = self._table.pick(name)
        if ep is not None:
            return ep
        state = server.state if server is not None else "starting"
        why = server.error if server is not None and server.error else "not checked yet"
        return ErrorReply(
            503,
            f"Model {name!r} is served by an external server that is {state}: {why}",
            "service_unavailable_error",
            "model_unreachable",
            headers=[(b"retry-after", str(max(1, math.ceil(self._interval))).encode())],
        )

    def _published_as(self, name: str) -> bool:
        return any(ep.served_name == name for ep in self._published)

    # ------------------------------------------------------------- the loop
    async def _run(self) -> None:
        while True:
            try:
                await self.check_all()
            except Exception:  # one bad round must not stop the checks
                log.exception("health check of external servers failed")
            done, self._round_done = self._round_done, asyncio.Event()
            done.set()
            with contextlib.suppress(TimeoutError):
                await await_within(self._kick.wait(), self._interval)
            self._kick.clear()

    async def check_all(self) -> None:
        """Follow the catalog (entries added, changed, removed), check every server,
        and publish the healthy ones to the routing table."""
        entries = {n: e for n, e in self._catalog.entries().items() if is_external(e)}
        for name in [n for n in self._servers if n not in entries]:
            del self._servers[name]
            self.version += 1
        for name, entry in entries.items():
            server = self._servers.get(name)
            if server is None or server.entry != entry:
                assert entry.url is not None  # checked by validation
                self._servers[name] = _Server(name, entry, parse_external_url(entry.url))
                self.version += 1
        await asyncio.gather(*(self._check(s) for s in list(self._servers.values())))
        eps = [
            s.endpoint
            for s in self._servers.values()
            if s.state == "active" and s.endpoint is not None
        ]
        if eps != self._published:
            self._published = eps
            self._table.set_remote(SOURCE, eps)

    async def _check(self, server: _Server) -> None:
        try:
            key = await read_key(server.entry, self._key_sources)
        except KeyUnavailable as exc:
            self._set(server, "failed", str(exc), None)
            return
        error = await self._probe(server.url, key)
        if error is not None:
            self._set(server, "unreachable", error, None)
            return
        entry = server.entry
        target = ExternalTarget(
            path_prefix=server.url.prefix.encode(),
            auth=b"authorization: Bearer %s\r\n" % key.encode() if key else b"",
            model=entry.model_path if entry.model_path != server.name else None,
        )
        ep = server.endpoint
        if ep is None or ep.external != target:
            if ep is None:
                server.since = int(time.time())
            ep = Endpoint(
                instance_id=f"external:{server.name}",
                served_name=server.name,
                host=server.url.host,
                port=server.url.port,
                base_url=server.url.base,
                weight=REMOTE_WEIGHT,
                local=False,
                created=server.since,
                external=target,
            )
        self._set(server, "active", None, ep)

    async def _probe(self, url: ExternalUrl, key: str | None) -> str | None:
        """None when the server answers; else why not (never containing the key)."""
        http = self._http
        if http is None:
            return "not checked (shutting down)"
        base = url.base
        try:
            resp = await http.get(f"{base}/health")
            if resp.status_code == 200:
                return None
            if resp.status_code in (404, 405):  # no /health: ask for its models
                headers = {"authorization": f"Bearer {key}"} if key else {}
                resp = await http.get(f"{base}/v1/models", headers=headers)
                if resp.status_code == 200:
                    return None
                return f"GET {base}/v1/models answered {resp.status_code}"
            return f"GET {base}/health answered {resp.status_code}"
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__} on GET {base}/health"

    def _set(self, server: _Server, state: str, error: str | None, ep: Endpoint | None) -> None:
        if server.state != state or server.error != error:
            if state == "active":
                log.info("external server %s (%s) is reachable", server.name, server.url.base)
            else:
                log.warning("external server %s is %s: %s", server.name, state, error)
            self.version += 1
        server.state, server.error, server.endpoint = state, error, ep


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


async def _addresses(host: str) -> set[Address]:
    """The IP addresses ``host`` resolves to (empty when it does not, within 2 s)."""
    with contextlib.suppress(ValueError):
        return {ipaddress.ip_address(host.strip("[]"))}
    loop = asyncio.get_running_loop()
    try:
        infos = await await_within(
            loop.getaddrinfo(host, None, type=socket.SOCK_STREAM), _PROBE_TIMEOUT
        )
    except (OSError, TimeoutError):
        return set()
    found: set[Address] = set()
    for info in infos:
        with contextlib.suppress(ValueError):
            found.add(ipaddress.ip_address(str(info[4][0]).split("%")[0]))
    return found


async def _interface_addresses() -> set[Address]:
    """Every address of this host's interfaces (a wildcard bind listens on them all)."""

    def read() -> set[Address]:
        found: set[Address] = set()
        for addrs in psutil.net_if_addrs().values():
            for a in addrs:
                if a.family in (socket.AF_INET, socket.AF_INET6):
                    with contextlib.suppress(ValueError):
                        found.add(ipaddress.ip_address(a.address.split("%")[0]))
        return found

    return await asyncio.to_thread(read)
