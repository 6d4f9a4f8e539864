"""The inference proxy: a plain ASGI handler that relays requests to engines.

Why plain ASGI and not a FastAPI route: this runs on every inference request
the express path (express.py) does not take, and a route would add request
parsing, dependency resolution and response classes we do not need. Here a
request costs: one header pass, one body read, one ``orjson.loads`` (to find
``model``), one routing-table lookup, one upstream request on a pooled
keep-alive connection, and a relay loop that hands each upstream chunk to the
client as it arrives (no SSE parsing, no re-encoding, no buffering of streams).

This module is the front door: ``InferenceProxy`` (the one public entry point;
app.py, gateway.py, cluster/wiring.py and the standalone proxy hold it) owns the
lifecycle and decides, for each request, whether and where it goes. The parts:

* reading the request (limit, JSON, ``model``): proxy/intake.py;
* a key scoped to some models (security/auth.py ``ApiKey``) asking for another
  model: 403 ``model_not_allowed``, and refusals in the request log: proxy/usage.py;
* a key of a tenant over one of its limits: 429 ``rate_limit_exceeded`` with
  ``Retry-After`` (tenancy/admission.py decides; proxy/usage.py answers);
* ``GET /v1/models``, and the 404 for an unknown model: proxy/listing.py;
  a model nothing serves that the applied preset declares (``desired``) is
  between replicas: 503 ``model_not_ready`` instead (proxy/waiting.py);
* a model that is still ``starting`` or ``sleeping`` holds the request until it
  is active or ``proxy_ready_wait_seconds`` pass (then 503 with ``Retry-After``):
  proxy/waiting.py;
* forwarding and relaying (connect failure: the next endpoint once, then 503;
  the engine dying before or after the response started; the client going
  away; the request log entry of a relayed request): proxy/asgirelay.py, whose
  ``AsgiRelay`` this class extends; another pod or an external server:
  proxy/remote.py. What the client sees on an engine failure is decided in
  relay.py, shared with the express path.

Client mistakes (bad JSON, no ``model``, body too large, unknown model) are
answered here with an OpenAI-shaped error, never forwarded. Every ``/v1``
request, answered or refused, is noted in the request log (proxy/reqlog.py)
when it ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from sardeenz.asgi import Receive, Scope, Send
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus
from sardeenz.proxy import metrics
from sardeenz.proxy.asgirelay import AsgiRelay
from sardeenz.proxy.demand import Demand
from sardeenz.proxy.fairgate import PRIORITY_HEADER, requested_priority
from sardeenz.proxy.inflight import Inflight
from sardeenz.proxy.intake import Disconnected, RequestReader, parse_json, with_model
from sardeenz.proxy.listing import ModelListing, unknown_model
from sardeenz.proxy.metrics import DIRECT_MODEL, UNKNOWN_MODEL
from sardeenz.proxy.remote import RemoteHeaders as RemoteHeaders  # its old home, re-exported
from sardeenz.proxy.remote import entered_here, to_another_pod
from sardeenz.proxy.routing import Endpoint, RoutingTable
from sardeenz.proxy.upstream import UpstreamClient
from sardeenz.proxy.usage import allowed, note_refused, rate_limited
from sardeenz.proxy.waiting import between_replicas
from sardeenz.proxy.wire import (
    API_KEY_SCOPE,
    GATE_SCOPE,
    TICKET_SCOPE,
    ErrorReply,
    api_error,
    header,
    openai_error,
    send_json,
    without_credentials,
)
from sardeenz.runtime.identity import (
    LISTEN,
    PortOwnership,
    engine_port_ownership,
    sockets_on_port,
)
from sardeenz.security.auth import ApiKey
from sardeenz.tenancy.admission import Admission, Rejection

_perf = time.perf_counter


class InferenceProxy(AsgiRelay):
    """Relays ``/v1/*`` and ``/api/direct/{port}/*`` to engines; see module doc.

    One instance per process. ``start()`` creates the pooled upstream client
    (``upstream.UpstreamClient``, chosen by measurement: benchmarks/README.md);
    ``close()`` closes it. This is the one place that registers
    ``metrics.observe_instance`` on the table, so the instance-status gauge
    follows the table however it is fed (supervisor events or static routes).
    The attributes other parts use or set (``demand``, ``inflight``,
    ``requests``, ``remote_headers``, ``client``, ``table``, ``warn``) are
    ``AsgiRelay``'s.
    """

    def __init__(
        self,
        settings: Settings,
        table: RoutingTable,
        remote_headers: RemoteHeaders | None = None,
        *,
        hop_header: bytes | None = None,
        demand: Demand | None = None,
        inflight: Inflight | None = None,
        pod: str | None = None,
        verify_direct: bool = True,
        admission: Admission | None = None,
    ) -> None:
        super().__init__(
            settings,
            table,
            remote_headers,
            hop_header=hop_header,
            demand=demand,
            inflight=inflight,
            pod=pod,
            admission=admission,
        )
        self._reader = RequestReader(settings.proxy_max_body_bytes)
        self.verify_direct = verify_direct
        """Check an engine's process tree owns its port before a direct request; False
        only in the standalone proxy, whose engines were started by someone else."""
        self._listing = ModelListing(table)
        self.desired: Callable[[str], bool] | None = None
        """Whether the cluster means to serve a name (the applied preset's
        ``PresetService.declares``); asked only when nothing serves the name."""
        table.add_listener(metrics.observe_instance)
        for inst in table.instances():
            metrics.observe_instance(None, inst)

    def _between_replicas(self, model: str) -> ErrorReply | None:
        """The 503 for a model nothing serves that the applied preset declares; None for
        a model the cluster does not mean to serve (a 404)."""
        desired = self.desired
        if desired is not None and desired(model):
            return between_replicas(model, self._ready_wait)
        return None

    # -------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Create the pooled upstream client (must run on the serving loop)."""
        if self._client is None:
            # Retire an idle connection before the engine would close it
            # (engines get VLLM_HTTP_TIMEOUT_KEEP_ALIVE = engine_keepalive_seconds).
            keepalive = max(1.0, self._settings.engine_keepalive_seconds - 2.0)
            self._client = UpstreamClient(keepalive_timeout=keepalive)
        self.requests.start()

    async def close(self) -> None:
        await self.requests.close()
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    # ------------------------------------------------------------------ /v1/*
    async def handle_v1(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI handler for every ``/v1/...`` path."""
        t0 = _perf()
        method: str = scope["method"]
        path: str = scope["path"]
        is_models = path == "/v1/models" or path.startswith("/v1/models/")
        if method == "POST" and not is_models:
            await self._inference(scope, receive, send, t0)
        elif is_models and method in ("GET", "HEAD"):
            await self._listing.answer(
                path,
                send,
                method == "HEAD",
                scope.get(API_KEY_SCOPE),
                self.demand,
                self._between_replicas,
            )
        else:
            allow = b"GET" if is_models else b"POST"
            body = openai_error(
                f"Method {method} is not allowed on {path[:200]} (use {allow.decode()})",
                "invalid_request_error",
                "method_not_allowed",
            )
            await send_json(send, 405, body, [(b"allow", allow)])

    async def _inference(self, scope: Scope, receive: Receive, send: Send, t0: float) -> None:
        table = self._table
        key: ApiKey | None = scope.get(API_KEY_SCOPE)
        asked: str | None = None
        try:
            headers = self._reader.headers(scope, json_default=True)
            body = await self._reader.body(receive)
            body_bytes = len(body)
            payload = parse_json(body)
            model = payload.get("model")
            if not isinstance(model, str) or not model:
                raise ErrorReply(
                    400,
                    "you must provide a model parameter"
                    if model is None
                    else "'model' must be a non-empty string",
                    "invalid_request_error",
                    "missing_model" if model is None else "invalid_model",
                    "model",
                )
            asked = model
            if key is not None and not allowed(key, model, self.demand):
                raise ErrorReply(
                    403,
                    f"This API key may not use the model {model[:200]!r}",
                    "invalid_request_error",
                    "model_not_allowed",
                    "model",
                )
            ep = table.pick(model)
            if ep is None:
                demand = self.demand
                served = demand.resolve(model) if demand is not None else None
                if served is not None and served != model:  # an alias: the engine knows
                    model, body = served, with_model(payload, served)  # the served name
                    ep = table.pick(model)
                elif served is None and not table.is_known(model):
                    raise self._between_replicas(model) or unknown_model(table, demand, model, key)
            gate = self.gate
            share = None
            priority: int | None = None
            if gate.on:
                share = self.admission.share_of(key.member) if key is not None else None
                wanted = header(scope["headers"], PRIORITY_HEADER)
                found = requested_priority(wanted, share[2] if share else "interactive")
                if isinstance(found, ErrorReply):
                    raise found
                priority = found
            verdict = None
            if (
                key is not None
                and self.admission.active
                and (ep is None or not to_another_pod(ep, self.hop_header, scope["headers"]))
            ):
                # (admitted, and billed, once: by the pod that serves it)
                verdict = self.admission.admit(key.member, model, payload, body_bytes)
                if isinstance(verdict, Rejection):
                    self.admission.metered(verdict)
                    raise rate_limited(verdict)
                if verdict is not None:
                    scope[TICKET_SCOPE] = verdict  # settled when the request ends
            if priority is not None:
                # A LoRA adapter takes the slots of its base model's instances.
                base = demand.parent(model) if (demand := self.demand) is not None else None
                place = gate.join(
                    base or model, share[0] if share else None, share[1] if share else 1, priority
                )
                if isinstance(place, ErrorReply):
                    if verdict is not None:
                        scope.pop(TICKET_SCOPE).cancel()  # refused: costs the tenant nothing
                    raise place
                scope[GATE_SCOPE] = place  # left when the request ends
        except ErrorReply as r:
            status = await r.send(send, True)
            metrics.for_model(UNKNOWN_MODEL).count(status)
            if entered_here(self.hop_header, scope["headers"]):
                note_refused(self.requests, t0, status, asked, key)
            return
        except Disconnected:
            metrics.for_model(UNKNOWN_MODEL).count(499)
            if entered_here(self.hop_header, scope["headers"]):
                note_refused(self.requests, t0, 499, asked, key)
            return
        mm = metrics.for_model(model)
        url_path: bytes = scope.get("raw_path") or scope["path"].encode()
        await self._guarded(
            scope, receive, send, t0, mm, ep, model, url_path, body, headers, openai=True
        )

    # ------------------------------------------------------ /api/direct/{port}
    async def _engine_owns(self, port: int) -> ErrorReply | None:
        """None when ``port`` is served by the process tree of its instance's engine.

        The proxy routes only ``active`` instances, whose identity the runner checked
        (runtime/identity.py); a direct request may target an instance in any status,
        so it checks here, each time: after an engine failed, whatever process binds its
        port next must not receive requests (nor, below, anyone's credentials).
        """
        views = [v for v in self._table.on_port(port) if v.status is not InstanceStatus.FAILED]
        pids = [v.process_id for v in views if v.process_id is not None]
        if not pids:
            return ErrorReply(
                502,
                f"no running engine uses port {port} (its instance failed or has no process)",
                "api_error",
                "engine_not_running",
            )
        owner = await asyncio.to_thread(_ownership, port, pids)
        if owner.foreign or not owner.own:
            why = owner.describe_foreign() if owner.foreign else f"nothing listens on {port}"
            return ErrorReply(
                502,
                f"port {port} is not served by its engine alone: {why}",
                "api_error",
                "engine_not_verified",
            )
        return None

    async def handle_direct(
        self, scope: Scope, receive: Receive, send: Send, port: int, path: str
    ) -> None:
        """ASGI handler for ``/api/direct/{port}/{path}``: any method, no routing.

        Only ports of instances this node manages (any status but ``failed``) are
        reachable, and only while the engine's own process tree listens there: this
        is a debugging aid, not an open relay to arbitrary local ports. The caller's
        ``Authorization`` and ``Cookie`` are never forwarded.
        """
        t0 = _perf()
        mm = metrics.for_model(DIRECT_MODEL)
        if not self._table.known_port(port):
            mm.count(404)
            await send_json(
                send, 404, api_error(f"no instance on this node uses port {port}", "unknown_port")
            )
            return
        refusal = await self._engine_owns(port) if self.verify_direct else None
        if refusal is not None:
            mm.count(await refusal.send(send, False))
            return
        try:
            headers = without_credentials(self._reader.headers(scope, json_default=False))
            body = await self._reader.body(receive)
        except ErrorReply as r:
            mm.count(await r.send(send, False))
            return
        except Disconnected:
            mm.count(499)
            return
        host = self._table.engine_host
        host_url = f"[{host}]" if ":" in host else host
        ep = Endpoint(
            instance_id=f"port:{port}",
            served_name=DIRECT_MODEL,
            host=host,
            port=port,
            base_url=f"http://{host_url}:{port}",
        )
        url_path = ("/" + path.lstrip("/")).encode()
        await self._guarded(
            scope, receive, send, t0, mm, ep, None, url_path, body, headers, openai=False
        )


def _ownership(port: int, pids: list[int]) -> PortOwnership:
    """The port's listeners against the trees of every instance said to use it (blocks)."""
    listeners = sockets_on_port(port, {LISTEN})  # one read of the kernel's tables for all
    found = [engine_port_ownership(port, pid, listeners) for pid in pids]
    good = next((o for o in found if o.served_by_own_tree), None)
    return good if good is not None else found[0]
