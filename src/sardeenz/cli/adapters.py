"""``sardeenz adapters``: the catalog's LoRA adapters and where each is loaded."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from sardeenz.cli.client import DEFAULT_URL, Api, TokenOpt, UrlOpt
from sardeenz.cli.output import Cell, Col, JsonOpt, emit, emit_json

__all__ = ["app"]

app = typer.Typer(
    help="LoRA adapters: their base, state and the instances holding them; load, unload."
)

NameArg = Annotated[str, typer.Argument(help="The adapter's entry name.", show_default=False)]

_STATE_STYLE = {"active": "green", "sleeping": "blue", "unloaded": "white"}

_COLS = (
    Col("NAME", is_id=True),
    Col("BASE", is_id=True),
    Col("STATE"),
    Col("LOADED ON"),
    Col("IN FLIGHT", right=True),
)


def _where(p: dict[str, Any]) -> str:
    """``pod/instance`` (just the instance on a single node), ``(asleep)`` when it sleeps."""
    at = f"{p['podId']}/{p['instanceId']}" if p.get("podId") else p["instanceId"]
    return at + (" (asleep)" if p.get("sleeping") else "")


def _rows(items: list[dict[str, Any]]) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for it in items:
        placed = it.get("loadedOn") or []
        state = it["state"]
        rows.append(
            [
                it["name"],
                it["base"],
                (state, _STATE_STYLE.get(state, "white")),
                ", ".join(_where(p) for p in placed) or "-",
                str(sum(int(p.get("inFlight", 0)) for p in placed)),
            ]
        )
    return rows


@app.callback(invoke_without_command=True)
def adapters_ls(
    ctx: typer.Context,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the LoRA adapter entries: base, state, and the instances (on any pod) that
    hold each loaded, with its requests in flight. Invalid entries: `sardeenz catalog ls`."""
    if ctx.invoked_subcommand is not None:
        return
    items = Api(url, token).call("GET", "/api/v1/adapters")
    if as_json:
        emit_json(items)
    elif not items:
        print(
            "No LoRA adapters in the catalog. Add one with `sardeenz catalog put NAME FILE` "
            "(adapterOf, adapterPath)."
        )
    else:
        emit("LoRA adapters", _COLS, _rows(items))


def _one(item: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(item)
    else:
        emit("LoRA adapter", _COLS, _rows([item]))


@app.command("load")
def adapters_load(
    name: NameArg, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Load an adapter now, as its first request would (its base started if need be)."""
    _one(Api(url, token).call("POST", f"/api/v1/adapters/{name}/load", timeout=300), as_json)


@app.command("unload")
def adapters_unload(
    name: NameArg, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Unload an adapter from every active instance holding it (refused while it serves
    requests)."""
    _one(Api(url, token).call("POST", f"/api/v1/adapters/{name}/unload"), as_json)
