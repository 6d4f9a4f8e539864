"""The inference request log (usage over time: api/usage.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from sardeenz.api.deps import ServicesDep
from sardeenz.errors import InvalidRequest
from sardeenz.proxy.history import RequestLogInfo
from sardeenz.security.policy import READONLY
from sardeenz.store.db import SQL_INT_MAX
from sardeenz.store.requests import RequestEntry, RequestQuery, valid_status

router = APIRouter(prefix="/api/v1", tags=["requests"])


@router.get("/requests", response_model=list[RequestEntry], dependencies=[READONLY])
async def list_requests(
    services: ServicesDep,
    model: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[
        str | None, Query(max_length=5, description="200, 5xx, or error (400 and up)")
    ] = None,
    key: Annotated[str | None, Query(max_length=64, description="an API key id")] = None,
    pod: Annotated[
        str | None, Query(max_length=253, description="the pod that ran it (cluster mode)")
    ] = None,
    entry_pod: Annotated[
        str | None,
        Query(alias="entryPod", max_length=253, description="the pod the client sent it to"),
    ] = None,
    since: Annotated[datetime | None, Query(description="ended at or after (ISO 8601)")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before_id: Annotated[int | None, Query(alias="beforeId", ge=1, le=SQL_INT_MAX)] = None,
) -> list[RequestEntry]:
    """Finished ``/v1`` requests, newest first: model, instance, pod, status, latency,
    TTFT, tokens, API key id. Never bodies, never keys. In a cluster: every pod's,
    collected every few seconds (``pod`` to see one pod's)."""
    if status is not None and not valid_status(status):
        raise InvalidRequest(
            f"status must be a code (200), a class (5xx) or 'error', not {status!r}",
            code="invalid_status_filter",
        )
    query = RequestQuery(
        model=model,
        status=status,
        key=key,
        pod=pod,
        entry_pod=entry_pod,
        since=since.timestamp() if since is not None else None,
        before_id=before_id,
    )
    return await services.requests.list(query, limit)


@router.get("/requests/info", response_model=RequestLogInfo, dependencies=[READONLY])
async def request_log_info(services: ServicesDep) -> RequestLogInfo:
    """How much of the log is kept: the ring's size, and retention in the database."""
    return services.requests.info()
