"""Where a request for a LoRA adapter goes, across the cluster: pure decisions.

Two questions, answered from what the pod knows now (its own slot book, its peers'
heartbeats), with no I/O so they are unit tested (tests/unit/test_adapterroute.py):

* **Which holder?** Of the instances (on any pod) that hold the adapter loaded, the
  one with the fewest of its requests in flight, a local one on a tie (no network
  hop). A holder with ``saturation`` requests in flight or more is saturated; when
  every holder is, the caller loads the adapter into one more instance (and falls
  back to the least busy holder when there is none to load into).
* **Which pod loads it?** Of the pods that run an active instance of the base that
  does not hold the adapter, the first in rendezvous (highest random weight) order of
  ``(adapter, pod)``. Every pod that sees the same set of candidate pods picks the
  same one, so concurrent first requests entering different pods are all sent to
  one pod, whose single-flight load serves them all: one load cluster-wide while the
  pods agree on where the base runs (they learn it from heartbeats, so for at most
  a heartbeat interval after a change, at most one load per differing view).
  Rendezvous hashing also spreads a base's adapters evenly over its pods.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Holder", "PeerAdapters", "Placement", "load_pod", "pick_holder", "rendezvous"]


@dataclass(frozen=True, slots=True)
class Holder:
    """One instance holding the adapter loaded, seen from this pod."""

    endpoint_id: str
    """The routing table's endpoint id: an instance id here, ``pod/instance`` elsewhere."""
    inflight: int
    """Its requests in flight for the adapter (another pod's: as this pod best knows)."""
    local: bool


def pick_holder(holders: Sequence[Holder], saturation: int) -> tuple[Holder | None, bool]:
    """The holder to send a request to and whether every holder is saturated.

    ``(None, False)`` when nothing holds it. When every holder is saturated the
    least busy one is still returned (with ``True``): the caller tries to load the
    adapter elsewhere first and sends the request there only if it cannot.
    """
    if not holders:
        return None, False
    best = min(holders, key=lambda h: (h.inflight, not h.local, h.endpoint_id))
    return best, best.inflight >= saturation


def _score(adapter: str, pod: str) -> int:
    digest = hashlib.blake2b(f"{adapter}\0{pod}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rendezvous(adapter: str, pods: Iterable[str]) -> list[str]:
    """``pods`` in rendezvous order for ``adapter`` (the same on every pod)."""
    return sorted(set(pods), key=lambda p: (-_score(adapter, p), p))


def load_pod(adapter: str, candidates: Iterable[str]) -> str | None:
    """The pod that loads ``adapter``: the first candidate in rendezvous order."""
    order = rendezvous(adapter, candidates)
    return order[0] if order else None


class PeerAdapters(Protocol):
    """The adapters other pods' instances hold, from their heartbeats
    (cluster/remote_routes.py)."""

    @property
    def version(self) -> int:
        """Changes whenever what the peers hold changes."""

    def adapters_of(self, endpoint_id: str) -> Mapping[str, int] | None:
        """``pod/instance`` -> {adapter it holds loaded: its requests in flight}, or None
        when that instance is not known to hold any."""

    def sleeping_with(self, adapter: str) -> bool:
        """Does a sleeping instance on another pod keep ``adapter``?"""

    def placements(self, adapter: str) -> list[tuple[str, int, bool]]:
        """``(pod/instance, requests in flight, asleep)`` of each peer instance holding it."""


@dataclass(frozen=True, slots=True)
class Placement:
    """One instance holding an adapter (``GET /api/v1/adapters``)."""

    pod_id: str | None
    instance_id: str
    inflight: int
    asleep: bool
