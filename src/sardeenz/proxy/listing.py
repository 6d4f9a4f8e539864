"""``GET /v1/models`` and ``/v1/models/{id}``: the models a client may ask for.

Why a module of its own: which names are listed, and with what ``state``, is one
rule that three answers share: the list, one model's card, and the 404 that
names the available models when a request asks for an unknown one. It reads
the routing table and the on-demand catalog (proxy/demand.py) and nothing of
the relay. The list is cached until either changes (their ``version``), except
for a key scoped to some models, which sees only those.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from sardeenz.asgi import Send
from sardeenz.domain import InstanceStatus
from sardeenz.proxy.demand import Demand, model_state
from sardeenz.proxy.routing import RoutingTable
from sardeenz.proxy.wire import ErrorReply, send_json
from sardeenz.security.auth import ApiKey

_LISTED_WAITING: Final = frozenset(
    {InstanceStatus.STARTING, InstanceStatus.SLEEPING, InstanceStatus.ACTIVE}
)
"""Statuses that put a name in ``/v1/models`` when it is not routable (active: held for a
moment while it falls asleep)."""


def unknown_model(
    table: RoutingTable, demand: Demand | None, model: str, key: ApiKey | None = None
) -> ErrorReply:
    """The 404 for a model nothing serves; it lists the names ``key`` may use."""
    names = table.names()
    if demand is not None:  # catalog models are available too
        names = sorted(set(names) | set(demand.names()))
    if key is not None and key.models is not None:  # a scoped key sees its models only
        names = [n for n in names if key.allows(n)]
    shown = ", ".join(names[:50]) + (" ..." if len(names) > 50 else "")
    return ErrorReply(
        404,
        f"The model {model[:200]!r} does not exist. Available models: {shown or '(none)'}",
        "invalid_request_error",
        "model_not_found",
        "model",
    )


class ModelListing:
    """Answers ``/v1/models`` from the routing table and the catalog; one per proxy."""

    def __init__(self, table: RoutingTable) -> None:
        self._table = table
        self._cache: tuple[tuple[int, int], bytes] = ((-1, -1), b"")

    async def answer(
        self,
        path: str,
        send: Send,
        head: bool,
        key: ApiKey | None,
        demand: Demand | None,
        between: Callable[[str], ErrorReply | None] | None = None,
    ) -> None:
        """``GET /v1/models`` (and ``/v1/models/{id}``) from the routing table and catalog.

        A key scoped to some models sees those only (never from the shared cache).
        ``between``: the answer for a model that nothing serves right now but the
        cluster means to serve (between two replicas): the 503 an inference request for
        it gets, so a client checking the model first does not drop it as unknown.
        """
        table = self._table
        on_demand = set(demand.names()) if demand is not None else set()
        scoped = key is not None and key.models is not None
        if scoped and (path == "/v1/models" or path == "/v1/models/"):
            assert key is not None
            names = [n for n in sorted(self._listed_names(on_demand)) if key.allows(n)]
            body = orjson.dumps(
                {"object": "list", "data": [self._card(n, on_demand, demand) for n in names]}
            )
            await send_json(send, 200, b"" if head else body, content_length=len(body))
            return
        if path == "/v1/models" or path == "/v1/models/":
            version, body = self._cache
            now = (table.version, demand.version if demand is not None else 0)
            if version != now:
                names = sorted(self._listed_names(on_demand))
                body = orjson.dumps(
                    {"object": "list", "data": [self._card(n, on_demand, demand) for n in names]}
                )
                self._cache = (now, body)
            await send_json(send, 200, b"" if head else body, content_length=len(body))
            return
        name = path[len("/v1/models/") :]
        allowed = key is None or key.allows(name)
        if name not in self._listed_names(on_demand, only=name) or not allowed:
            reply = between(name) if between is not None and allowed else None
            await (reply or unknown_model(table, demand, name, key)).send(send, True)
            return
        body = orjson.dumps(self._card(name, on_demand, demand))
        await send_json(send, 200, b"" if head else body, content_length=len(body))

    def _listed_names(self, on_demand: set[str], only: str | None = None) -> set[str]:
        """The one rule of what ``/v1/models`` lists: the names a request would be served for.

        Routable names; catalog names (a request starts them); and names whose instances
        are ``starting`` or ``sleeping`` (a request waits for the start, or wakes the model:
        clients such as Open WebUI discover models here). Not ``failed`` or ``stopping``.
        ``only``: the answer for that one name (``/v1/models/{id}``), without a full scan.
        """
        table = self._table
        candidates = [only] if only is not None else table.known_names()
        listed = {n for n in candidates if table.lookup(n) is not None or n in on_demand}
        for name in candidates:
            if name not in listed and any(
                v.status in _LISTED_WAITING for v in table.instances(name)
            ):
                listed.add(name)
        if only is None:
            listed |= on_demand
        return listed

    def _card(self, name: str, on_demand: set[str], demand: Demand | None) -> dict[str, Any]:
        """An OpenAI model card plus ``state``: ``active``, ``starting``, ``sleeping`` (a
        request waits for or wakes it), for catalog models also ``unloaded`` and, for
        external servers, what their health check says. A LoRA adapter also has
        ``parent`` (its base) and is ``active`` while an instance of the base holds it."""
        eps = self._table.endpoints(name)
        card: dict[str, Any] = {
            "id": name,
            "object": "model",
            "created": min((e.created for e in eps), default=0),
            "owned_by": "sardeenz",
        }
        lens = [e.max_model_len for e in eps if e.max_model_len is not None]
        if lens:
            card["max_model_len"] = min(lens)
        known = demand.state(name) if name in on_demand and demand is not None else None
        parent = demand.parent(name) if name in on_demand and demand is not None else None
        if parent is not None:  # a LoRA adapter, listed as vLLM lists one: with its base
            card["parent"] = parent
        if known is not None:  # an external server: its health check knows
            card["state"] = known
        else:
            statuses = {i.status for i in self._table.instances(name)}
            card["state"] = "active" if eps else model_state(statuses)
        return card
