"""Profile reconciliation: a memory profile measured on one pod admits loads on every pod.

Every pod keeps its profiles in its own database and says in each heartbeat
which version of them it holds (``profilesVersion``, ``ProfileRepository.version``).
The leader, level-triggered, every heartbeat interval:

1. collects (``routes.PROFILES``, ``GET /internal/memory-profiles``) the profiles of every healthy
   pod whose version it has not collected yet, which covers a pod that joins,
   restarts or measures a new profile; and all of them again every
   ``SARDEENZ_CLUSTER_PROFILE_SYNC_INTERVAL_SECONDS``;
2. merges them (:func:`merge_profiles`): one profile per model + context
   length (``maxTokens``) + GPU type, the newest measurement wins, and the
   number of distinct measurements of that key (and the pods holding them)
   is kept;
3. pushes the merged set (``routes.PROFILES_PUSH``, fenced by its term) to
   every pod that has not received this set at its current version.
   The pod stores the profiles it lacks (``ProfileRepository.merge``: by id,
   idempotent) and answers its new version and profiles.

The pod's own ledger then finds the profile like any other (``memory.fit``
prefers the same length, then the same GPU model, then the newest), so a
profile measured on pod A admits or refuses a load on pod C. Nothing is
deleted by the sync: a pod keeps its older measurements (the newest wins the
choice anyway), and a profile deleted on one pod comes back from the others
at the next sync; delete it on every pod to forget it. Calls time out
(``SARDEENZ_CLUSTER_REQUEST_TIMEOUT_SECONDS``) and a pod that fails is retried
with exponential backoff up to the sync interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from sardeenz.asgi import ascii_int
from sardeenz.cluster.membership.election import PeerState
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.leader_loop import LeaderLoop
from sardeenz.cluster.transport.server import Handler, InternalRequest
from sardeenz.config import Settings
from sardeenz.errors import SardeenzError
from sardeenz.store.profiles import ProfileRepository
from sardeenz.store.records import MemoryProfile

log = logging.getLogger(__name__)

ProfileKey = tuple[str, int, str | None]


def profile_key(p: MemoryProfile) -> ProfileKey:
    """What makes two profiles measurements of the same thing: model, length, GPU type."""
    return (p.model_path, p.max_tokens, p.gpu_name)


@dataclass(frozen=True, slots=True)
class MergedProfile:
    profile: MemoryProfile
    """The newest measurement of its key."""
    count: int
    """Distinct measurements (profile ids) of this key across the cluster."""
    pods: tuple[str, ...]
    """Pods that held a measurement of this key when it was collected."""

    def as_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile.model_dump(mode="json"),
            "count": self.count,
            "pods": list(self.pods),
        }


def merge_profiles(per_pod: Mapping[str, Sequence[MemoryProfile]]) -> list[MergedProfile]:
    """Deduplicate the profiles of every pod (pure): the newest per key wins, counts kept.

    Newest is the later ``updatedAt`` (else ``createdAt``), ties to the larger id,
    so every leader merges the same inputs into the same set.
    """
    ids: dict[ProfileKey, set[str]] = {}
    pods: dict[ProfileKey, set[str]] = {}
    best: dict[ProfileKey, MemoryProfile] = {}
    for pod, profiles in per_pod.items():
        for p in profiles:
            key = profile_key(p)
            ids.setdefault(key, set()).add(p.id)
            pods.setdefault(key, set()).add(pod)
            current = best.get(key)
            if current is None or _newer(p, current):
                best[key] = p
    return [
        MergedProfile(best[k], len(ids[k]), tuple(sorted(pods[k])))
        for k in sorted(best, key=lambda k: (k[0], k[1], k[2] or ""))
    ]


def _newer(a: MemoryProfile, b: MemoryProfile) -> bool:
    return ((a.updated_at or a.created_at), a.id) > ((b.updated_at or b.created_at), b.id)


class _Push(BaseModel):
    profiles: list[MemoryProfile] = Field(default_factory=list, max_length=100_000)
    counts: dict[str, int] = Field(default_factory=dict)
    """profile id -> measurements of its key (shown by GET /api/cluster/memory-profiles)."""
    pods: dict[str, list[str]] = Field(default_factory=dict)


@dataclass
class _PodSync:
    version: str | None = None
    """The version collected last."""
    profiles: list[MemoryProfile] = field(default_factory=list)
    pushed: tuple[tuple[str, ...], str | None] | None = None
    """(merged set's ids, the pod's version after it) of the last push."""
    fails: int = 0
    retry_at: float = 0.0


class ProfileSync:
    """The leader's reconciliation loop, and the pod side of ``/internal/memory-profiles``."""

    def __init__(self, membership: Membership, settings: Settings, repo: ProfileRepository) -> None:
        self._m = membership
        self._repo = repo
        s = settings
        self._tick = s.cluster_heartbeat_interval_seconds
        self._every = s.cluster_profile_sync_interval_seconds
        self._pods: dict[str, _PodSync] = {}
        self._merged: list[MergedProfile] = []
        self._next_full = 0.0
        self._loop = LeaderLoop(
            "sardeenz-profile-sync",
            membership.is_leader,
            self.reconcile,
            self._tick,
            on_follow=self._follow,
        )

    # --------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self._m.active:
            self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        return [(routes.PROFILES, lambda _: self.local()), (routes.PROFILES_PUSH, self.receive)]

    # ---------------------------------------------------------------- pod side
    async def local(self) -> dict[str, Any]:
        """``GET /internal/memory-profiles``: this pod's profiles and their version."""
        version = self._repo.version
        profiles = await self._repo.list_all()
        return {
            "podId": self._m.identity.pod_id,
            "version": version,
            "profiles": [p.model_dump(mode="json") for p in profiles],
        }

    async def receive(self, request: InternalRequest) -> dict[str, Any]:
        """``POST /internal/memory-profiles``: store the leader's merged set (fenced)."""
        push = request.parse(_Push)
        added = await self._repo.merge(push.profiles)
        if added:
            log.info("profile sync: %d profile(s) from the leader stored", added)
        if not self._m.is_leader():
            self._merged = [
                MergedProfile(p, push.counts.get(p.id, 1), tuple(push.pods.get(p.id, [])))
                for p in push.profiles
            ]
        return await self.local()

    def merged(self) -> dict[str, Any]:
        """``GET /api/cluster/memory-profiles``: the merged set (the leader's, or the last
        one this pod received), with counts."""
        return {
            "podId": self._m.identity.pod_id,
            "leader": self._m.leader(),
            "profiles": [m.as_json() for m in self._merged],
        }

    # ------------------------------------------------------------- leader side
    def _follow(self) -> None:
        self._pods.clear()  # a new leader term starts from scratch
        self._next_full = 0.0

    async def reconcile(self) -> None:
        """One level-triggered round: collect what changed, merge, push what is behind."""
        m = self._m
        now = m.now()
        if now >= self._next_full:
            self._next_full = now + self._every
            for state in self._pods.values():
                state.version = None
        me = m.identity.pod_id
        current = {me: self._repo.version}
        for peer in m.peers.all():
            hb = peer.heartbeat
            if hb is not None and m.detector.state(peer.pod_id, now) is PeerState.HEALTHY:
                current[peer.pod_id] = hb.profiles_version or ""
        for gone in set(self._pods) - set(current):  # left or unhealthy: no say for now
            del self._pods[gone]
        await asyncio.gather(
            *(
                self._collect(pod, version)
                for pod, version in current.items()
                if self._behind(pod, version, now)
            )
        )
        self._merged = merge_profiles({p: s.profiles for p, s in self._pods.items()})
        digest = tuple(mp.profile.id for mp in self._merged)
        pushes = [
            pod
            for pod, state in self._pods.items()
            if state.pushed != (digest, state.version) and now >= state.retry_at
        ]
        if pushes:
            await asyncio.gather(*(self._push(pod, digest) for pod in pushes))

    def _behind(self, pod: str, version: str, now: float) -> bool:
        state = self._pods.get(pod)
        if state is None:
            return True
        return now >= state.retry_at and state.version != version and not _older(version, state)

    async def _collect(self, pod: str, version: str) -> None:
        if pod == self._m.identity.pod_id:
            data: dict[str, Any] | None = await self.local()
        else:
            data = await self._m.client_for(pod).ask(pod, routes.PROFILES)
        self._record(pod, data)

    def _record(self, pod: str, data: dict[str, Any] | None) -> None:
        state = self._pods.setdefault(pod, _PodSync())
        try:
            if data is None:
                raise ValueError("no answer")
            profiles = [MemoryProfile.model_validate(p) for p in data["profiles"]]
            version = str(data["version"])
        except (ValueError, KeyError, TypeError) as exc:
            state.fails += 1
            state.retry_at = self._m.now() + min(self._every, self._tick * 2**state.fails)
            log.debug("profile sync: pod %s: %s", pod, exc)
            return
        state.fails, state.retry_at = 0, 0.0
        state.version, state.profiles = version, profiles

    async def _push(self, pod: str, digest: tuple[str, ...]) -> None:
        body = _Push(
            profiles=[mp.profile for mp in self._merged],
            counts={mp.profile.id: mp.count for mp in self._merged},
            pods={mp.profile.id: list(mp.pods) for mp in self._merged},
        )
        if pod == self._m.identity.pod_id:
            await self._repo.merge(body.profiles)
            data: dict[str, Any] | None = await self.local()
        else:
            try:
                data = await self._m.client_for(pod).call(
                    pod, routes.PROFILES_PUSH, body.model_dump(mode="json")
                )
            except SardeenzError as exc:
                log.warning("profile sync: push to %s failed: %s", pod, exc.message)
                data = None
        self._record(pod, data)
        state = self._pods.get(pod)
        if data is not None and state is not None:
            state.pushed = (digest, state.version)


def _older(version: str, state: _PodSync) -> bool:
    """A heartbeat that left before our last exchange with the pod (same process, lower
    counter): nothing new to collect."""
    if state.version is None:
        return False
    token, _, n = version.rpartition(":")
    mine, _, m = state.version.rpartition(":")
    theirs, ours = ascii_int(n), ascii_int(m)
    return token == mine and theirs is not None and ours is not None and theirs < ours
