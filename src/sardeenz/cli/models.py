"""``sardeenz models``: load, wait for, sleep, wake, unload and inspect instances."""

from __future__ import annotations

import time
from collections import deque
from typing import Annotated, Any

import typer

from sardeenz.cli.client import (
    DEFAULT_URL,
    EXIT_USAGE,
    Api,
    ConnectionLost,
    TokenOpt,
    UrlOpt,
    die,
    err,
)
from sardeenz.cli.output import Cell, Col, JsonOpt, emit, emit_json
from sardeenz.cli.resolve import resolve_instance
from sardeenz.healthpolls import is_health_poll

__all__ = ["EXIT_FAILED", "app"]

app = typer.Typer(help="Load, unload and inspect model instances on a running server.")

EXIT_FAILED = 1
MAX_LOG_LINES = 100_000
"""The most ``GET .../logs`` returns (its ``lines`` bound); the buffer holds fewer."""

InstanceArg = Annotated[
    str,
    typer.Argument(
        help="Instance id, a unique prefix of one, or the served model name.", show_default=False
    ),
]

_STATUS_STYLE = {
    "active": "green",
    "starting": "yellow",
    "sleeping": "blue",
    "stopping": "magenta",
    "failed": "red",
}

LOAD_FLAGS = {
    "modelPath": "MODEL_PATH",
    "engine": "--engine",
    "servedModelName": "--name",
    "gpuIds": "--gpu",
    "gpuMemoryLimit": "--gpu-memory-limit",
    "tensorParallelSize": "--tp",
    "enableSleepMode": "--sleep-mode",
    "extraArgs": "--arg",
    "force": "--force",
}
"""Load request fields -> this command's flags, for the server's validation errors."""

SLEEP_FLAGS = {"force": "--force", "enableSleepMode": "--sleep-mode"}
"""A sleep refusal names the sleep's --force and the load flag that enables sleep mode."""


def managed_cell(managed_by: dict[str, Any] | None) -> str:
    """``preset NAME`` or ``catalog`` (the entry is the served name): what restores it."""
    if not managed_by:
        return "-"
    if managed_by.get("kind") == "preset":
        return f"preset {managed_by.get('name', '')}"
    return str(managed_by.get("kind", "-"))


def _rows(items: list[dict[str, Any]], pods: bool, managed: bool) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for it in items:
        status = it["status"]
        engine = it["engine"] + (" (sim)" if it.get("simulated") and it["engine"] != "sim" else "")
        rows.append(
            [
                it["id"],
                it["servedModelName"],
                engine,
                (status, _STATUS_STYLE.get(status, "white")),
                str(it["port"]),
                str(it.get("processId") or "-"),
                ",".join(str(g) for g in it.get("gpuIds") or []) or "-",
                it.get("errorMessage") or "",
            ]
        )
        if managed:
            rows[-1].insert(4, managed_cell(it.get("managedBy")))
        if pods:
            rows[-1].insert(1, it.get("podId") or "-")
    return rows


_COLS = (
    Col("ID", is_id=True),
    Col("NAME"),
    Col("ENGINE"),
    Col("STATUS"),
    Col("PORT", right=True),
    Col("PID", right=True),
    Col("GPUS"),
    Col("ERROR"),
)


def _show(items: list[dict[str, Any]], as_json: bool, title: str = "Model instances") -> None:
    """The table; with a POD column when the server is in a cluster (instances carry their
    ``podId`` then), a MANAGED column when the applied preset or the catalog manages one
    (an unload of it is undone: the leader reloads it, or the next request starts it)."""
    if as_json:
        emit_json(items)
        return
    pods = any(it.get("podId") for it in items)
    managed = any(it.get("managedBy") for it in items)
    cols = list(_COLS)
    if managed:
        cols.insert(4, Col("MANAGED"))
    if pods:
        cols.insert(1, Col("POD"))
    emit(title, cols, _rows(items, pods, managed))


@app.command("ls")
def models_ls(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List instances (full ids; tab-separated lines when piped)."""
    items = Api(url, token).call("GET", "/api/v1/models")
    if not items and not as_json:
        print("No model instances. Load one with `sardeenz models load MODEL_PATH`.")
        return
    _show(items, as_json)


@app.command("show")
def models_show(
    instance: InstanceArg,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Accepted for symmetry: the output is JSON anyway.")
    ] = True,
) -> None:
    """Show one instance in full (JSON)."""
    api = Api(url, token)
    emit_json(api.call("GET", f"/api/v1/models/{resolve_instance(api, instance)}"))


@app.command("load")
def models_load(
    model_path: Annotated[
        str, typer.Argument(help="Model path or Hugging Face id.", show_default=False)
    ],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    engine: Annotated[str | None, typer.Option(help="vllm or sim (default: the server's).")] = None,
    served_model_name: Annotated[
        str | None, typer.Option("--name", help="Name clients use in /v1 requests.")
    ] = None,
    gpu: Annotated[
        list[int] | None, typer.Option("--gpu", help="GPU index to use (repeat for several).")
    ] = None,
    gpu_memory_limit: Annotated[
        float | None, typer.Option(help="Memory to reserve per GPU, in GB.")
    ] = None,
    tensor_parallel_size: Annotated[
        int, typer.Option("--tp", help="Tensor-parallel size (number of GPUs).")
    ] = 1,
    sleep_mode: Annotated[
        bool, typer.Option("--sleep-mode", help="Start the engine with sleep mode enabled.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Load even if the memory estimate says it will not fit (free GPU memory "
            "is still required).",
        ),
    ] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Show the load phases and exit when it ends: 0 active, 1 failed.",
        ),
    ] = False,
    extra: Annotated[
        list[str] | None, typer.Option("--arg", help="Extra engine argument (repeat).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Load a model: returns once it is `starting`, or with --wait once it is active."""
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
    if force:
        body["force"] = True
    if extra:
        body["extraArgs"] = extra
    api = Api(url, token, LOAD_FLAGS)
    inst = api.call("POST", "/api/v1/models/load", json=body)
    if wait:
        inst = _wait_active(api, inst)
    if as_json:
        emit_json(inst)
    else:
        _show([inst], False, title="Model instance")
    if inst["status"] != "active" and wait:
        raise typer.Exit(EXIT_FAILED)


def _wait_active(api: Api, inst: dict[str, Any]) -> dict[str, Any]:
    """Follow the instance's events, printing each load phase once, until it settles.

    Phases come from two sources: the engine's log lines (``logparse.load_phase``) and the
    instance's ``phase`` events (its ``loadPhase``, kept by the server with the same
    function) and status events (``active`` is "ready", ``failed`` ends the wait with the
    error). The stream replays the log first, so a fast engine's lines are not
    missed between the load answer and the subscription.
    """
    t0 = time.monotonic()
    seen: list[str] = []

    def phase(name: str, detail: str = "") -> None:
        if name in seen:
            return
        seen.append(name)
        err.print(f"{time.monotonic() - t0:6.1f}s  {name}{detail}", markup=False)

    pid = inst.get("processId")
    phase("spawned", f" (port {inst['port']}" + (f", pid {pid})" if pid else ")"))
    path = f"/api/v1/models/instances/{inst['id']}/events"
    from sardeenz.engines.logparse import load_phase  # pydantic's domain: only when waiting

    try:
        for event, data in api.sse(path, {"replay": "true"}):
            if event == "log":
                found = load_phase(data["line"])
                if found:
                    phase(found)
            elif event == "phase":
                if data.get("loadPhase") not in (None, "spawned"):
                    phase(data["loadPhase"])
            elif event == "status":
                inst = data["instance"]
                if data["status"] == "active":
                    phase("ready")
                    return inst
                if data["status"] == "failed":
                    err.print(
                        f"{time.monotonic() - t0:6.1f}s  failed: {data.get('errorMessage')}",
                        markup=False,
                        style="red",
                    )
                    return inst
            elif event == "removed":
                die("the instance was removed before it became active")
    except KeyboardInterrupt:
        die("stopped waiting; the load goes on (see `sardeenz models ls`)", 130)
    except ConnectionLost as exc:
        die(f"lost the event stream: {exc}")
    return api.call("GET", f"/api/v1/models/{inst['id']}")  # type: ignore[no-any-return]


@app.command("unload")
def models_unload(
    instance: InstanceArg,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Unload an instance and wait until its processes are gone."""
    api = Api(url, token)
    inst = api.call("POST", f"/api/v1/models/{resolve_instance(api, instance)}/unload")
    if as_json:
        emit_json(inst)
    else:
        print(f"unloaded {inst['id']} ({inst['servedModelName']})")


@app.command("sleep")
def models_sleep(
    instance: InstanceArg,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    level: Annotated[
        int,
        typer.Option(min=1, max=2, help="1: weights to CPU RAM; 2: discard the weights."),
    ] = 1,
    force: Annotated[
        bool, typer.Option("--force", help="Cut requests in flight instead of waiting for them.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Put an instance to sleep (it must have been loaded with --sleep-mode)."""
    api = Api(url, token, SLEEP_FLAGS)
    inst_id = resolve_instance(api, instance)
    inst = api.call(
        "POST", f"/api/v1/models/{inst_id}/sleep", json={"level": level, "force": force}
    )
    _show([inst], as_json, title="Model instance")


@app.command("wake")
def models_wake(
    instance: InstanceArg,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Wake a sleeping instance; returns once the engine is awake."""
    api = Api(url, token)
    inst = api.call("POST", f"/api/v1/models/{resolve_instance(api, instance)}/wake")
    _show([inst], as_json, title="Model instance")


@app.command("logs")
def models_logs(
    instance: InstanceArg,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines as they come.")
    ] = False,
    lines: Annotated[
        int,
        typer.Option(
            "--lines", "-n", help="How many past lines to print (health polls not counted)."
        ),
    ] = 200,
    health: Annotated[
        bool,
        typer.Option("--health", help="Also show the access lines of the /health polls."),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per line (with -f: per event).")
    ] = False,
) -> None:
    """Print an instance's engine log; -f follows it live.

    The access lines of the controller's health polls (one every couple of seconds)
    are hidden unless --health is given; vLLM's other lines are kept as they are.
    -n counts the lines printed: the last N once the polls are left out.
    """
    if lines < 1:
        die("--lines must be at least 1", EXIT_USAGE)
    api = Api(url, token)
    inst_id = resolve_instance(api, instance)

    def shown(line: str) -> bool:
        return health or not is_health_poll(line)

    if not follow:
        # Hidden polls must not use up the count: ask for the whole buffer, then cut.
        asked = lines if health else MAX_LOG_LINES
        out = api.call("GET", f"/api/v1/models/{inst_id}/logs", params={"lines": asked})
        out["lines"] = [ln for ln in out["lines"] if shown(ln)][-lines:]
        if as_json:
            emit_json(out)
            return
        for line in out["lines"]:
            print(line)
        return
    # The replayed buffer comes first, marked ``replayed``; the first event that is
    # not (the instance's status, sent right after it) ends it: print its last N.
    backlog: deque[dict[str, Any]] = deque(maxlen=lines)
    replaying = True

    def emit_event(event: str, data: dict[str, Any]) -> None:
        if as_json:
            emit_json({"event": event, **data})
        elif event == "log":
            print(data["line"], flush=True)
        elif event == "status":
            err.print(f"[bold]-- status: {data['status']}[/bold]")

    try:
        path = f"/api/v1/models/instances/{inst_id}/events"
        for event, data in api.sse(path, {"replay": "true"}):
            if event == "log" and not shown(data["line"]):
                continue
            if replaying and event == "log" and data.get("replayed"):
                backlog.append(data)
                continue
            if replaying:
                replaying = False
                for old in backlog:
                    emit_event("log", old)
            emit_event(event, data)
            if event == "removed":
                if not as_json:
                    err.print("[bold]-- instance removed[/bold]")
                return
    except KeyboardInterrupt:
        return
    except ConnectionLost as exc:
        die(f"connection lost: {exc}")
