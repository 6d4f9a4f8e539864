"""kvcached limits: every segment of this node capped so the KV caches fit the GPU.

kvcached lets each engine's KV cache grow into whatever GPU memory is free. Left
alone, engines that share a GPU grow until one of them (or a model being loaded
next to them) runs out of memory. kvcached's answer is a per-segment limit
(``kvctl limit <ipc> <bytes>``); this module sets it from the memory ledger's KV
budget, the same figure ``GET /api/v1/gpus`` reports as ``kvCacheTotalBytes``::

    room(GPU) = total - our instances' baselines - other processes
                - memory promised to engines still starting or waking

A sleeping instance keeps its baseline in that sum, so its wake always finds its
memory. The room of a GPU is shared by the segments on it: each may keep what it
uses now and gets an equal share of the rest, so the limits add up to the room
and no segment is cut below its current use (kvcached never takes back pages an
engine already holds; a limit under the use would only stall it).

Level-triggered: desired limits are computed from the whole node and compared
with the limits kvctl reports, on every status change of an instance (load,
unload, sleep, wake: an event on the bus) and every ``RESYNC_SECONDS`` besides,
so a segment that appeared after its event, a failed ``kvctl``, or a limit
someone changed by hand is corrected. One owned task; without ``kvctl`` (no
kvcached installed: simulated or CPU engines) it does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from sardeenz.events import EventBus, RemovedEvent, StatusEvent, Subscription
from sardeenz.gpu.kvcached import IPC_PREFIX, Kvctl, KvctlError, Segment, SegmentTracker
from sardeenz.tasks import await_within, stop_task
from sardeenz.units import gib

log = logging.getLogger(__name__)

RESYNC_SECONDS = 30.0
"""Between two full comparisons when no instance changed (drift, late segments)."""

SLACK_BYTES = 32 * 2**20
"""A limit within this of the desired one is left as it is (usage moves all the time)."""

_SEGMENT_GPUS = re.compile(rf"^{IPC_PREFIX}((?:_GPU\d+)+)(?:_(?:vLLM|SGLang|proc)_\d+(?:_\d+)?)?$")


def segment_gpus(ipc: str) -> list[int] | None:
    """The GPUs a segment name says it lives on (``kvcached_vllm_GPU0_vLLM_4242`` -> [0])."""
    found = _SEGMENT_GPUS.fullmatch(ipc)
    if found is None:
        return None
    return [int(i) for i in re.findall(r"\d+", found.group(1))]


@dataclass(frozen=True, slots=True)
class Change:
    ipc: str
    limit_bytes: int
    before_bytes: int


def plan_limits(room_by_gpu: Mapping[int, int], segments: Iterable[Segment]) -> dict[str, int]:
    """The limit each segment should have: its use plus an equal share of what is free.

    ``room_by_gpu``: bytes of KV cache room on each GPU. A segment on several GPUs (a
    tensor-parallel engine) is bounded by its tightest GPU. Segments on a GPU without a
    known room are left out. Every limit is at least 1 byte (kvctl refuses 0): a GPU
    without room stops every KV cache on it from growing.
    """
    on_gpu: dict[int, list[Segment]] = {}
    gpus_of: dict[str, list[int]] = {}
    for seg in segments:
        gpus = segment_gpus(seg.ipc)
        if not gpus or any(g not in room_by_gpu for g in gpus):
            continue
        gpus_of[seg.ipc] = gpus
        for g in gpus:
            on_gpu.setdefault(g, []).append(seg)
    share: dict[int, int] = {}
    for g, segs in on_gpu.items():
        free = room_by_gpu[g] - sum(s.used_bytes for s in segs)
        share[g] = max(0, free) // len(segs)
    limits: dict[str, int] = {}
    for seg in (s for segs in on_gpu.values() for s in segs):
        limits[seg.ipc] = max(1, seg.used_bytes + min(share[g] for g in gpus_of[seg.ipc]))
    return limits


def changes(
    desired: Mapping[str, int], current: Iterable[Segment], slack: int = SLACK_BYTES
) -> list[Change]:
    """The segments whose limit is off by more than ``slack`` (sorted by name)."""
    out = []
    for seg in current:
        want = desired.get(seg.ipc)
        if want is not None and abs(seg.limit_bytes - want) > slack:
            out.append(Change(seg.ipc, want, seg.limit_bytes))
    return sorted(out, key=lambda c: c.ipc)


RoomByGpu = Callable[[], Awaitable[dict[int, int]]]
"""The ledger's KV room per GPU index (``MemoryLedger.kv_room_by_gpu``)."""


class KvcachedLimits:
    """Owns the task that keeps kvcached limits in step (``start``/``stop``)."""

    def __init__(
        self, bus: EventBus, kvctl: Kvctl, segments: SegmentTracker, room: RoomByGpu
    ) -> None:
        self._bus = bus
        self._kvctl = kvctl
        self._segments = segments
        self._room = room
        self._task: asyncio.Task[None] | None = None
        self._said_no_kvctl = False

    def start(self) -> None:
        if self._task is None:
            sub = self._bus.subscribe()
            self._task = asyncio.get_running_loop().create_task(
                self._run(sub), name="sardeenz-kvcached-limits"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def _run(self, sub: Subscription) -> None:
        try:
            while True:
                try:
                    event = await await_within(sub.get(), RESYNC_SECONDS)
                except TimeoutError:
                    event = None
                if event is not None and not _changes_memory(event):
                    continue
                try:
                    await self.reconcile()
                except Exception:  # one failed pass must not end limit keeping
                    log.exception("kvcached limits: reconcile failed")
        finally:
            sub.close()

    async def reconcile(self) -> list[Change]:
        """Compare and set once; the changes made (empty without kvctl or segments)."""
        if not self._segments.names:
            return []
        if not self._kvctl.available():
            if not self._said_no_kvctl:
                self._said_no_kvctl = True
                log.info("kvcached limits are not applied: kvctl is not installed")
            return []
        try:
            current = [s for s in await self._kvctl.list_segments() if self._segments.owns(s.ipc)]
        except KvctlError as exc:
            log.warning("kvcached limits: cannot list segments: %s", exc)
            return []
        if not current:
            return []
        todo = changes(plan_limits(await self._room(), current), current)
        done = []
        for change in todo:
            try:
                ok = await self._kvctl.set_limit(change.ipc, change.limit_bytes)
            except (KvctlError, ValueError) as exc:
                log.warning("kvcached limits: %s: %s", change.ipc, exc)
                continue
            if ok:
                done.append(change)
                log.info(
                    "kvcached limit of %s: %s (was %s)",
                    change.ipc,
                    gib(change.limit_bytes),
                    gib(change.before_bytes),
                )
        return done


def _changes_memory(event: object) -> bool:
    """A status change or a removal can move memory; log lines and phases cannot."""
    return isinstance(event, StatusEvent | RemovedEvent)
