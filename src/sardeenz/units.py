"""How a person reads memory: GiB with one decimal, as vLLM's own log lines print it.

One convention for every message, log line and CLI table (fit verdicts, placement and
wake refusals, host-memory checks, profile listings): ``gib(25_769_803_776)`` is
``'24.0 GiB'``. The API keeps exact bytes (``*Bytes`` fields) and the seed's own fields
(``gpuMemoryLimit`` in GB, ``*Gib`` profile figures); only what is printed for a reader
goes through here, so an operator never compares a "GB" message with a "GiB" log line.
The one exception is a message about a ``gpuMemoryLimit`` the caller gave: it speaks
that field's unit, GB (``gb``), figures and free memory alike.
"""

from __future__ import annotations

GIB = 2**30


def gib(n_bytes: float | None) -> str:
    """``'23.6 GiB'``; ``'-'`` when unknown (a table cell with nothing to show)."""
    if n_bytes is None:
        return "-"
    return f"{n_bytes / GIB:.1f} GiB"


GB = 10**9


def gb(n_bytes: float | None) -> str:
    """``'100.0 GB'``: for messages about ``gpuMemoryLimit``, which the seed gives in GB.

    An operator who typed ``--gpu-memory-limit 100`` reads "needs 100.0 GB" and free
    memory in the same unit, not "93.1 GiB" to convert back.
    """
    if n_bytes is None:
        return "-"
    return f"{n_bytes / GB:.1f} GB"
