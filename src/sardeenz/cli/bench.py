"""``sardeenz bench``: run, follow, list and show benchmark runs."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from sardeenz.cli.client import DEFAULT_URL, Api, ConnectionLost, TokenOpt, UrlOpt, die, err
from sardeenz.cli.output import (
    Cell,
    Col,
    JsonOpt,
    console,
    emit,
    emit_json,
    is_terminal,
    table,
    when,
)
from sardeenz.cli.resolve import resolve_instance, resolve_run

__all__ = ["app", "results_table"]

app = typer.Typer(help="Benchmark model instances on a running server.")

RunArg = Annotated[
    str,
    typer.Argument(help="Run id, a unique prefix of one, or the run's name.", show_default=False),
]

_RUN_STYLE = {
    "pending": "yellow",
    "running": "yellow",
    "completed": "green",
    "cancelled": "magenta",
    "failed": "red",
}


def num(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


_RESULT_COLS = (
    Col("Model"),
    Col("Route"),
    Col("In/Out", right=True),
    Col("Conc", right=True),
    Col("OK/Fail", right=True),
    Col("Goodput", right=True),
    Col("Req/s", right=True),
    Col("Tok/s", right=True),
)

STATS = ("min", "avg", "p50", "p90", "p95", "p99", "max")
_GRID_ROWS = (("TTFT ms", "ttft"), ("E2E ms", "e2e"), ("decode tok/s", "tps"))
_GRID_COLS = (Col("metric"), *(Col(stat, right=True) for stat in STATS))


def _result_rows(run: dict[str, Any]) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for sc in run["scenarios"]:
        m = sc.get("metrics") or {}
        goodput = f"{m['goodputCount']} ({m['goodputPercent']:.0f}%)" if m else "-"
        rows.append(
            [
                sc["modelName"],
                sc["routingMode"],
                f"{sc['inputTokens']}/{sc['outputTokens']}",
                str(sc["concurrency"]),
                f"{sc['successfulRequests']}/{sc['failedRequests']}",
                goodput,
                num(m.get("requestsPerSecond"), 2),
                num(m.get("tokensPerSecondTotal")),
            ]
        )
    return rows


def _grid_rows(metrics: dict[str, Any]) -> list[list[Cell]]:
    """One row per measure, one column per statistic: the whole distribution at a glance."""
    return [
        [label, *(num(metrics.get(f"{key}{stat.capitalize()}")) for stat in STATS)]
        for label, key in _GRID_ROWS
    ]


def _title(run: dict[str, Any]) -> str:
    name = f" {run['name']}" if run.get("name") else ""
    return f"Benchmark {run['id']}{name} ({run['mode']}): {run['status']}"


def _scenario_title(sc: dict[str, Any]) -> str:
    return (
        f"{sc['modelName']} {sc['routingMode']} {sc['inputTokens']}/{sc['outputTokens']} "
        f"x{sc['concurrency']}"
    )


def results_table(run: dict[str, Any]) -> Table:
    """The run's scenarios as a rich table (title: full run id, status)."""
    tab = table(_title(run), _RESULT_COLS, _result_rows(run))
    tab.title_style = _RUN_STYLE.get(run["status"], "white")
    return tab


def _print_run(run: dict[str, Any]) -> None:
    """The summary, then per scenario one grid (TTFT / E2E / decode x min..max).

    Seven statistics of three measures in one row of a summary would need ~200
    columns; as a grid per scenario it fits 100.
    """
    measured = [sc for sc in run["scenarios"] if sc.get("metrics")]
    if is_terminal():
        console.print(results_table(run))
        for sc in measured:
            console.print(table(_scenario_title(sc), _GRID_COLS, _grid_rows(sc["metrics"])))
    else:
        print(f"# {_title(run)}")
        emit(None, _RESULT_COLS, _result_rows(run))
        for sc in measured:
            print(f"# {_scenario_title(sc)}")
            emit(None, _GRID_COLS, _grid_rows(sc["metrics"]))
    if run.get("errorMessage"):
        err.print(run["errorMessage"], markup=False, style="red")
    for sc in run["scenarios"]:
        if sc.get("errorMessage") and sc["status"] != "failed":
            err.print(f"{sc['modelName']}: {sc['errorMessage']}", markup=False, style="yellow")


def _follow_run(api: Api, run: dict[str, Any], quiet: bool) -> dict[str, Any]:
    """Follow a run's SSE stream (progress bar on stderr) until its `done` event."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bars: dict[str, Any] = {}
    names = {sc["id"]: sc["modelName"] for sc in run["scenarios"]}
    final: dict[str, Any] | None = None
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        console=err,
        disable=quiet,
        transient=False,
    ) as progress:
        for event, data in api.sse(f"/api/benchmarks/{run['id']}/events"):
            if event == "progress":
                key = f"{data['scenarioId']}:{data['phase']}"
                if key not in bars:
                    label = f"{names.get(data['scenarioId'], '?')} {data['phase']}"
                    bars[key] = progress.add_task(label, total=data["total"] or None, note="")
                note = f"[red]{data['failed']} failed[/red]" if data["failed"] else ""
                progress.update(bars[key], completed=data["completed"], note=note)
            elif event == "done":
                final = data
                break
    if final is None:  # the stream ended early (server restart): ask for the record
        final = api.call("GET", f"/api/benchmarks/{run['id']}")
    return final


@app.command("run")
def bench_run(
    model: Annotated[str, typer.Option("--model", help="Served model name (or model path).")],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    instance: Annotated[
        str | None,
        typer.Option(
            "--instance", help="Instance id, prefix or name (default: the first active one)."
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Requests in flight.")] = 8,
    requests: Annotated[int, typer.Option("--requests", help="Measured requests.")] = 100,
    warmup: Annotated[int, typer.Option(help="Unmeasured warm-up requests.")] = 0,
    input_tokens: Annotated[int, typer.Option(help="Prompt length in tokens.")] = 128,
    output_tokens: Annotated[int, typer.Option(help="Tokens generated per request.")] = 128,
    sla_ms: Annotated[
        float | None, typer.Option("--sla-ms", help="End-to-end SLA for goodput (ms).")
    ] = None,
    routing: Annotated[str, typer.Option(help="direct (engine port) or proxy (/v1).")] = "direct",
    name: Annotated[str | None, typer.Option(help="Name of the run.")] = None,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", envvar="SARDEENZ_API_KEY", help="Inference key (proxy mode)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Benchmark the active instance serving MODEL: progress bar, then a results table."""
    api = Api(url, token)
    if instance is None:
        items = api.call("GET", "/api/v1/models")
        serving = [
            it
            for it in items
            if it["status"] == "active" and model in (it["servedModelName"], it["modelPath"])
        ]
        if not serving:
            die(f"no active instance serves {model!r}")
        instance = str(serving[0]["id"])
    else:
        instance = resolve_instance(api, instance)
    body: dict[str, Any] = {
        "name": name,
        "mode": "isolated",
        "scenarios": [
            {
                "instanceId": instance,
                "routingMode": routing,
                "inputTokens": input_tokens,
                "outputTokens": output_tokens,
                "concurrency": concurrency,
                "warmupRequests": warmup,
                "totalRequests": requests,
                "slaThresholdMs": sla_ms,
            }
        ],
    }
    if api_key:
        body["apiKey"] = api_key
    run = api.call("POST", "/api/benchmarks", json=body)
    try:
        final = _follow_run(api, run, quiet=as_json)
    except KeyboardInterrupt:
        err.print("[yellow]cancelling the run...[/yellow]")
        final = api.call("POST", f"/api/benchmarks/{run['id']}/cancel")
    except ConnectionLost as exc:
        err.print(f"lost the progress stream: {exc}", markup=False, style="red")
        final = api.call("GET", f"/api/benchmarks/{run['id']}")
    if as_json:
        emit_json(final)
    else:
        _print_run(final)
    if final["status"] != "completed":
        raise typer.Exit(1)


@app.command("ls")
def bench_ls(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List benchmark runs, newest first (full ids)."""
    runs = Api(url, token).call("GET", "/api/benchmarks")
    if as_json:
        emit_json(runs)
        return
    if not runs:
        print("No benchmark runs. Start one with `sardeenz bench run --model NAME`.")
        return
    cols = (
        Col("ID", is_id=True),
        Col("NAME"),
        Col("STATUS"),
        Col("CREATED (UTC)"),
        Col("OK/FAIL OF", right=True),
    )
    rows: list[list[Cell]] = [
        [
            r["id"],
            r.get("name") or "-",
            (r["status"], _RUN_STYLE.get(r["status"], "white")),
            when(r["createdAt"]),
            f"{r['successfulRequests']}/{r['failedRequests']} of {r['totalRequests']}",
        ]
        for r in runs
    ]
    emit("Benchmark runs", cols, rows)


@app.command("show")
def bench_show(
    run_ref: RunArg, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Show one run's results."""
    api = Api(url, token)
    run = api.call("GET", f"/api/benchmarks/{resolve_run(api, run_ref)}")
    if as_json:
        emit_json(run)
    else:
        _print_run(run)


@app.command("cancel")
def bench_cancel(
    run_ref: RunArg, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Stop a running benchmark now."""
    api = Api(url, token)
    run = api.call("POST", f"/api/benchmarks/{resolve_run(api, run_ref)}/cancel")
    if as_json:
        emit_json(run)
    else:
        print(f"run {run['id']}: {run['status']}")
