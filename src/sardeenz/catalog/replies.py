"""The 503 a request gets when what it waits for (a model's start, an adapter's load)
did not come within ``ondemand_max_wait_seconds``: one shape for both."""

from __future__ import annotations

import math

from sardeenz.proxy.wire import ErrorReply


def not_ready(subject: str, what: str, max_wait: float) -> ErrorReply:
    """``{subject} is {what} (waited N s, ...)`` with a ``Retry-After`` of a quarter of
    the wait (1-30 s)."""
    retry = str(max(1, min(30, math.ceil(max_wait / 4)))).encode()
    return ErrorReply(
        503,
        f"{subject} is {what} (waited {max_wait:g} s, SARDEENZ_ONDEMAND_MAX_WAIT_SECONDS); "
        "retry later",
        "service_unavailable_error",
        "model_not_ready",
        headers=[(b"retry-after", retry)],
    )
