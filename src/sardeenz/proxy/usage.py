"""Inference API keys on ``/v1``: which models a key may use, and what its refusals record.

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
from sardeenz.security.auth import ApiKey

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
