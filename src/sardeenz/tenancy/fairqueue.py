"""The order in which a saturated model's waiting requests are let in: pure logic.

Why its own module, with no clock, no asyncio and no proxy: the order is the
whole claim of fair sharing (a quiet tenant is not starved by a noisy one; an
``interactive`` request passes every ``batch`` one), and it is tested alone,
request by request (tests/unit/test_fairqueue.py). The proxy's gate
(proxy/fairgate.py) owns the slots, the futures and the clock, and asks this
queue only "who is next?".

The discipline is start-time fair queuing (SFQ, Goyal et al. 1996), a form of
weighted fair queuing that needs no estimate of a request's length:

* each request gets a start tag ``S = max(V, F[tenant])`` when it joins, and
  its tenant's finish tag moves to ``F[tenant] = S + cost / weight``;
* the request with the smallest start tag goes first (ties: the one that joined
  first), and the virtual time ``V`` becomes its tag.

A tenant with weight 2 gets twice the turns of a tenant with weight 1 while
both wait; a tenant that sent nothing for a while starts at ``V``, ahead of
every request a backlogged tenant queued beyond its share: its first request
waits for at most one turn of each other tenant, whatever their queue length.
That is what keeps a quiet tenant's latency flat beside a noisy one.

Priority classes are strict: every ``interactive`` request goes before any
``batch`` one; each class has its own virtual time and tags (a tenant's batch
traffic does not use up its interactive share). With fairness off (``fair=False``)
a class is plain first come, first served: the difference the benchmark shows.

A request that leaves while waiting (its client gone, its wait over) is removed
lazily: marked, and skipped when it reaches the head, so leaving is O(1).
"""

from __future__ import annotations

import heapq
from typing import Final

PRIORITIES: Final = ("interactive", "batch")
"""Priority classes, first served first; a request's ``priority`` is an index here."""
INTERACTIVE: Final = 0
BATCH: Final = 1


def priority_index(name: str) -> int | None:
    """The index of a priority class by name; None for an unknown name."""
    try:
        return PRIORITIES.index(name)
    except ValueError:
        return None


class Entry:
    """One waiting request as the queue sees it (the gate subclasses it)."""

    __slots__ = ("cost", "priority", "queued", "seq", "tag", "tenant", "weight")

    def __init__(self, tenant: str, weight: float, priority: int, cost: float = 1.0) -> None:
        self.tenant = tenant
        self.weight = weight
        self.priority = priority
        self.cost = cost
        self.tag = 0.0
        self.seq = 0
        self.queued = False
        """In the queue: set by ``push``, cleared by ``pop`` and ``remove``."""

    def __lt__(self, other: Entry) -> bool:
        return (self.tag, self.seq) < (other.tag, other.seq)


class _Class:
    """The state of one priority class: its heap, virtual time and tenants' finish tags."""

    __slots__ = ("finish", "heap", "virtual")

    def __init__(self) -> None:
        self.heap: list[Entry] = []
        self.virtual = 0.0
        self.finish: dict[str, float] = {}


class FairQueue:
    """One model's waiting requests, bounded to ``max_length``; see module doc."""

    def __init__(self, max_length: int, *, fair: bool = True) -> None:
        if max_length < 1:
            raise ValueError("max_length must be at least 1")
        self.max_length = max_length
        self.fair = fair
        self._classes = tuple(_Class() for _ in PRIORITIES)
        self._seq = 0
        self.length = 0
        """Requests waiting (removed ones excluded)."""
        self.by_tenant: dict[str, int] = {}
        """Requests waiting per tenant (for the metrics; zero counts are dropped)."""

    def __len__(self) -> int:
        return self.length

    def push(self, entry: Entry) -> bool:
        """Queue ``entry``, tagging it; False (and nothing changes) when the queue is full."""
        if self.length >= self.max_length:
            return False
        self._seq += 1
        entry.seq = self._seq
        cls = self._classes[entry.priority]
        if self.fair:
            start = max(cls.virtual, cls.finish.get(entry.tenant, 0.0))
            cls.finish[entry.tenant] = start + entry.cost / entry.weight
            entry.tag = start
        else:
            entry.tag = float(entry.seq)  # first come, first served
        entry.queued = True
        heapq.heappush(cls.heap, entry)
        self.length += 1
        self.by_tenant[entry.tenant] = self.by_tenant.get(entry.tenant, 0) + 1
        return True

    def pop(self) -> Entry | None:
        """The next request to let in (the first class first), or None if none waits."""
        for cls in self._classes:
            heap = cls.heap
            while heap:
                entry = heapq.heappop(heap)
                if not entry.queued:
                    continue  # removed while it waited
                entry.queued = False
                if self.fair:
                    cls.virtual = entry.tag
                self._left(entry)
                return entry
        return None

    def remove(self, entry: Entry) -> bool:
        """Take a waiting ``entry`` out (lazily); False if it was not waiting.

        Its tenant keeps the finish tag it got: the turn it gave up is not handed
        back, so leaving and rejoining does not move a tenant ahead.
        """
        if not entry.queued:
            return False
        entry.queued = False
        self._left(entry)
        heap = self._classes[entry.priority].heap
        if self.length == 0:
            for cls in self._classes:
                cls.heap.clear()  # nothing live in them: drop the marked ones now
        elif len(heap) > 2 * self.length + 64:
            # Mostly marked entries (many clients left): rebuild, so memory stays bounded.
            live = [e for e in heap if e.queued]
            heapq.heapify(live)
            self._classes[entry.priority].heap = live
        return True

    def _left(self, entry: Entry) -> None:
        self.length -= 1
        n = self.by_tenant[entry.tenant] - 1
        if n:
            self.by_tenant[entry.tenant] = n
        else:
            del self.by_tenant[entry.tenant]

    def position(self, entry: Entry) -> int:
        """How many waiting requests go before ``entry`` (for tests and diagnostics; O(n))."""
        if not entry.queued:
            raise ValueError("entry is not waiting")
        ahead = 0
        for index, cls in enumerate(self._classes):
            if index < entry.priority:
                ahead += sum(1 for e in cls.heap if e.queued)
            elif index == entry.priority:
                ahead += sum(1 for e in cls.heap if e.queued and e < entry)
        return ahead
