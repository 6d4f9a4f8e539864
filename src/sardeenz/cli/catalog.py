"""``sardeenz catalog``: the on-demand catalog (in a cluster, the cluster's)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from sardeenz.cli.client import DEFAULT_URL, Api, TokenOpt, UrlOpt
from sardeenz.cli.control_input import read_document
from sardeenz.cli.output import Cell, Col, JsonOpt, emit, emit_json

__all__ = ["app"]

app = typer.Typer(help="The on-demand catalog: list, show, put and delete entries.")

NameArg = Annotated[str, typer.Argument(help="The entry's served model name.", show_default=False)]

_STATE_STYLE = {"active": "green", "starting": "yellow", "sleeping": "blue", "invalid": "red"}


def _rows(items: list[dict[str, Any]]) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for it in items:
        entry = it.get("entry") or {}
        state = it["state"]
        rows.append(
            [
                it["name"],
                it["source"] + (" (overrides config)" if it.get("overridesConfig") else ""),
                (state, _STATE_STYLE.get(state, "white")),
                entry.get("modelPath", "-"),
                str(len(it.get("instanceIds") or [])),
                it.get("error") or "",
            ]
        )
    return rows


_COLS = (
    Col("NAME", is_id=True),
    Col("SOURCE"),
    Col("STATE"),
    Col("MODEL PATH"),
    Col("INSTANCES", right=True),
    Col("ERROR"),
)


@app.command("ls")
def catalog_ls(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List the entries (config file and API; in a cluster, the leader's view)."""
    items = Api(url, token).call("GET", "/api/v1/catalog")
    if as_json:
        emit_json(items)
    elif not items:
        print("No catalog entries. Add one with `sardeenz catalog put NAME FILE`.")
    else:
        emit("Catalog", _COLS, _rows(items))


@app.command("show")
def catalog_show(name: NameArg, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Show one entry in full (JSON)."""
    emit_json(Api(url, token).call("GET", f"/api/v1/catalog/{name}"))


@app.command("put")
def catalog_put(
    name: NameArg,
    source: Annotated[
        str, typer.Argument(help="The entry as JSON or YAML: a file, or - for stdin.")
    ],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add or replace an entry; in a cluster it is answered once a majority stored it."""
    entry = Api(url, token).call("PUT", f"/api/v1/catalog/{name}", json=read_document(source))
    if as_json:
        emit_json(entry)
    else:
        emit("Catalog entry", _COLS, _rows([entry]))


@app.command("rm")
def catalog_rm(name: NameArg, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Delete an API entry (a config-file entry of that name applies again)."""
    Api(url, token).call("DELETE", f"/api/v1/catalog/{name}")
    print(f"deleted catalog entry {name}")
