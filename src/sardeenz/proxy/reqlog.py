"""The per-request inference log and the usage counters per API key and model.

Why this shape: the relay paths (express.py, forwarder.py) are the hot path,
measured per request in benchmarks/proxy_overhead.py. At a request's end they
call ``note`` with values they already hold: one tuple, laid flat in a list,
nothing parsed, nothing written. The rest happens in ``drain``, in batches off
the request's path (a flusher task every ``FLUSH_EVERY`` seconds, and before
anything reads the log or the counters): the tokens are read from the tail of
the response the relay already saw (the engine's ``usage`` object: the last
bytes of a JSON body, or the final usage chunk of a stream when the client
asked for it with ``stream_options.include_usage``; the stream is never
altered), the usage counters are updated, and the entry joins a bounded ring;
its ``Record`` (with a request id of ours) is made only when the ring is read.
With retention on, the flusher hands each batch to a sink (the SQLite
repository, store/requests.py) from its own task, never from a request.

Bodies are never kept: only the last bytes of the response (at most
``TAIL_BYTES``), and only until the next drain reads ``usage`` in them.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from sardeenz.errors import is_storage_full
from sardeenz.proxy.metrics import REGISTRY
from sardeenz.proxy.routing import Endpoint
from sardeenz.store.requests import RequestQuery, status_matches
from sardeenz.tasks import stop_task

log = logging.getLogger(__name__)

_time = time.time

FLUSH_EVERY: Final = 1.0
"""Seconds between drains of the pending requests (and SQLite writes, when on)."""
TAIL_BYTES: Final = 4096
"""How much of the end of a whole (non-stream) body is kept to find ``usage`` in."""
Entry = tuple[Any, ...]
"""A ``Pending`` whose last two fields (the response's tail) became its prompt and
completion tokens (None: unknown): what the ring keeps."""
_WIDTH: Final = 12
"""Fields of a ``Pending`` tuple, as laid out flat in the queue."""
NO_KEY: Final = "_none"
"""``key`` label of requests made without an inference API key (keys off)."""
_MAX_MODEL: Final = 200


Pending = tuple[
    float,  # wall-clock time the request ended (time.time())
    str,  # the metrics label of the model (a served name, or _unknown)
    str | None,  # the model the client asked for, when no served name was found
    str | None,  # the instance it went to
    str | None,  # the pod it was relayed to (None: this node)
    int,  # status (499: the client left first)
    float,  # latency, seconds
    float,  # time to first body byte, seconds (0: none sent)
    bool,  # an event stream
    str | None,  # API key id
    bytes,  # the last body bytes relayed
    bytes,  # the ones before them
]
"""Only immutable scalars, queued flat (``list.extend``): the noted tuple is freed at
once, and nothing a request noted holds a container the garbage collector would walk
(the first version kept the header list and the Endpoint: 4 us per request instead of
about 1; benchmarks/request_log.py)."""

_PROMPT_FIRST = re.compile(
    rb'"prompt_tokens"\s*:\s*(\d{1,12}).*?"completion_tokens"\s*:\s*(\d{1,12})', re.S
)
_COMPLETION_FIRST = re.compile(
    rb'"completion_tokens"\s*:\s*(\d{1,12}).*?"prompt_tokens"\s*:\s*(\d{1,12})', re.S
)
_PROMPT_ONLY = re.compile(rb'"prompt_tokens"\s*:\s*(\d{1,12})')
_COMPACT = re.compile(
    rb'"usage":\{"prompt_tokens":(\d{1,12}),(?:"total_tokens":\d{1,12},)?'
    rb'"completion_tokens":(\d{1,12})[,}]'
)
"""``usage`` as vLLM and the sim engine write it (compact; the total between or after),
matched where ``"usage"`` is: the same counts ``_PROMPT_FIRST`` finds there, at about half
its cost (its ``.*?`` tries every byte up to ``"completion_tokens"``)."""
_USAGE_SPAN = 512
"""How far past ``"usage"`` its fields are looked for (the object is ~100 bytes)."""


def _usage_in(tail: bytes) -> tuple[int | None, int | None] | None:
    """One regex search after the last ``"usage"`` (measured: the cheapest way here)."""
    i = tail.rfind(b'"usage"')
    if i < 0:
        return None
    end = i + _USAGE_SPAN
    m = _PROMPT_FIRST.search(tail, i, end)
    if m is not None:
        return int(m[1]), int(m[2])
    m = _COMPLETION_FIRST.search(tail, i, end)
    if m is not None:
        return int(m[2]), int(m[1])
    m = _PROMPT_ONLY.search(tail, i, end)  # embeddings: no completion
    return (int(m[1]), None) if m is not None else None  # None: "usage": null


def usage_tokens(last: bytes, prev: bytes = b"") -> tuple[int | None, int | None]:
    """(prompt, completion) tokens of the last ``"usage"`` object the response ended with.

    ``last``: the last bytes relayed; ``prev``: the read before them, where a stream's
    usage chunk is when ``[DONE]`` came in a read of its own.
    """
    found = _usage_in(last)
    if found is None and prev:
        found = _usage_in(prev)
    return found if found is not None else (None, None)


def usage_total(last: bytes, prev: bytes = b"") -> int | None:
    """Prompt + completion tokens of ``usage_tokens`` (None: the response reported none).

    For a tenant's settlement, on the request's path (tenancy/admission.py): the common
    case (the prompt's count first, in ``last``) in one search and one sum, without the
    tuples; the rest as ``usage_tokens`` reads it.
    """
    m = _COMPACT.match(last, last.rfind(b'"usage"'))  # (-1: from the end, no match)
    if m is not None:
        return int(m[1]) + int(m[2])
    prompt, completion = usage_tokens(last, prev)
    return None if prompt is None else prompt + (completion or 0)


@dataclass(slots=True)
class Record:
    """One finished inference request, as the log keeps it."""

    id: int
    request_id: str
    at: float
    model: str
    instance_id: str | None
    pod: str | None
    status: int
    latency: float
    ttft: float | None
    stream: bool
    key_id: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    entry_pod: str | None = None
    """The pod the client sent it to (``pod`` ran it); set by the request book."""
    seq: int = 0
    """Its number on the pod it entered (``id`` is the reading pod's number)."""


def matches(query: RequestQuery, r: Record) -> bool:
    """Does ``r`` pass the filters of ``GET /api/v1/requests``?"""
    if query.model is not None and r.model != query.model:
        return False
    if query.key is not None and r.key_id != query.key:
        return False
    if query.pod is not None and r.pod != query.pod:
        return False
    if query.entry_pod is not None and r.entry_pod != query.entry_pod:
        return False
    if query.since is not None and r.at < query.since:
        return False
    if query.before_id is not None and r.id >= query.before_id:
        return False
    return query.status is None or status_matches(query.status, r.status)


# ------------------------------------------------------------------ usage counters
_usage: dict[tuple[str, str], list[int]] = {}
"""(key id, model label) -> [requests, prompt tokens, completion tokens]; per process,
like the proxy's other metrics (proxy/metrics.py), so one scrape sees them all."""


def usage_rows() -> list[tuple[str, str, int, int, int]]:
    """(key id, model, requests, prompt tokens, completion tokens), sorted."""
    return [(k, m, v[0], v[1], v[2]) for (k, m), v in sorted(_usage.items())]


class _UsageCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        rows = usage_rows()
        specs = (
            ("sardeenz_usage_requests", "Inference requests by API key id and model.", 0),
            (
                "sardeenz_usage_prompt_tokens",
                "Prompt tokens (the engine's usage) by API key id and model.",
                1,
            ),
            (
                "sardeenz_usage_completion_tokens",
                "Completion tokens (the engine's usage) by API key id and model.",
                2,
            ),
        )
        for name, doc, col in specs:
            family = CounterMetricFamily(name, doc, labels=["key", "model"])
            for key, model, *counts in rows:
                family.add_metric([key, model], counts[col])
            yield family

    def describe(self) -> Iterator[Metric]:
        for name in (
            "sardeenz_usage_requests",
            "sardeenz_usage_prompt_tokens",
            "sardeenz_usage_completion_tokens",
        ):
            yield CounterMetricFamily(name, "", labels=["key", "model"])


REGISTRY.register(_UsageCollector())

Sink = Callable[[list[Record]], Awaitable[None]]


class RequestLog:
    """The ring of recent requests and the queue feeding it; one per proxy.

    ``note`` is the relay paths' entry point (see module doc). Everything runs on
    the event loop thread, so nothing here takes a lock.
    """

    def __init__(self, size: int = 1000, pod: str | None = None) -> None:
        self._pending: list[Any] = []
        self.note: Callable[[Pending], None] = self._pending.extend
        """Queue one ``Pending`` tuple as it is (``finished`` builds it from what the relay
        holds; tests and benchmarks/request_log.py feed tuples directly)."""
        self._ring: deque[Entry] = deque(maxlen=max(1, size))
        self._drained = 0
        """Requests drained so far: the id of the newest entry in the ring."""
        self.epoch = f"{int(time.time()):x}"
        """This run of the process: the request ids' prefix, and the collector's epoch."""
        self._prefix = f"{self.epoch}-"
        self.pod = pod
        self.sink: Sink | None = None
        """Retention (store/requests.py): gets each drained batch, from the flusher."""
        self._batch: list[Record] = []
        self._full = False
        """The last write found the data dir full (its batch is kept, see ``flush``)."""
        self._task: asyncio.Task[None] | None = None

    @property
    def size(self) -> int:
        return self._ring.maxlen or 0

    @property
    def noted(self) -> int:
        """Requests recorded so far, drained or not: grows with every record (and with
        every change to the usage counters, which only a drained record makes)."""
        return self._drained + len(self._pending) // _WIDTH

    def finished(
        self,
        model: str,
        asked: str | None,
        ep: Endpoint | None,
        status: int,
        latency: float,
        ttfb: float,
        stream: bool,
        key: str | None,
        last: bytes,
        prev: bytes,
    ) -> None:
        """Record a finished request: the one call both relay paths make at a request's end.

        ``model``: its metrics label; ``asked``: the name the client gave, when no
        served name was found; ``ep``: where it went (None: answered before it had an
        instance); ``ttfb``: seconds to the first body byte (0: none); ``last`` and
        ``prev``: the last body bytes relayed and the ones before (``usage`` is there).
        A request another pod forwarded here is not recorded: the pod it entered
        records it (see ``entered_here``).
        """
        self._pending.extend(
            (
                _time(),
                model,
                asked,
                ep.instance_id if ep is not None else None,
                ep.pod_id if ep is not None else None,
                status,
                latency,
                ttfb,
                stream,
                key,
                last,
                prev,
            )
        )

    # ------------------------------------------------------------------ drain
    def drain(self) -> None:
        """Count the pending requests (usage per key and model) and move them to the ring.

        Only what the counters need is worked out here; a ``Record`` is made when
        something reads the ring (or retention writes it).
        """
        flat = self._pending
        if not flat:
            return
        usage = _usage
        count = len(flat) // _WIDTH
        first = self._drained + 1
        # Entries for what the ring keeps (all of them when retention writes them).
        keep_from = 0 if self.sink is not None else max(0, count - self.size)
        entries: list[Entry] = []
        for n, j in enumerate(range(0, count * _WIDTH, _WIDTH)):
            label, status, key = flat[j + 1], flat[j + 5], flat[j + 9]
            counts = usage.get((key or NO_KEY, label))
            if counts is None:
                counts = usage[(key or NO_KEY, label)] = [0, 0, 0]
            counts[0] += 1
            prompt = completion = None
            if status < 400:
                prompt, completion = usage_tokens(flat[j + 10], flat[j + 11])
                if prompt:
                    counts[1] += prompt
                if completion:
                    counts[2] += completion
            if n >= keep_from:  # the response's tail is not kept past this point
                entries.append((*flat[j : j + 10], prompt, completion))
        self._drained += count
        del flat[: count * _WIDTH]
        if self.sink is not None:
            self._batch.extend(self._record(first + i, e) for i, e in enumerate(entries))
        self._ring.extend(entries)

    def _record(self, n: int, e: Entry) -> Record:
        at, label, asked, instance, peer, status, latency, ttfb, stream, key, prompt, completion = e
        return Record(
            id=n,
            request_id=f"{self._prefix}{n:x}",
            at=at,
            model=(asked or label)[:_MAX_MODEL],
            # a remote endpoint's id is "<pod>/<instance>": the record keeps them apart
            instance_id=instance[len(peer) + 1 :]
            if peer and instance and instance.startswith(peer + "/")
            else instance,
            pod=peer or self.pod,
            status=status,
            latency=latency,
            ttft=ttfb if stream and ttfb > 0 else None,
            stream=stream,
            key_id=key,
            prompt_tokens=prompt,
            completion_tokens=completion,
        )

    def records(self, query: RequestQuery, limit: int) -> list[Record]:
        """The ring, newest first, filtered."""
        self.drain()
        out: list[Record] = []
        n = self._drained
        for p in reversed(self._ring):
            rec = self._record(n, p)
            n -= 1
            if matches(query, rec):
                out.append(rec)
                if len(out) >= limit:
                    break
        return out

    # ---------------------------------------------------------------- flusher
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._flush_loop(), name="request-log"
            )

    async def close(self) -> None:
        """Stop the flusher after a last drain and write."""
        task, self._task = self._task, None
        await stop_task(task)
        await self.flush()

    async def flush(self) -> None:
        """Drain, then hand what retention has not written yet to the sink."""
        self.drain()
        sink = self.sink
        if sink is None or not self._batch:
            self._batch.clear()
            return
        batch, self._batch = self._batch, []
        try:
            await sink(batch)
        except Exception as exc:  # retention must never break the proxy
            if not is_storage_full(exc):
                log.exception("could not write %d request log entries", len(batch))
                return
            # A full disk: keep the batch for the next flush (the newest ``size`` entries,
            # what the ring holds anyway), so freeing space loses nothing recent; one
            # line, as the log may be on the same disk.
            kept = [*batch, *self._batch][-self.size :]
            if not self._full:
                log.warning(
                    "request log: data dir full; keeping the newest %d entries until it has room",
                    self.size,
                )
            self._full = True
            self._batch = kept
            return
        if self._full:
            log.info("request log: data dir has room again; retention resumed")
            self._full = False

    async def _flush_loop(self) -> None:
        # The queue is bounded by this loop (what a second of traffic notes): it must
        # outlive any error of a drain.
        while True:
            await asyncio.sleep(FLUSH_EVERY)
            try:
                await self.flush()
            except Exception:
                log.exception("request log drain failed; %d fields dropped", len(self._pending))
                self._pending.clear()
