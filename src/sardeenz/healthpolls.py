"""Which engine log lines are the access lines of the controller's ``/health`` polls.

One poll every ``SARDEENZ_HEALTH_INTERVAL_SECONDS`` writes one access line: in an hour
they outnumber everything else an engine says. The log buffer keeps them apart so they
never push the engine's own lines out (runtime/logs.py), and ``sardeenz models logs``
hides them unless asked (cli/models.py). A leaf module: the CLI imports it at start.
"""

from __future__ import annotations

import re

__all__ = ["is_health_poll"]

_HEALTH_ACCESS = re.compile(r'"GET /health(?:\?[^ "]*)? HTTP/[0-9.]+"')


def is_health_poll(line: str) -> bool:
    """An engine access-log line of a ``GET /health`` (the controller's poll)."""
    return _HEALTH_ACCESS.search(line) is not None
