"""The control documents as ConfigMaps, and the write rules for them: pure, no I/O.

Kubernetes mode keeps each document of the control state (presets, catalog,
moves; cluster/replicated.py) in one ConfigMap of the namespace, named
``sardeenz-control-<key>``, labelled ``sardeenz.io/control=document``::

    data:
      term: "4"          # the fencing term of the leader that wrote it
      revision: "17"     # grows with every write of this key
      body: '{"...": ...}'   # the whole document, JSON

One ConfigMap per kind, not per entry: a write is one resourceVersion-guarded
update of the whole document (the register's rule: written whole), so no
write can interleave with another inside a document. The API server refuses a
ConfigMap whose data exceed 1 MiB; :func:`encode` refuses it first with 413
``control_document_too_large`` naming the size (about a thousand catalog
entries or presets of a few dozen models fit).

A write names the resourceVersion it read; 409 Conflict means another write
came first: the writer reads again and retries (:func:`retry_on_conflict`,
bounded, with backoff), applying its change to what it read. A document that
does not decode (edited by hand into bad JSON) is a :class:`CorruptDocument`:
reported, never applied, never overwritten silently.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sardeenz.cluster.replicated import KEYS, Document
from sardeenz.errors import Conflict, PayloadTooLarge

PREFIX = "sardeenz-control-"
LABEL = "sardeenz.io/control"
SELECTOR = f"{LABEL}=document"
MAX_DATA_BYTES = 1024 * 1024
"""The API server's limit on a ConfigMap's data (keys and values, in bytes)."""

T = TypeVar("T")


def name_of(key: str) -> str:
    return PREFIX + key


def key_of(name: str) -> str | None:
    """The document key a ConfigMap name holds, None for a name that is not one."""
    key = name.removeprefix(PREFIX)
    return key if name.startswith(PREFIX) and key in KEYS else None


class CorruptDocument(Exception):
    """A control ConfigMap that does not decode: what is wrong, for the operator."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"ConfigMap {name}: {reason}")
        self.name = name
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Stored:
    """A document as the API server holds it."""

    doc: Document
    resource_version: str


def data_bytes(data: dict[str, str]) -> int:
    """Bytes the API server counts against :data:`MAX_DATA_BYTES`."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in data.items())


def encode(doc: Document, resource_version: str | None) -> dict[str, Any]:
    """The ConfigMap for ``doc`` (an update when ``resource_version`` is set, else a
    create); 413 ``control_document_too_large`` when the API server would refuse it."""
    data = {
        "term": str(doc.term),
        "revision": str(doc.revision),
        "body": json.dumps(doc.body, separators=(",", ":"), sort_keys=True),
    }
    size = data_bytes(data)
    if size > MAX_DATA_BYTES:
        raise PayloadTooLarge(
            f"the cluster's {doc.key} would be {size} bytes: a ConfigMap holds at most "
            f"{MAX_DATA_BYTES} (remove entries before adding more)",
            code="control_document_too_large",
        )
    metadata: dict[str, Any] = {
        "name": name_of(doc.key),
        "labels": {LABEL: "document", "app": "sardeenz"},
    }
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def decode(obj: dict[str, Any]) -> Stored | None:
    """The document of a control ConfigMap (the API's JSON); None for a ConfigMap with
    the label that is not one of ours (another name); :class:`CorruptDocument` when its
    data do not decode."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    key = key_of(name)
    if key is None:
        return None
    data = obj.get("data") or {}
    try:
        term, revision = int(data["term"]), int(data["revision"])
    except (KeyError, TypeError, ValueError):
        raise CorruptDocument(name, "data.term and data.revision must be integers") from None
    if term < 0 or revision < 0:
        raise CorruptDocument(name, "data.term and data.revision must be >= 0")
    raw = data.get("body")
    if not isinstance(raw, str):
        raise CorruptDocument(name, "data.body is missing")
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise CorruptDocument(name, f"data.body is not JSON ({exc})") from None
    return Stored(Document(key, term, revision, body), str(meta.get("resourceVersion") or ""))


class WriteConflict(Exception):
    """The API server answered 409: the resourceVersion written against is not the
    newest (an update), or the ConfigMap exists already (a create)."""


@dataclass(frozen=True, slots=True)
class ConflictRetries:
    attempts: int = 6
    first: float = 0.05
    most: float = 1.0

    def delay(self, failures: int, jitter: float) -> float:
        """Seconds before attempt ``failures + 1``; ``jitter`` in [0, 1) spreads two
        writers that conflicted at the same moment."""
        return float(min(self.most, self.first * 2 ** (failures - 1)) * (0.5 + jitter))


async def retry_on_conflict(
    attempt: Callable[[int], Awaitable[T]],
    what: str,
    backoff: ConflictRetries = ConflictRetries(),
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    jitter: Callable[[], float] = random.random,
) -> T:
    """``await attempt(n)`` for n = 0, 1, ... until it does not raise
    :class:`WriteConflict`; after ``backoff.attempts`` conflicts, 409
    ``control_write_conflict`` (the writes of others kept winning: nothing was lost,
    this one was not made). ``attempt`` re-reads the document when ``n > 0``."""
    for n in range(backoff.attempts):
        if n:
            await sleep(backoff.delay(n, jitter()))
        try:
            return await attempt(n)
        except WriteConflict:
            continue
    raise Conflict(
        f"{what}: {backoff.attempts} writes in a row lost to concurrent writes; not made, retry",
        code="control_write_conflict",
    )
