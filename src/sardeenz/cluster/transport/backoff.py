"""Retry schedules for calls to other pods."""

from __future__ import annotations

from collections.abc import Hashable


class Backoff:
    """Per-key retry schedule: ``base``, 2x, 4x, ... seconds after each failure, up to
    ``cap``; a success clears it."""

    def __init__(self, base: float, cap: float) -> None:
        self._base = base
        self._cap = cap
        self._next: dict[Hashable, float] = {}
        self._fails: dict[Hashable, int] = {}

    def due(self, key: Hashable, now: float) -> bool:
        return now >= self._next.get(key, 0.0)

    def failed(self, key: Hashable, now: float) -> None:
        n = self._fails.get(key, 0) + 1
        self._fails[key] = n
        self._next[key] = now + min(self._cap, self._base * 2 ** (n - 1))

    def ok(self, key: Hashable) -> None:
        self._fails.pop(key, None)
        self._next.pop(key, None)
