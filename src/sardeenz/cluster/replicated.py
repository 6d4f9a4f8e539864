"""The replicated register's pure rules: what a document is, which copy wins, when a
write counts, and what a pod does with a copy it is sent.

The cluster's control state (presets, the catalog's API entries, moves in flight,
the API's tenants and their budget counts) is a handful of documents, each written
whole by the leader (a register, not a log: there is nothing to replay, only the
newest copy to keep). Every copy carries the term of the leader that wrote it and a
revision that grows with every write of that key. Copies are ordered term first,
then revision: a new leader re-writes what it adopted under its own term, so its
copy beats any copy a deposed leader managed to leave on a minority (even one with a
higher revision), and that unacknowledged write is dropped everywhere.

* A write is acknowledged once :func:`quorum` pods (the election's majority of
  the cluster size) stored it durably.
* A new leader reads every pod it can reach, needs a majority of answers, and
  adopts the :func:`newest` copy of each key: any acknowledged write was
  stored by a majority, and two majorities share a pod, so it is among them.
* A pod :func:`decide`\\s what to do with a copy it is sent: refuse it when its
  term is older than the newest term the pod has seen (fencing: a deposed
  leader can overwrite nothing), keep the copy it has when that is newer, store
  the new one otherwise.

No I/O here (the service is cluster/control_state.py, the table
store/control.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

KEYS = ("presets", "catalog", "moves", "tenants", "tenant-usage")
"""The documents the cluster replicates (the tenants of the admin API and their budget
counts per pod: cluster/tenant_sync.py, cluster/tenant_shares.py)."""


@dataclass(frozen=True, slots=True)
class Document:
    key: str
    term: int
    revision: int
    body: Any
    """JSON: the whole state of ``key`` (written whole, never patched)."""

    @property
    def version(self) -> tuple[int, int]:
        """The order copies are compared in: term, then revision."""
        return (self.term, self.revision)

    def as_json(self) -> dict[str, Any]:
        return {"key": self.key, "term": self.term, "revision": self.revision, "body": self.body}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Document:
        key, term, revision = data["key"], data["term"], data["revision"]
        if not isinstance(key, str) or key not in KEYS:
            raise ValueError(f"unknown document key {key!r}")
        if not isinstance(term, int) or not isinstance(revision, int) or term < 0 or revision < 0:
            raise ValueError("term and revision must be integers >= 0")
        return cls(key, term, revision, data.get("body"))


def quorum(size: int) -> int:
    """Pods that must store a write before it is acknowledged: a strict majority of
    ``size`` (the election's floor(n/2)+1 of the same cluster size)."""
    return max(size, 1) // 2 + 1


def newest(copies: Iterable[Document | None]) -> Document | None:
    """The copy to adopt among what the pods answered (None: no pod has one)."""
    best: Document | None = None
    for doc in copies:
        if doc is not None and (best is None or doc.version > best.version):
            best = doc
    return best


def successor(current: Document | None, key: str, term: int, body: Any) -> Document:
    """The copy a leader of ``term`` writes next for ``key``."""
    revision = current.revision + 1 if current is not None else 1
    return Document(key, term, revision, body)


class Verdict(StrEnum):
    STORE = "store"
    """Newer than the copy held: store it (and apply it)."""
    KEEP = "keep"
    """The same copy, or an older one of a term not older than ours: acknowledge
    without storing (a re-send, or a leader that has not heard of its own newer copy)."""
    STALE_TERM = "stale_term"
    """Written under a term older than the newest this pod has seen: refused."""


def decide(held: Document | None, incoming: Document, seen_term: int) -> Verdict:
    """What a pod that has seen ``seen_term`` and holds ``held`` does with ``incoming``."""
    if incoming.term < seen_term:
        return Verdict.STALE_TERM
    if held is not None and held.version >= incoming.version:
        return Verdict.KEEP
    return Verdict.STORE


def acknowledged(stored_by: int, size: int) -> bool:
    """True once ``stored_by`` pods (the writer included) hold the copy."""
    return stored_by >= quorum(size)
