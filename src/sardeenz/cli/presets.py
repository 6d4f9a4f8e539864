"""``sardeenz presets``: the cluster's declared desired states (docs/cluster.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from sardeenz.cli.client import DEFAULT_URL, Api, TokenOpt, UrlOpt
from sardeenz.cli.control_input import read_document
from sardeenz.cli.output import Cell, Col, JsonOpt, console, emit, emit_json, when

__all__ = ["app"]

app = typer.Typer(help="Presets: list, show, put, delete, plan and apply.")

NameArg = Annotated[str, typer.Argument(help="The preset's name.", show_default=False)]
EXIT_FAILED = 1


def _rows(items: list[dict[str, Any]]) -> list[list[Cell]]:
    return [
        [
            p["name"],
            ("applied", "green") if p.get("applied") else "-",
            ", ".join(f"{m['servedModelName']} x{m.get('replicas', 1)}" for m in p["models"]),
            when(p.get("updatedAt")),
        ]
        for p in items
    ]


_COLS = (Col("NAME", is_id=True), Col("APPLIED"), Col("MODELS"), Col("UPDATED"))


@app.command("ls")
def presets_ls(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List the presets (the applied one marked)."""
    items = Api(url, token).call("GET", "/api/cluster/presets")
    if as_json:
        emit_json(items)
    elif not items:
        print("No presets. Add one with `sardeenz presets put NAME FILE`.")
    else:
        emit("Presets", _COLS, _rows(items))


@app.command("show")
def presets_show(name: NameArg, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Show one preset in full, with its reconcile status when applied (JSON)."""
    emit_json(Api(url, token).call("GET", f"/api/cluster/presets/{name}"))


@app.command("put")
def presets_put(
    name: NameArg,
    source: Annotated[
        str,
        typer.Argument(help='The preset ({"models": [...]}) as JSON or YAML: a file, or -.'),
    ],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create or replace a preset (nothing is loaded until it is applied)."""
    body = read_document(source)
    preset = Api(url, token).call("PUT", f"/api/cluster/presets/{name}", json=body)
    if as_json:
        emit_json(preset)
    else:
        emit("Preset", _COLS, _rows([preset]))


@app.command("rm")
def presets_rm(name: NameArg, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Delete a preset (what runs keeps running)."""
    Api(url, token).call("DELETE", f"/api/cluster/presets/{name}")
    print(f"deleted preset {name}")


@app.command("plan")
def presets_plan(
    name: NameArg, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """What applying the preset would do now (nothing is done)."""
    plan = Api(url, token).call("GET", f"/api/cluster/presets/{name}/plan")
    if as_json:
        emit_json(plan)
        return
    if plan.get("nothingToDo"):
        print(f"preset {name}: nothing to do")
        return
    emit("Plan", _STEP_COLS, [_step_row(s) for s in plan["steps"]])


_STEP_COLS = (Col("ACTION"), Col("MODEL"), Col("POD"), Col("DETAIL"))


def _step_row(step: dict[str, Any]) -> list[Cell]:
    detail = step.get("error") or step.get("reason") or step.get("instanceId") or ""
    state = step.get("state")
    action = step["action"] + (f" ({state})" if state else "")
    return [action, step.get("model") or "", step.get("podId") or "-", str(detail)]


@app.command("apply")
def presets_apply(name: NameArg, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Apply the preset and follow its steps; exit 1 if a step failed."""
    done: dict[str, Any] = {}
    for event, data in Api(url, token).sse(f"/api/cluster/presets/{name}/apply", method="POST"):
        if event == "step":
            console.print("  ".join(str(c) for c in _step_row(data)), markup=False)
        elif event == "done":
            done = data
    print(f"preset {name}: {done.get('state', 'unknown')} ({done.get('failed', 0)} failed)")
    if done.get("state") != "done":
        raise typer.Exit(EXIT_FAILED)
