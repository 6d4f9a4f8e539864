"""``/api/v1/usage``: requests, tokens and refusals per tenant, key and model, over time.

Two answers on one path, so existing readers keep theirs: without a question
(no ``from``, ``to``, ``step``, ``group_by`` or ``format``) the counters per API
key and model since the controller started (every request, tenant or not);
with one, the billable usage of tenants' requests from the table of time
buckets (tenancy/usage.py), summed over every pod in a cluster, as JSON or CSV
(``format=csv``, or ``/api/v1/usage.csv``). The question is checked in
tenancy/usage_query.py: a bad one is a 422 with a stable ``code``.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from sardeenz.api.deps import ServicesDep
from sardeenz.proxy.history import UsageReport
from sardeenz.security.policy import READONLY
from sardeenz.tenancy.usage_query import (
    InvalidUsageQuery,
    TenantUsageReport,
    parse_query,
    to_csv,
)

router = APIRouter(prefix="/api/v1", tags=["usage"])

INVALID: dict[int | str, dict[str, Any]] = {
    422: {
        "description": "a bad question: `invalid_time`, `invalid_range` (from not before "
        "to), `invalid_step`, `unknown_group_by`, `too_many_points` (more than 10000 "
        "buckets per group), `too_many_buckets` (more than 100000 in all), "
        "`pod_not_supported` (`pod` with a question)"
    }
}
CSV: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {}}, "description": "one line per bucket and group"}
}

From = Annotated[
    str | None,
    Query(
        alias="from",
        max_length=40,
        description="ISO 8601 or unix seconds; buckets that start at or after it "
        "(default: `to` less one day)",
    ),
]
To = Annotated[
    str | None,
    Query(
        max_length=40,
        description="ISO 8601 or unix seconds; buckets that start before it "
        "(default: the end of the current minute)",
    ),
]
Step = Annotated[
    str | None,
    Query(
        max_length=20,
        description="bucket width: 60, 5m, 1h, 1d (whole minutes); `total` or absent: "
        "one bucket for the range",
    ),
]
GroupBy = Annotated[
    str | None,
    Query(
        max_length=40,
        description="comma-separated: tenant, key, model (default: all three; empty: none)",
    ),
]


async def _report(
    services: ServicesDep, start: str | None, end: str | None, step: str | None, group: str | None
) -> TenantUsageReport:
    return await services.usage.report(parse_query(start, end, step, group, time.time()))


@router.get(
    "/usage",
    response_model=UsageReport | TenantUsageReport,
    responses={**INVALID, **CSV},
    dependencies=[READONLY],
)
async def usage(
    services: ServicesDep,
    pod: Annotated[
        str | None, Query(max_length=253, description="only the requests that entered this pod")
    ] = None,
    start: From = None,
    to: To = None,
    step: Step = None,
    group_by: GroupBy = None,
    format: Annotated[Literal["json", "csv"] | None, Query()] = None,
) -> UsageReport | TenantUsageReport | Response:
    """Without `from`, `to`, `step`, `group_by` or `format`: requests and tokens per API
    key id and model since start (every request; in a cluster, every pod's counters).
    With them: the billable usage of tenants' requests over time (requests, prompt and
    completion tokens, refusals by limit), per tenant, key and model, from the stored
    time buckets, in a cluster summed over every pod (`missingPods`: those that did not
    answer)."""
    if start is None and to is None and step is None and group_by is None and format is None:
        return services.requests.usage(pod)
    if pod is not None:
        raise InvalidUsageQuery(
            "pod filters the counters since start only (without from, to, step, group_by "
            "and format); the usage over time is every pod's",
            code="pod_not_supported",
        )
    report = await _report(services, start, to, step, group_by)
    if format == "csv":
        return _csv(report)
    return report


@router.get("/usage.csv", responses={**INVALID, **CSV}, dependencies=[READONLY])
async def usage_csv(
    services: ServicesDep,
    start: From = None,
    to: To = None,
    step: Step = None,
    group_by: GroupBy = None,
) -> Response:
    """The billable usage as CSV (the same question as `GET /api/v1/usage`)."""
    return _csv(await _report(services, start, to, step, group_by))


def _csv(report: TenantUsageReport) -> Response:
    return Response(
        to_csv(report),
        media_type="text/csv; charset=utf-8",
        headers={"content-disposition": 'attachment; filename="usage.csv"'},
    )
