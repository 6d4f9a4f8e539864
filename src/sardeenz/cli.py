"""The ``sardeenz`` command: serve, sim-engine, and operator commands against a server."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from sardeenz import __version__
from sardeenz.config import ConfigError, Settings, load_settings
from sardeenz.logsetup import configure_logging

app = typer.Typer(
    help="Sardeenz: many LLM engines on shared GPUs behind one OpenAI-compatible endpoint.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
models_app = typer.Typer(help="Load, unload and inspect model instances on a running server.")
app.add_typer(models_app, name="models")

console = Console()
err = Console(stderr=True)

DEFAULT_URL = "http://127.0.0.1:3000"
DEMO_SUBDIR = "demo"
UrlOpt = Annotated[
    str, typer.Option("--url", envvar="SARDEENZ_URL", help="Base URL of a running server.")
]
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", envvar="SARDEENZ_TOKEN", help="Bearer token for the admin API."),
]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 3000).")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Where the database and engine logs live.")
    ] = None,
    sim_gpus: Annotated[
        str | None,
        typer.Option(help="Simulated GPUs, e.g. 'NVIDIA L4:24GiB,Tesla T4:16GiB'."),
    ] = None,
    demo: Annotated[
        bool | None,
        typer.Option("--demo", help="Simulated GPUs, the simulated engine, demo models."),
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="YAML file of settings.")] = None,
    insecure: Annotated[
        bool | None,
        typer.Option("--insecure", help="Allow a non-loopback bind without authentication."),
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning, error")] = None,
) -> None:
    """Run the Sardeenz server on this node."""
    try:
        settings = load_settings(
            config,
            host=host,
            port=port,
            data_dir=data_dir,
            sim_gpus=sim_gpus,
            demo=demo,
            insecure=insecure,
            log_level=log_level,
        )
    except (ConfigError, ValidationError) as exc:
        err.print(
            f"[red]sardeenz: invalid configuration:[/red] {config_error_line(exc)}",
            soft_wrap=True,
            highlight=False,
        )
        raise typer.Exit(2) from exc
    if settings.demo:
        settings = demo_settings(settings)
    _configure_logging(settings)
    log = logging.getLogger("sardeenz")
    from sardeenz.store.preflight import EXIT_STORAGE, StorageError, preflight

    try:
        for warning in preflight(settings.data_dir, settings.effective_database_url):
            log.warning("%s", warning)
    except StorageError as exc:
        err.print(f"sardeenz: {exc}", soft_wrap=True, highlight=False, markup=False, style="red")
        raise typer.Exit(EXIT_STORAGE) from None
    if settings.demo:
        gpus = ", ".join(g.name for g in settings.effective_sim_gpus)
        log.warning(
            "DEMO MODE: simulated GPUs (%s) and the simulated engine; no real model runs here; "
            "data in %s",
            gpus,
            settings.data_dir,
        )
    elif settings.effective_sim_gpus:
        log.warning("simulated GPUs in use: %s", settings.sim_gpus)
    if not _is_loopback(settings.host) and not settings.auth_enabled and not settings.insecure:
        err.print(
            f"[red]sardeenz: refusing to bind {settings.host}: "
            "no authentication is configured.[/red]\n"
            "Set SARDEENZ_JWT_SECRET, SARDEENZ_JWT_JWKS_URL or SARDEENZ_OIDC_ISSUER, "
            "bind 127.0.0.1, or pass --insecure to accept the risk."
        )
        raise typer.Exit(2)
    if settings.auth_enabled:
        log.info("admin API authentication: on (roles claim %r)", settings.jwt_roles_claim)
    elif not _is_loopback(settings.host):
        log.warning("binding %s with NO authentication (--insecure)", settings.host)
    else:
        log.warning(
            "no authentication configured: bound to %s only; every local caller is admin",
            settings.host,
        )
    _run_server(settings)


def demo_settings(settings: Settings) -> Settings:
    """The demo's own data under ``<data_dir>/demo``: its database, logs and runs.

    Simulated profiles, benchmark runs and audit entries must never mix with a real
    node's, and a demo started on a node's data dir must not re-adopt its instances.
    An explicit ``DATABASE_URL`` is the operator's choice and kept as given.
    """
    return settings.model_copy(update={"data_dir": settings.data_dir / DEMO_SUBDIR})


def config_error_line(exc: ConfigError | ValidationError) -> str:
    """One line per start-up: which setting is wrong and why, without pydantic's banner."""
    if isinstance(exc, ConfigError):
        return str(exc)
    parts = []
    for e in exc.errors():
        where = ".".join(str(p) for p in e.get("loc", ())) or "settings"
        message = str(e.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def _configure_logging(settings: Settings) -> None:
    """One record per line (``logsetup``): user text in a message cannot forge a record."""
    configure_logging(settings.log_level, settings.log_format)


def _run_server(settings: Settings) -> None:
    import uvicorn

    from sardeenz.app import create_app

    gateway = create_app(settings)
    uvicorn.run(
        gateway,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        # /v1 connections take the fast lane; everything else is uvicorn's.
        http=gateway.http_protocol(settings),
        log_level=settings.log_level,
        access_log=False,
        # Engines and clients keep connections warm across quiet spells; uvicorn's
        # 5 s default made a burst after a pause pay one TCP handshake per request.
        timeout_keep_alive=75,
        proxy_headers=False,
        timeout_graceful_shutdown=5,
        log_config=None,
    )


@app.command(
    "sim-engine",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def sim_engine(ctx: typer.Context) -> None:
    """The simulated engine: a vLLM-compatible server for demos and tests (see --help)."""
    from sardeenz.sim.server import main as sim_main

    raise typer.Exit(sim_main(list(ctx.args)))


@app.command()
def version() -> None:
    """Print the version."""
    console.print(__version__)


# --- operator commands -------------------------------------------------------------


def _client(url: str, token: str | None, timeout: float | None = 60.0) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)


def _sse(
    url: str, token: str | None, path: str, params: dict[str, str] | None = None
) -> Iterator[tuple[str, Any]]:
    """The (event, JSON data) pairs of a server-sent event stream, as they arrive.

    An error status exits with the server's message; lines of one event are
    joined as the SSE format says (``data:`` lines, ended by a blank line).
    """
    with (
        _client(url, token, timeout=None) as client,
        client.stream("GET", path, params=params) as resp,
    ):
        if resp.status_code >= 400:
            resp.read()
            err.print(f"[red]error {resp.status_code}:[/red] {resp.text}")
            raise typer.Exit(1)
        event = "message"
        data: list[str] = []
        for line in resp.iter_lines():
            if not line:
                if data:
                    yield event, json.loads("\n".join(data))
                event, data = "message", []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))


def _call(url: str, token: str | None, method: str, path: str, **kw: Any) -> Any:
    try:
        with _client(url, token) as client:
            resp = client.request(method, path, **kw)
    except httpx.HTTPError as exc:
        err.print(f"[red]cannot reach {url}:[/red] {exc}")
        raise typer.Exit(1) from exc
    if resp.status_code >= 400:
        try:
            body = resp.json()
            msg = f"{body.get('detail')} ({body.get('code')})"
        except ValueError:
            msg = resp.text
        err.print(f"[red]error {resp.status_code}:[/red] {msg}")
        raise typer.Exit(1)
    return resp.json()


_STATUS_STYLE = {
    "active": "green",
    "starting": "yellow",
    "sleeping": "blue",
    "stopping": "magenta",
    "failed": "red",
}


def _instances_table(items: list[dict[str, Any]]) -> Table:
    table = Table(title="Model instances")
    for col in ("ID", "Served name", "Engine", "Status", "Port", "PID", "GPUs", "Error"):
        table.add_column(col)
    for it in items:
        status = it["status"]
        engine = it["engine"] + (" (sim)" if it.get("simulated") and it["engine"] != "sim" else "")
        table.add_row(
            it["id"],
            it["servedModelName"],
            engine,
            f"[{_STATUS_STYLE.get(status, 'white')}]{status}[/]",
            str(it["port"]),
            str(it.get("processId") or ""),
            ",".join(str(g) for g in it.get("gpuIds") or []) or "-",
            (it.get("errorMessage") or "")[:60],
        )
    return table


@models_app.command("ls")
def models_ls(
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List instances."""
    items = _call(url, token, "GET", "/api/v1/models")
    if as_json:
        console.print_json(json.dumps(items))
    elif not items:
        console.print("No model instances. Load one with `sardeenz models load MODEL_PATH`.")
    else:
        console.print(_instances_table(items))


@models_app.command("show")
def models_show(instance_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Show one instance in full (JSON)."""
    console.print_json(json.dumps(_call(url, token, "GET", f"/api/v1/models/{instance_id}")))


@models_app.command("load")
def models_load(
    model_path: str,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    engine: Annotated[str | None, typer.Option(help="vllm or sim")] = None,
    served_model_name: Annotated[str | None, typer.Option("--name")] = None,
    gpu: Annotated[list[int] | None, typer.Option("--gpu", help="GPU index (repeat)")] = None,
    gpu_memory_limit: Annotated[float | None, typer.Option(help="GB per GPU")] = None,
    tensor_parallel_size: Annotated[int, typer.Option("--tp")] = 1,
    sleep_mode: Annotated[bool, typer.Option("--sleep-mode")] = False,
    extra: Annotated[
        list[str] | None, typer.Option("--arg", help="Extra engine argument (repeat)")
    ] = None,
) -> None:
    """Load a model; returns once the instance is `starting`."""
    body: dict[str, Any] = {"modelPath": model_path, "tensorParallelSize": tensor_parallel_size}
    if engine:
        body["engine"] = engine
    if served_model_name:
        body["servedModelName"] = served_model_name
    if gpu:
        body["gpuIds"] = gpu
    if gpu_memory_limit is not None:
        body["gpuMemoryLimit"] = gpu_memory_limit
    if sleep_mode:
        body["enableSleepMode"] = True
    if extra:
        body["extraArgs"] = extra
    inst = _call(url, token, "POST", "/api/v1/models/load", json=body)
    console.print(_instances_table([inst]))


@models_app.command("unload")
def models_unload(instance_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Unload an instance and wait until its processes are gone."""
    inst = _call(url, token, "POST", f"/api/v1/models/{instance_id}/unload")
    console.print(f"unloaded {inst['id']} ({inst['servedModelName']})")


@models_app.command("logs")
def models_logs(
    instance_id: str,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n")] = 200,
) -> None:
    """Print an instance's engine log; -f follows it live."""
    if not follow:
        out = _call(
            url, token, "GET", f"/api/v1/models/{instance_id}/logs", params={"lines": lines}
        )
        for line in out["lines"]:
            print(line)
        return
    try:
        path = f"/api/v1/models/instances/{instance_id}/events"
        for event, data in _sse(url, token, path, {"replay": "true"}):
            if event == "log":
                print(data["line"], flush=True)
            elif event == "status":
                err.print(f"[bold]-- status: {data['status']}[/bold]")
            elif event == "removed":
                err.print("[bold]-- instance removed[/bold]")
                return
    except KeyboardInterrupt:
        return
    except httpx.HTTPError as exc:
        err.print(f"[red]connection lost:[/red] {exc}")
        raise typer.Exit(1) from exc


# --- benchmarks and memory profiles -------------------------------------------------

bench_app = typer.Typer(help="Benchmark model instances on a running server.")
profiles_app = typer.Typer(help="Memory profiles and 'will it fit' checks on a running server.")
app.add_typer(bench_app, name="bench")
app.add_typer(profiles_app, name="profiles")

_RUN_STYLE = {
    "pending": "yellow",
    "running": "yellow",
    "completed": "green",
    "cancelled": "magenta",
    "failed": "red",
}


def _num(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _results_table(run: dict[str, Any]) -> Table:
    status = run["status"]
    title = (
        f"Benchmark {run.get('name') or run['id']} ({run['mode']}): "
        f"[{_RUN_STYLE.get(status, 'white')}]{status}[/]"
    )
    table = Table(title=title)
    for col in (
        "Model",
        "Route",
        "In/Out",
        "Conc",
        "OK/Fail",
        "TTFT p50/p99 ms",
        "TPS p50",
        "E2E p50/p99 ms",
        "Goodput",
        "Req/s",
        "Tok/s",
    ):
        table.add_column(col, justify="right" if col != "Model" else "left")
    for sc in run["scenarios"]:
        m = sc.get("metrics") or {}
        goodput = f"{m['goodputCount']} ({m['goodputPercent']:.0f}%)" if m else "-"
        table.add_row(
            sc["modelName"],
            sc["routingMode"],
            f"{sc['inputTokens']}/{sc['outputTokens']}",
            str(sc["concurrency"]),
            f"{sc['successfulRequests']}/{sc['failedRequests']}",
            f"{_num(m.get('ttftP50'))}/{_num(m.get('ttftP99'))}",
            _num(m.get("tpsP50")),
            f"{_num(m.get('e2eP50'))}/{_num(m.get('e2eP99'))}",
            goodput,
            _num(m.get("requestsPerSecond"), 2),
            _num(m.get("tokensPerSecondTotal")),
        )
    return table


def _print_run(run: dict[str, Any]) -> None:
    console.print(_results_table(run))
    if run.get("errorMessage"):
        err.print(f"[red]{run['errorMessage']}[/red]")
    for sc in run["scenarios"]:
        if sc.get("errorMessage") and sc["status"] != "failed":
            err.print(f"[yellow]{sc['modelName']}: {sc['errorMessage']}[/yellow]")


def _follow_run(url: str, token: str | None, run: dict[str, Any], quiet: bool) -> dict[str, Any]:
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
        for event, data in _sse(url, token, f"/api/benchmarks/{run['id']}/events"):
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
        final = _call(url, token, "GET", f"/api/benchmarks/{run['id']}")
    return final


@bench_app.command("run")
def bench_run(
    model: Annotated[str, typer.Option("--model", help="Served model name (or model path).")],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    instance: Annotated[
        str | None, typer.Option("--instance", help="Instance id (default: the first active one).")
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
    as_json: Annotated[bool, typer.Option("--json", help="Print the run as JSON.")] = False,
) -> None:
    """Benchmark the active instance serving MODEL: progress bar, then a results table."""
    if instance is None:
        items = _call(url, token, "GET", "/api/v1/models")
        serving = [
            it
            for it in items
            if it["status"] == "active" and model in (it["servedModelName"], it["modelPath"])
        ]
        if not serving:
            err.print(f"[red]no active instance serves {model!r}[/red]")
            raise typer.Exit(1)
        instance = serving[0]["id"]
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
    run = _call(url, token, "POST", "/api/benchmarks", json=body)
    try:
        final = _follow_run(url, token, run, quiet=as_json)
    except KeyboardInterrupt:
        err.print("[yellow]cancelling the run...[/yellow]")
        final = _call(url, token, "POST", f"/api/benchmarks/{run['id']}/cancel")
    except httpx.HTTPError as exc:
        err.print(f"[red]lost the progress stream:[/red] {exc}")
        final = _call(url, token, "GET", f"/api/benchmarks/{run['id']}")
    if as_json:
        print(json.dumps(final))
    else:
        _print_run(final)
    if final["status"] != "completed":
        raise typer.Exit(1)


@bench_app.command("ls")
def bench_ls(
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List benchmark runs, newest first."""
    runs = _call(url, token, "GET", "/api/benchmarks")
    if as_json:
        print(json.dumps(runs))
        return
    table = Table(title="Benchmark runs")
    for col in ("ID", "Name", "Mode", "Status", "Created", "Requests ok/fail", "Seconds"):
        table.add_column(col)
    for r in runs:
        table.add_row(
            r["id"],
            r.get("name") or "",
            r["mode"],
            f"[{_RUN_STYLE.get(r['status'], 'white')}]{r['status']}[/]",
            r["createdAt"][:19],
            f"{r['successfulRequests']}/{r['failedRequests']} of {r['totalRequests']}",
            _num(r.get("durationSeconds")),
        )
    console.print(table)


@bench_app.command("show")
def bench_show(
    run_id: str,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show one run's results."""
    run = _call(url, token, "GET", f"/api/benchmarks/{run_id}")
    if as_json:
        print(json.dumps(run))
    else:
        _print_run(run)


@bench_app.command("cancel")
def bench_cancel(run_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Stop a running benchmark now."""
    run = _call(url, token, "POST", f"/api/benchmarks/{run_id}/cancel")
    console.print(f"run {run['id']}: {run['status']}")


def _gb(n_bytes: int | None) -> str:
    return "-" if n_bytes is None else f"{n_bytes / 1e9:.1f} GB"


@profiles_app.command("ls")
def profiles_ls(
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    model: Annotated[str | None, typer.Option("--model", help="Only this model path.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List memory profiles, newest first."""
    params = {"model_path": model} if model else None
    items = _call(url, token, "GET", "/api/memory/profiles", params=params)
    if as_json:
        print(json.dumps(items))
        return
    table = Table(title="Memory profiles (GiB)")
    for col in ("ID", "Name", "Model", "Max tokens", "GPU", "Total", "Weights", "Graphs", "KV"):
        table.add_column(col)
    for p in items:
        table.add_row(
            p["id"][:8],
            p["profileName"],
            p["modelPath"],
            str(p["maxTokens"]),
            p.get("gpuName") or "-",
            _num(p["totalGpuMemoryGib"], 2),
            _num(p["weightsMemoryGib"], 2),
            _num(p["cudaGraphsGib"], 2),
            _num(p["kvCacheAvailableGib"], 2),
        )
    console.print(table)


@profiles_app.command("save")
def profiles_save(
    instance_id: str,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    name: Annotated[str | None, typer.Option("--name")] = None,
    comments: Annotated[str | None, typer.Option("--comments")] = None,
) -> None:
    """Save a profile from a running instance's measured memory."""
    body = {"instanceId": instance_id, "profileName": name, "comments": comments}
    p = _call(url, token, "POST", "/api/memory/profiles", json=body)
    console.print(f"saved profile {p['id']}: {p['profileName']}")


@profiles_app.command("check")
def profiles_check(
    model_path: str,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    max_tokens: Annotated[int | None, typer.Option(help="Context length.")] = None,
    gpu: Annotated[list[int] | None, typer.Option("--gpu", help="GPU index (repeat)")] = None,
    tensor_parallel_size: Annotated[int, typer.Option("--tp")] = 1,
    gpu_memory_limit: Annotated[float | None, typer.Option(help="GB per GPU")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Will MODEL_PATH fit on the server's GPUs now? Exit 1 when it will not."""
    body: dict[str, Any] = {"modelPath": model_path, "tensorParallelSize": tensor_parallel_size}
    if max_tokens is not None:
        body["maxTokens"] = max_tokens
    if gpu:
        body["gpuIds"] = gpu
    if gpu_memory_limit is not None:
        body["gpuMemoryLimit"] = gpu_memory_limit
    verdict = _call(url, token, "POST", "/api/memory/profiles/check", json=body)
    if as_json:
        print(json.dumps(verdict))
    else:
        colour = {True: "green", False: "red", None: "yellow"}[verdict["fits"]]
        console.print(f"[{colour}]{verdict['reason']}[/] (source: {verdict['source']})")
        if verdict["gpus"]:
            table = Table()
            for col in ("GPU", "Name", "Free after reserve", "Needed", "Fits"):
                table.add_column(col)
            for g in verdict["gpus"]:
                table.add_row(
                    str(g["index"]),
                    g["name"],
                    _gb(g["availableBytes"]),
                    _gb(g["neededBytes"]),
                    {True: "yes", False: "no", None: "?"}[g["fits"]],
                )
            console.print(table)
        for note in verdict.get("notes", []):
            console.print(f"  note: {note}")
    if verdict["fits"] is False:
        raise typer.Exit(1)


@profiles_app.command("rm")
def profiles_rm(profile_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Delete a profile."""
    try:
        with _client(url, token) as client:
            resp = client.delete(f"/api/memory/profiles/{profile_id}")
    except httpx.HTTPError as exc:
        err.print(f"[red]cannot reach {url}:[/red] {exc}")
        raise typer.Exit(1) from exc
    if resp.status_code >= 400:
        err.print(f"[red]error {resp.status_code}:[/red] {resp.text}")
        raise typer.Exit(1)
    console.print(f"deleted profile {profile_id}")


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()


if __name__ == "__main__":
    main()
