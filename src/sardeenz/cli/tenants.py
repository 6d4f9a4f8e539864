"""``sardeenz tenants`` and ``sardeenz usage``: tenants, their limits and what they used.

``usage`` asks ``GET /api/v1/usage`` with a question (a range, a step, a grouping):
the billable usage of tenants' requests, in a cluster summed over every pod; the
server checks the question (its refusals are printed as they are, with their code).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from sardeenz.cli.client import DEFAULT_URL, Api, TokenOpt, UrlOpt, die, error_message
from sardeenz.cli.output import Cell, Col, JsonOpt, emit, emit_json, when

__all__ = ["app", "usage"]

app = typer.Typer(help="Tenants: their members, limits and current use.")

_LIMITS = (
    ("requests_per_minute", "rpm"),
    ("tokens_per_minute", "tpm"),
    ("concurrent_requests", "conc"),
    ("tokens_per_day", "day"),
    ("tokens_per_month", "month"),
)


def count(n: int | None) -> str:
    """A count as a person reads it at a glance: 950, 12.5k, 3.2M, 1.1G."""
    if n is None:
        return "-"
    for size, unit in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f}".removesuffix(".0") + unit
    return str(n)


def limits_text(limits: dict[str, Any]) -> str:
    """``rpm 600 · tpm 200k · conc 16``; ``-`` for no limit at all."""
    parts = [f"{short} {count(limits[name])}" for name, short in _LIMITS if limits.get(name)]
    return " · ".join(parts) or "-"


def _use(tenant: dict[str, Any], field: str) -> int | None:
    found = (tenant.get("usage") or {}).get("*") or {}
    value = found.get(field)
    return int(value) if isinstance(value, int) else None


def tenant_rows(tenants: list[dict[str, Any]]) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for t in tenants:
        limits = t.get("limits") or {}
        models = t.get("models") or {}
        scope = limits_text(limits)
        if models:
            scope += f" (+{len(models)} model{'s' if len(models) != 1 else ''})"
        conc = limits.get("concurrent_requests")
        flight = _use(t, "concurrent_requests") or 0
        rows.append(
            [
                t["name"],
                t.get("source", "-"),
                ", ".join(t.get("api_keys") or []) or "-",
                scope,
                f"{flight}/{conc}" if conc else str(flight),
                count(_use(t, "tokens_today")),
                count(_use(t, "tokens_this_month")),
            ]
        )
    return rows


_TENANT_COLS = (
    Col("NAME", is_id=True),
    Col("SOURCE"),
    Col("KEYS"),
    Col("LIMITS"),
    Col("IN FLIGHT", right=True),
    Col("TODAY", right=True),
    Col("MONTH", right=True),
)


@app.command("list")
def tenants_list(
    url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """List the tenants: keys, limits, requests in flight, tokens today and this month."""
    tenants = Api(url, token).call("GET", "/api/v1/tenants")
    if as_json:
        emit_json(tenants)
    elif not tenants:
        print("No tenants. Define them in the config file or with PUT /api/v1/tenants/NAME.")
    else:
        emit("Tenants", _TENANT_COLS, tenant_rows(tenants))


app.command("ls", hidden=True)(tenants_list)


@app.command("show")
def tenants_show(
    name: Annotated[str, typer.Argument(help="The tenant's name.", show_default=False)],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
) -> None:
    """Show one tenant in full (JSON)."""
    emit_json(Api(url, token).call("GET", f"/api/v1/tenants/{name}"))


def usage_rows(report: dict[str, Any]) -> tuple[list[Col], list[list[Cell]]]:
    """The columns the question kept (a START column with a step, one per grouping)."""
    groups = report.get("groupBy") or []
    cols: list[Col] = []
    if report.get("step"):
        cols.append(Col("START"))
    cols += [Col(g.upper(), is_id=True) for g in groups]
    # Short headers: a header is a column's narrowest width (tokens: prompt, completion;
    # REFUSED: by a limit, 429), so tenant, key and model fit beside them at 80 columns.
    cols += [
        Col("REQS", right=True),
        Col("PROMPT", right=True),
        Col("COMPL", right=True),
        Col("REFUSED", right=True),
    ]
    rows: list[list[Cell]] = []
    for b in report.get("buckets") or []:
        row: list[Cell] = [when(b["start"])] if report.get("step") else []
        row += [str(b.get(g) or "-") for g in groups]
        rejected = int(b.get("rejectedRequests") or 0)
        row += [
            str(b["requests"]),
            str(b["promptTokens"]),
            str(b["completionTokens"]),
            (str(rejected), "red") if rejected else "0",
        ]
        rows.append(row)
    return cols, rows


def usage(
    start: Annotated[
        str | None,
        typer.Option("--from", help="ISO 8601 or unix seconds (default: a day before --to)."),
    ] = None,
    to: Annotated[
        str | None, typer.Option("--to", help="ISO 8601 or unix seconds (default: now).")
    ] = None,
    group_by: Annotated[
        str,
        typer.Option("--group-by", help="Comma-separated: tenant, key, model ('' for none)."),
    ] = "tenant,key,model",
    step: Annotated[
        str | None,
        typer.Option("--step", help="Bucket width: 60, 5m, 1h, 1d (default: one per group)."),
    ] = None,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print the server's CSV.")] = False,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Billable usage of tenants' requests: requests, tokens and refusals per tenant, key
    and model over a time range (in a cluster, every pod's)."""
    params: dict[str, str] = {"group_by": group_by}
    for name, value in (("from", start), ("to", to), ("step", step)):
        if value is not None:
            params[name] = value
    api = Api(url, token, {"from": "--from", "to": "--to", "group_by": "--group-by"})
    if as_csv:
        resp = api.request("GET", "/api/v1/usage.csv", params=params)
        if resp.status >= 400:
            die(f"error {resp.status}: {error_message(resp, api.flags)}")
        sys.stdout.write(resp.content.decode())
        return
    report = api.call("GET", "/api/v1/usage", params=params)
    if as_json:
        emit_json(report)
        return
    missing = report.get("missingPods") or []
    if missing:
        print(f"warning: no answer from {', '.join(missing)}: their usage is missing")
    if not report.get("buckets"):
        print(f"No usage from {when(report['start'])} to {when(report['end'])}.")
        return
    cols, rows = usage_rows(report)
    emit(f"Usage {when(report['start'])} to {when(report['end'])}", cols, rows)
