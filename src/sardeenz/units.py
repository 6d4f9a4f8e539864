"""How a person reads memory: GiB with one decimal, as vLLM's own log lines print it.

One convention for every message, log line and CLI table (fit verdicts, placement and
wake refusals, host-memory checks, profile listings): ``gib(25_769_803_776)`` is
``'24.0 GiB'``. The API keeps exact bytes (``*Bytes`` fields) and the seed's own fields
(``gpuMemoryLimit`` in GB, ``*Gib`` profile figures); only what is printed for a reader
goes through here, so an operator never compares a "GB" message with a "GiB" log line.
"""

from __future__ import annotations

GIB = 2**30


def gib(n_bytes: float | None) -> str:
    """``'23.6 GiB'``; ``'-'`` when unknown (a table cell with nothing to show)."""
    if n_bytes is None:
        return "-"
    return f"{n_bytes / GIB:.1f} GiB"
