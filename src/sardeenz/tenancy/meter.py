"""The usage meter: what each tenant's requests consumed, per minute, before it is stored.

Why this shape: the proxy's hot path ends a tenant's request with one
``Ticket.settle`` (tenancy/admission.py), which hands ``note`` a flat tuple of
values it already holds (the response's tail included) and nothing else: no
parsing, no dict, no await. ``drain`` (called by the usage service's flusher
and before every read, never by a request) reads the engine's ``usage`` in the
tail with the same function the tenancy admission and the request log use, and
adds each request to its minute bucket. The tokens are the ones the tenant's
budgets were charged: the engine's ``usage`` when the response had it; nothing
for a failure without it; else the estimate made at admission (a stream that did
not ask for usage, a client that left). A refusal by a limit is counted under
its reason.

The buckets wait here until the service writes them (``take``), and go back
(``restore``) when the write failed, so a busy database loses nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from sardeenz.proxy.reqlog import usage_tokens

MINUTE: Final = 60
ADMITTED: Final = ""
"""The ``reason`` of the bucket that counts admitted requests (a refusal's is its limit)."""
_WIDTH: Final = 10
"""Fields of one noted request, laid flat in the queue (see ``UsageMeter.note``)."""

BucketKey = tuple[int, str, str, str, str]
"""(minute start, unix seconds; tenant; key id; model; reason)."""
Counts = list[int]
"""[requests, failed requests, prompt tokens, completion tokens, estimated requests]."""
FIELDS: Final = ("requests", "failed", "prompt_tokens", "completion_tokens", "estimated")


def charged(
    status: int, last: bytes, prev: bytes, prompt_estimate: int, completion_estimate: int
) -> tuple[int, int, bool]:
    """(prompt, completion, estimated): the tokens a finished request is billed.

    The same rule as the budgets' (admission.py ``Ticket.settle``): the engine's
    ``usage``; else nothing for a failure (the engine refused or failed); else the
    estimate (a success without usage, or 499: the engine worked for it).
    """
    prompt, completion = usage_tokens(last, prev)
    if prompt is not None:
        return prompt, completion or 0, False
    if status >= 400 and status != 499:
        return 0, 0, False
    return prompt_estimate, completion_estimate, True


class UsageMeter:
    """The pending requests (a flat list) and the minute buckets not stored yet."""

    def __init__(self) -> None:
        self._pending: list[Any] = []
        self.note: Callable[[tuple[Any, ...]], None] = self._pending.extend
        """Queue one finished request: (wall time, tenant, key id, model, status,
        prompt estimate, completion estimate, tail, tail before it, reason) — reason
        ``ADMITTED``; a refusal is queued by ``rejected``."""
        self._buckets: dict[BucketKey, Counts] = {}

    def rejected(self, at: float, tenant: str, key: str, model: str, reason: str) -> None:
        """A request a limit refused (429): counted under the limit's name."""
        self._pending.extend((at, tenant, key, model, 0, 0, 0, b"", b"", reason))

    def drain(self) -> None:
        """Move the pending requests into their minute buckets (off the request's path)."""
        flat = self._pending
        if not flat:
            return
        count = len(flat) // _WIDTH
        buckets = self._buckets
        for j in range(0, count * _WIDTH, _WIDTH):
            at, tenant, key, model, status, p_est, c_est, last, prev, reason = flat[j : j + _WIDTH]
            bucket = (int(at) // MINUTE * MINUTE, tenant, key, model, reason)
            counts = buckets.get(bucket)
            if counts is None:
                counts = buckets[bucket] = [0, 0, 0, 0, 0]
            counts[0] += 1
            if reason != ADMITTED:
                continue
            prompt, completion, estimated = charged(status, last, prev, p_est, c_est)
            if status >= 400:
                counts[1] += 1
            counts[2] += prompt
            counts[3] += completion
            if estimated:
                counts[4] += 1
        del flat[: count * _WIDTH]

    def peek(self) -> dict[BucketKey, Counts]:
        """The buckets not stored yet (drained first): what a read adds to the table's."""
        self.drain()
        return self._buckets

    def take(self) -> dict[BucketKey, Counts]:
        """Hand the buckets to the writer; ``restore`` them if the write fails."""
        self.drain()
        taken, self._buckets = self._buckets, {}
        return taken

    def restore(self, taken: dict[BucketKey, Counts]) -> None:
        """Put back buckets whose write failed (added to what came in meanwhile)."""
        for key, counts in taken.items():
            held = self._buckets.get(key)
            if held is None:
                self._buckets[key] = counts
            else:
                for i, n in enumerate(counts):
                    held[i] += n
