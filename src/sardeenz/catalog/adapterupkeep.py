"""LoRA adapter loads and unloads that no request asks for.

* **A move's target** takes the adapters its source held (``load_into``, through
  cluster/handover.py): into that one instance, a free slot or an idle one, like a
  first request.
* **The idle TTL** (``unload_idle``, run by ``catalog.adapteridle``): adapters of
  active instances unused for the TTL; never one with a request in flight.
* **An operator's unload** (``unload_here``, through cluster/adapter_orders.py):
  from every active instance of this pod; refused while it serves requests.

The request path and the books are the loader's (``catalog.adapters``); this works
through them, so the slot book's two promises hold here too.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from sardeenz.catalog.adapterengine import EngineRefused, InstanceGone
from sardeenz.catalog.metrics import STATS
from sardeenz.domain import InstanceStatus
from sardeenz.errors import Conflict
from sardeenz.store.records import CatalogEntry

if TYPE_CHECKING:
    from sardeenz.catalog.adapters import AdapterLoader

log = logging.getLogger(__name__)

__all__ = ["AdapterUpkeep"]


class AdapterUpkeep:
    def __init__(self, loader: AdapterLoader) -> None:
        self._loader = loader

    async def load_into(self, instance_id: str, name: str, entry: CatalogEntry) -> str | None:
        """Load adapter ``name`` into this pod's instance ``instance_id`` now: None when
        done (or held already), else why not."""
        ld = self._loader
        ep = ld.local_endpoint(instance_id)
        inst = ld.engine.instance(instance_id)
        if ep is None and inst is not None and inst.status is InstanceStatus.ACTIVE:
            # Active a moment ago: the routing updater learns it from the event bus a
            # moment later; tell the table now (apply is idempotent), as a start does.
            ld.table.apply(inst)
            ep = ld.local_endpoint(instance_id)
        if ep is None:
            return f"instance {instance_id} is not active here"
        if name in ld.held(instance_id):
            return None
        await ld.track(ep, entry)
        if not ld.book.has_instance(instance_id):
            return f"instance {instance_id} was not started with LoRA slots"
        reservation = ld.book.reserve(name, [instance_id], time.monotonic())
        if reservation is None:
            return "no free or idle slot"
        try:
            await ld.load_reserved(name, entry, ep, reservation)
        except EngineRefused as exc:
            ld.undo(ep, reservation)
            return exc.message
        except InstanceGone:
            ld.undo(ep, reservation)
            return f"instance {instance_id} left during the load"
        except BaseException:
            ld.undo(ep, reservation)
            raise
        return None

    async def unload_idle(self, ttl: float) -> list[tuple[str, str]]:
        """Unload every adapter of an active local instance idle for ``ttl`` seconds:
        what was unloaded, as (instance id, adapter)."""
        ld = self._loader
        active = {e.instance_id: e for e in ld.table.local_endpoints()}
        expired = ld.book.expire(time.monotonic(), ttl, active)
        for iid, adapter in expired:
            await ld.engine.unload(active[iid], adapter)
            ld.book.forget(iid, adapter)
            ld.changed()
            STATS.adapter_unloaded(adapter, "idle")
            log.info("adapter %s unloaded from %s (idle for %gs)", adapter, iid, ttl)
        return expired

    def busy_here(self, name: str) -> list[str]:
        """This pod's instances where adapter ``name`` has requests in flight."""
        book = self._loader.book
        return [iid for iid in book.holders(name) if book.inflight(iid, name)]

    async def unload_here(self, name: str) -> list[str]:
        """Unload adapter ``name`` from every active instance of this pod that holds it:
        the instances it left. ``Conflict`` (``adapter_in_use``), with nothing unloaded,
        while any of them serves its requests."""
        busy = self.busy_here(name)
        if busy:
            raise Conflict(
                f"LoRA adapter {name!r} has requests in flight on {', '.join(busy)}; "
                "retry once they end",
                code="adapter_in_use",
            )
        # Active instances only: a sleeping engine is not asked anything (it keeps the
        # adapter, and the idle TTL takes it once the base is awake and it is unused).
        ld = self._loader
        local = {e.instance_id: e for e in ld.table.local_endpoints()}
        taken, _ = ld.book.take_idle(name, local)
        for iid in taken:
            await ld.engine.unload(local[iid], name)
            ld.book.forget(iid, name)
            STATS.adapter_unloaded(name, "operator")
            log.info("adapter %s unloaded from %s (by an operator)", name, iid)
        if taken:
            ld.changed()
        return taken
