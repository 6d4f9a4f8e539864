"""``sardeenz moves``: blue-green moves of an instance to another pod or GPUs."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from sardeenz.cli.client import DEFAULT_URL, Api, TokenOpt, UrlOpt, die
from sardeenz.cli.output import Cell, Col, JsonOpt, emit, emit_json
from sardeenz.cli.resolve import resolve_instance

__all__ = ["app"]

app = typer.Typer(help="Blue-green moves: list, show and start them.")

EXIT_FAILED = 1
_STATE_STYLE = {"done": "green", "failed": "red"}


def _rows(items: list[dict[str, Any]]) -> list[list[Cell]]:
    return [
        [
            m["id"],
            m["model"],
            f"{m['sourcePodId']} -> {m['targetPodId']}",
            (m["state"], _STATE_STYLE.get(m["state"], "yellow")),
            m.get("code") or "",
            m.get("reason") or "",
        ]
        for m in items
    ]


_COLS = (
    Col("ID", is_id=True),
    Col("MODEL"),
    Col("PODS"),
    Col("STATE"),
    Col("CODE"),
    Col("REASON"),
)


@app.command("ls")
def moves_ls(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List the moves the leader holds, newest first."""
    items = Api(url, token).call("GET", "/api/cluster/moves")
    if as_json:
        emit_json(items)
    elif not items:
        print("No moves.")
    else:
        emit("Moves", _COLS, _rows(items))


@app.command("show")
def moves_show(
    move_id: Annotated[str, typer.Argument(help="The move's id.", show_default=False)],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
) -> None:
    """Show one move with its steps (JSON)."""
    emit_json(Api(url, token).call("GET", f"/api/cluster/moves/{move_id}"))


@app.command("start")
def moves_start(
    instance: Annotated[
        str,
        typer.Argument(help="Instance id, a unique prefix of one, or the served model name."),
    ],
    to: Annotated[str, typer.Option("--to", help="The target pod's id.", show_default=False)],
    gpu: Annotated[
        list[int] | None, typer.Option("--gpu", help="GPU of the target pod (repeat).")
    ] = None,
    drain_seconds: Annotated[
        float | None, typer.Option("--drain", help="Seconds the source's requests get.")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow it to its end: exit 0 done, 1 failed.")
    ] = False,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Move an instance to another pod (or other GPUs of its pod)."""
    api = Api(url, token)
    body: dict[str, Any] = {"instanceId": resolve_instance(api, instance), "targetPodId": to}
    if gpu:
        body["gpuIds"] = gpu
    if drain_seconds is not None:
        body["drainSeconds"] = drain_seconds
    move = api.call("POST", "/api/cluster/moves", json=body)
    while wait and move["state"] not in ("done", "failed"):
        time.sleep(0.5)
        move = api.call("GET", f"/api/cluster/moves/{move['id']}")
    if as_json:
        emit_json(move)
    else:
        emit("Move", _COLS, _rows([move]))
    if wait and move["state"] != "done":
        raise typer.Exit(EXIT_FAILED)
    if not move.get("id"):
        die("the server answered no move")
