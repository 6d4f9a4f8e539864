"""A usage question (time range, step, grouping), checked; and its answer's shape.

Pure functions, shared by the API (``GET /api/v1/usage``), the pod-to-pod fan-out
and the CLI's tests: parsing and validating the question (every refusal a 422
with a stable ``code``), summing rows of several sources (the table, the meter's
unwritten buckets, other pods) into one answer, and writing it as CSV.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Final, NamedTuple

from pydantic import Field

from sardeenz.domain import CamelModel
from sardeenz.errors import SardeenzError
from sardeenz.store.usage import DIMENSIONS, UsageRow
from sardeenz.tenancy.meter import ADMITTED, BucketKey, Counts

MINUTE: Final = 60
DEFAULT_SPAN: Final = 86_400
"""Without ``from``: the last day."""
MAX_POINTS: Final = 10_000
"""Buckets per group in one answer: a bigger question is refused, not truncated."""
MAX_BUCKETS: Final = 100_000
"""Buckets in one answer, all groups together (about 30 MB of JSON)."""
MAX_TIME: Final = 253_402_300_799
"""9999-12-31T23:59:59Z: the latest instant a question may name."""
GROUPS: Final = {"tenant": "tenant", "key": "key_id", "model": "model"}
"""``group_by`` words -> stored dimensions."""
REASONS: Final = (
    "requests_per_minute",
    "tokens_per_minute",
    "concurrent_requests",
    "tokens_per_day",
    "tokens_per_month",
)
"""The limits that refuse (admission.py's ``LIMIT_WORDS``): the CSV's fixed columns."""
_STEP = re.compile(r"(\d{1,9})([smhd]?)")
_UNITS: Final = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}


class InvalidUsageQuery(SardeenzError):
    status = 422
    code = "invalid_usage_query"


class UsageQuery(NamedTuple):
    start: int
    """Unix seconds: buckets that start at or after it (a multiple of the step)."""
    end: int
    """Unix seconds: buckets that start before it (a multiple of the step)."""
    step: int | None
    """Seconds per answer bucket, counted from ``start``; None: one bucket for the range."""
    group_by: tuple[str, ...]
    """Stored dimensions (``tenant``, ``key_id``, ``model``) the answer keeps apart."""

    def as_json(self) -> dict[str, object]:
        return {
            "start": self.start,
            "end": self.end,
            "step": self.step,
            "groupBy": list(self.group_by),
        }


def parse_time(text: str, name: str) -> int:
    """ISO 8601 (a zone-less time is UTC) or unix seconds; whole seconds."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        try:
            when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise InvalidUsageQuery(
                f"{name} must be an ISO 8601 time or unix seconds, not {text[:40]!r}",
                code="invalid_time",
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        value = when.timestamp()
    if not math.isfinite(value) or not 0 <= value <= MAX_TIME:
        raise InvalidUsageQuery(
            f"{name} must be between 1970-01-01 and 9999-12-31, not {text[:40]!r}",
            code="invalid_time",
        )
    return int(value)


def parse_step(text: str) -> int | None:
    """``60``, ``5m``, ``1h``, ``1d`` (a whole number of minutes); ``total``/empty: None."""
    text = text.strip().lower()
    if text in ("", "total"):
        return None
    m = _STEP.fullmatch(text)
    step = int(m[1]) * _UNITS[m[2]] if m is not None else 0
    if step < MINUTE or step % MINUTE:
        raise InvalidUsageQuery(
            f"step must be a whole number of minutes (60, 5m, 1h, 1d) or 'total', "
            f"not {text[:40]!r}",
            code="invalid_step",
        )
    return step


def parse_group_by(text: str) -> tuple[str, ...]:
    words = [w.strip() for w in text.split(",") if w.strip()]
    unknown = [w for w in words if w not in GROUPS]
    if unknown:
        raise InvalidUsageQuery(
            f"group_by takes tenant, key and model, not {unknown[0][:40]!r}",
            code="unknown_group_by",
        )
    return tuple(GROUPS[g] for g in GROUPS if g in words)  # a fixed order


def parse_query(
    start: str | None, end: str | None, step: str | None, group_by: str | None, now: float
) -> UsageQuery:
    """The question of ``GET /api/v1/usage``, checked (``InvalidUsageQuery`` says why)."""
    until = parse_time(end, "to") if end is not None else -(-int(now) // MINUTE) * MINUTE
    since = parse_time(start, "from") if start is not None else until - DEFAULT_SPAN
    if since >= until:
        raise InvalidUsageQuery(
            f"from must be before to ({since} >= {until})", code="invalid_range"
        )
    every = parse_step(step) if step is not None else None
    # Whole buckets only: the range is widened to whole steps (whole minutes without a
    # step), so a bucket starts at a multiple of its width (an hour on the hour, a day
    # at 00:00 UTC) and no stored minute is half in.
    grain = every or MINUTE
    since, until = since // grain * grain, -(-until // grain) * grain
    if every is not None and -(-(until - since) // every) > MAX_POINTS:
        raise InvalidUsageQuery(
            f"{-(-(until - since) // every)} buckets per group: at most {MAX_POINTS}; "
            "ask for a larger step or a shorter range",
            code="too_many_points",
        )
    groups = parse_group_by(group_by) if group_by is not None else tuple(GROUPS.values())
    return UsageQuery(since, until, every, groups)


def query_of(data: Mapping[str, object]) -> UsageQuery:
    """The question as another pod sent it (``as_json``), checked again."""
    step = data.get("step")
    groups = data.get("groupBy")
    if not isinstance(groups, list) or not all(g in DIMENSIONS for g in groups):
        raise InvalidUsageQuery("groupBy: a list of tenant, key_id, model", code="invalid_query")
    start, end = data.get("start"), data.get("end")
    if type(start) is not int or type(end) is not int or start >= end:
        raise InvalidUsageQuery("start and end: unix seconds, start first", code="invalid_range")
    if step is not None and (type(step) is not int or step < MINUTE or step % MINUTE):
        raise InvalidUsageQuery("step: whole minutes", code="invalid_step")
    return UsageQuery(start, end, step, tuple(str(g) for g in groups))


# ------------------------------------------------------------------ summing
def pending_rows(buckets: Mapping[BucketKey, Counts], q: UsageQuery) -> list[UsageRow]:
    """The meter's unwritten minute buckets that ``q`` covers, as the table's rows."""
    rows: list[UsageRow] = []
    for (minute, tenant, key, model, reason), counts in buckets.items():
        if not q.start <= minute < q.end:
            continue
        start = q.start + (minute - q.start) // q.step * q.step if q.step else q.start
        g = q.group_by
        r, f, p, c, e = counts
        rows.append(
            (
                start,
                tenant if "tenant" in g else "",
                key if "key_id" in g else "",
                model if "model" in g else "",
                reason,
                r,
                f,
                p,
                c,
                e,
            )
        )
    return rows


class UsageBucket(CamelModel):
    start: datetime
    end: datetime
    tenant: str | None = Field(None, description="null: not grouped by tenant")
    key: str | None = Field(None, description="the API key id; null: not grouped by key")
    model: str | None = Field(None, description="the served model; null: not grouped by model")
    requests: int = Field(0, description="requests admitted (and ended)")
    failed_requests: int = Field(0, description="admitted requests that ended with 4xx/5xx")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    estimated_requests: int = Field(
        0, description="requests billed the admission's estimate (no usage in the response)"
    )
    rejected_requests: int = Field(0, description="requests a limit refused (429)")
    rejected: dict[str, int] = Field(
        default_factory=dict, description="refusals by the limit that refused"
    )


class TenantUsageReport(CamelModel):
    start: datetime
    end: datetime
    step: int | None = Field(description="seconds per bucket; null: one bucket per group")
    group_by: list[str]
    buckets: list[UsageBucket]
    pods: list[str] = Field(
        default_factory=list, description="the pods whose usage is summed (empty: single node)"
    )
    missing_pods: list[str] = Field(
        default_factory=list,
        description="pods that did not answer in time: their usage is not in this answer",
    )


def summed(rows: Iterable[UsageRow], q: UsageQuery) -> list[UsageBucket]:
    """One bucket per (start, group), refusals folded in, sorted by start then group."""
    out: dict[tuple[int, str, str, str], UsageBucket] = {}
    width = q.step if q.step is not None else q.end - q.start
    for start, tenant, key, model, reason, requests, failed, prompt, completion, est in rows:
        ident = (start, tenant, key, model)
        bucket = out.get(ident)
        if bucket is None:
            bucket = out[ident] = UsageBucket(
                start=datetime.fromtimestamp(start, UTC),
                end=datetime.fromtimestamp(min(start + width, q.end), UTC),
                tenant=tenant if "tenant" in q.group_by else None,
                key=key if "key_id" in q.group_by else None,
                model=model if "model" in q.group_by else None,
            )
        if reason == ADMITTED:
            bucket.requests += requests
            bucket.failed_requests += failed
            bucket.prompt_tokens += prompt
            bucket.completion_tokens += completion
            bucket.total_tokens += prompt + completion
            bucket.estimated_requests += est
        else:
            bucket.rejected_requests += requests
            bucket.rejected[reason] = bucket.rejected.get(reason, 0) + requests
        if len(out) > MAX_BUCKETS:
            raise InvalidUsageQuery(
                f"more than {MAX_BUCKETS} buckets: ask for a larger step, a shorter range "
                "or fewer groupings",
                code="too_many_buckets",
            )
    return [out[k] for k in sorted(out)]


def _cell(text: str) -> str:
    """A key id or model name as a spreadsheet reads it: never as a formula (a served
    name is chosen by whoever loads a model, not by the reader of the export)."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def to_csv(report: TenantUsageReport) -> str:
    """One line per bucket; the columns are fixed (a refusal reason absent: 0)."""
    extra = sorted({r for b in report.buckets for r in b.rejected} - set(REASONS))
    reasons = [*REASONS, *extra]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(
        [
            "start",
            "end",
            "tenant",
            "key",
            "model",
            "requests",
            "failed_requests",
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "estimated_requests",
            "rejected_requests",
            *(f"rejected_{r}" for r in reasons),
        ]
    )
    for b in report.buckets:
        writer.writerow(
            [
                b.start.isoformat().replace("+00:00", "Z"),
                b.end.isoformat().replace("+00:00", "Z"),
                b.tenant or "",
                _cell(b.key or ""),
                _cell(b.model or ""),
                b.requests,
                b.failed_requests,
                b.prompt_tokens,
                b.completion_tokens,
                b.total_tokens,
                b.estimated_requests,
                b.rejected_requests,
                *(b.rejected.get(r, 0) for r in reasons),
            ]
        )
    return buf.getvalue()
