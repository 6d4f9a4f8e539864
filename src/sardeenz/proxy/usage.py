"""Inference API keys on ``/v1``: which models a key may use, and what its refusals record.

A tenant's limit refusing a request (tenancy/admission.py) is answered here too
(``rate_limited``: 429 with ``Retry-After``).

Why a module of its own: a key scoped to some models (security/auth.py ``ApiKey``)
is checked against the name a request asks for *and* the served name that name
stands for (a catalog alias), and every refused request is still noted in the
request log (proxy/reqlog.py) under its key, so the usage counters add up. The
relay notes the requests it served itself, in the same tuple shape, when they end
(asgirelay.py; express.py for the express path).
"""

from __future__ import annotations

import time

from sardeenz.proxy.demand import Demand
from sardeenz.proxy.metrics import UNKNOWN_MODEL
from sardeenz.proxy.reqlog import RequestLog
from sardeenz.proxy.wire import ErrorReply
from sardeenz.security.auth import ApiKey
from sardeenz.tenancy.admission import Rejection, refused

_TOKEN_LIMITS = frozenset({"tokens_per_minute", "tokens_per_day", "tokens_per_month"})

_perf = time.perf_counter


def allowed(key: ApiKey, model: str, demand: Demand | None) -> bool:
    """May ``key`` use ``model``: by its name, or as an alias of a served name it may use."""
    if key.allows(model):
        return True
    served = demand.resolve(model) if demand is not None else None
    return served is not None and key.allows(served)


def note_refused(
    requests: RequestLog, t0: float, status: int, asked: str | None, key: ApiKey | None
) -> None:
    """A request answered before it had an instance (refused, or its client left)."""
    requests.finished(
        UNKNOWN_MODEL,
        asked,
        None,
        status,
        _perf() - t0,
        0.0,
        False,
        key.id if key is not None else None,
        b"",
        b"",
    )


def rate_limited(rejection: Rejection) -> ErrorReply:
    """The 429 of a tenant's limit, in OpenAI's shape (``type`` says requests or tokens,
    as OpenAI's does), counted in ``sardeenz_tenant_rejected_requests_total``."""
    refused(rejection)
    return ErrorReply(
        429,
        rejection.message,
        "tokens" if rejection.reason in _TOKEN_LIMITS else "requests",
        "rate_limit_exceeded",
        headers=[(b"retry-after", b"%d" % rejection.retry_after)],
    )
