"""This pod as the cluster sees it: the heartbeat it sends and what it withdraws.

Membership sends the heartbeat; what goes in it comes from here: this pod's
supervisor's instances, its GPU figures (with the memory ledger's promised
bytes), the routing table's version, the memory profiles' version and the
instances it serves but no longer advertises (a move's source on its way out,
cluster/handover.py), the LoRA adapters each instance holds and the version of
its request log (what a peer's collector would pull). Membership
stamps the term and the leader flag it owns, so this module needs nothing of
membership (no cycle between the two).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sardeenz.cluster.identity import Identity
from sardeenz.cluster.membership.peers import GpuFigures, Heartbeat
from sardeenz.gpu.inventory import GpuInfo, GpuInventory
from sardeenz.proxy.routing import RoutingTable
from sardeenz.runtime.supervisor import Supervisor

log = logging.getLogger(__name__)

AdaptersHeld = Callable[[], dict[str, dict[str, int]]]
"""Instance id -> {LoRA adapter loaded: requests in flight} (catalog/adapters.py)."""

PromisedBytes = Callable[[list[GpuInfo]], Awaitable[dict[int, int]]]
"""The memory ledger's promised bytes per GPU of a snapshot."""


@dataclass(frozen=True, slots=True)
class Withdrawal:
    until: float
    """Monotonic expiry; ``math.inf`` for a drain's hold (never advertised again)."""
    term: int
    """The term of the leader order that withdrew the instance: a leader of a later term
    knows the leader that made it is gone and no one will finish what it began."""


class LocalPod:
    def __init__(
        self,
        identity: Identity,
        supervisor: Supervisor,
        table: RoutingTable,
        inventory: GpuInventory,
        *,
        promised_bytes: PromisedBytes | None = None,
        profiles_version: Callable[[], str] | None = None,
    ) -> None:
        self.identity = identity
        self.supervisor = supervisor
        self.table = table
        self.inventory = inventory
        self._promised_bytes = promised_bytes
        self._profiles_version = profiles_version
        self._gpus: list[GpuFigures] = []
        self.request_log_version: Callable[[], str] | None = None
        """What a pull of this pod's request log would answer, digested (set by the
        app's wiring: the collector is built after the cluster core)."""
        self.adapters: AdaptersHeld | None = None
        """The LoRA adapters this pod's instances hold (set by the app's wiring: the
        loader is built after the cluster core)."""
        self.withdrawn: dict[str, Withdrawal] = {}
        """Instance id -> its withdrawal: served here, not advertised to peers (a move's
        source or a surplus copy on its way out, cluster/handover.py). In memory only: a
        pod that restarts advertises every instance it adopts again. Expiry and term so
        that a leader dying mid-move cannot leave an instance unadvertised for ever (the
        next leader advertises a model's last copy again at once, by the term; the
        expiry covers the rest, cluster/ondemand_surplus.py)."""

    @property
    def pod_id(self) -> str:
        return self.identity.pod_id

    async def heartbeat(self, term: int, leading: bool) -> Heartbeat:
        """This pod's heartbeat now, in ``term`` (membership's), ``leading`` or not."""
        try:
            gpus = await self.inventory.snapshot()
            promised = await self._promised_bytes(gpus) if self._promised_bytes else {}
            self._gpus = [
                GpuFigures(
                    index=g.index,
                    name=g.name,
                    total_bytes=g.total_bytes,
                    used_bytes=g.used_bytes,
                    free_bytes=g.free_bytes,
                    simulated=g.simulated,
                    promised_bytes=promised.get(g.index, 0),
                )
                for g in gpus
            ]
        except Exception as exc:  # GPU figures are informative; a heartbeat must still go
            log.debug("GPU snapshot for the heartbeat failed: %s", exc)
        instances = self.supervisor.list_instances()
        return Heartbeat(
            pod_id=self.identity.pod_id,
            host=self.identity.address.host,
            port=self.identity.address.port,
            term=term,
            leader=leading,
            routing_version=self.table.version,
            instances=instances,
            gpus=self._gpus,
            unrouted=self._unrouted({i.id for i in instances}),
            withdrawn_terms=self.withdrawn_terms(),
            held_terms=self.held_terms(),
            adapters=self.adapters() if self.adapters is not None else {},
            profiles_version=self._profiles_version() if self._profiles_version else None,
            request_log_version=self.request_log_version()
            if self.request_log_version is not None
            else None,
        )

    def withdraw(self, instance_id: str, until: float, term: int) -> None:
        """Stop advertising ``instance_id`` until the monotonic time ``until``, on the order
        of the leader of ``term``.

        Never shortens a withdrawal: a held (drained) source's is for good
        (``math.inf``), and a new leader resuming its move withdraws it again.
        """
        old = self.withdrawn.get(instance_id)
        self.withdrawn[instance_id] = Withdrawal(max(until, old.until if old else until), term)

    def withdrawn_terms(self) -> dict[str, int]:
        """Instance id -> the term that withdrew it, for each withdrawal that may end (a
        drain's hold is left out: a held instance must never be advertised again)."""
        now = time.monotonic()  # membership's clock (Membership.now)
        return {i: w.term for i, w in self.withdrawn.items() if now <= w.until < math.inf}

    def held(self, instance_id: str) -> bool:
        """Whether ``instance_id`` was drained for its unload (withdrawn for good)."""
        w = self.withdrawn.get(instance_id)
        return w is not None and w.until == math.inf

    def held_terms(self) -> dict[str, int]:
        """Instance id -> the term of the drain order that held it for its unload."""
        return {i: w.term for i, w in self.withdrawn.items() if w.until == math.inf}

    def restore(self, instance_id: str) -> None:
        """Advertise ``instance_id`` again."""
        self.withdrawn.pop(instance_id, None)

    def _unrouted(self, present: set[str]) -> list[str]:
        now = time.monotonic()  # membership's clock (Membership.now)
        for iid in [i for i, w in self.withdrawn.items() if w.until < now or i not in present]:
            del self.withdrawn[iid]
        return sorted(self.withdrawn)
