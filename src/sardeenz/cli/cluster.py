"""``sardeenz cluster``: the cluster as a running server sees it."""

from __future__ import annotations

from typing import Any

import typer

from sardeenz.cli.client import DEFAULT_URL, Api, TokenOpt, UrlOpt
from sardeenz.cli.output import Cell, Col, JsonOpt, console, emit, emit_json
from sardeenz.units import GIB

__all__ = ["app"]

app = typer.Typer(help="The cluster as a running server sees it.")

_POD_STYLE = {"healthy": "green", "suspect": "yellow", "unavailable": "red"}


@app.command("status")
def cluster_status(
    url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Mode, leader, term and every pod (state, GPU memory, instances) as this server sees them."""
    status: dict[str, Any] = Api(url, token).call("GET", "/api/cluster/status")
    if as_json:
        emit_json(status)
        return
    console.print(
        f"mode {status['mode']}, leader {status['leader'] or '(none)'}, term {status['term']}",
        markup=False,
        soft_wrap=True,
    )
    cols = (
        Col("POD", is_id=True),
        Col("ADDRESS"),
        Col("STATE"),
        Col("LEADER"),
        Col("GPU MEMORY USED"),
        Col("INSTANCES"),
    )
    rows: list[list[Cell]] = []
    for pod in status["pods"]:
        state = pod["state"]
        names = sorted({i["servedModelName"] for i in pod["instances"]})
        rows.append(
            [
                pod["id"] + (" (this)" if pod.get("self") else ""),
                pod["address"],
                (state, _POD_STYLE.get(state, "white")),
                "yes" if pod["isLeader"] else "-",
                _gpu_memory(pod["gpus"]),
                ", ".join(names) or "-",
            ]
        )
    emit("Pods", cols, rows)
    for warning in status.get("warnings") or []:
        console.print(f"warning: {warning}", markup=False, soft_wrap=True, style="yellow")


def _gpu_memory(gpus: list[dict[str, Any]]) -> str:
    """``GPU0 9.5 of 24.0 GiB, GPU1 ...``: used of total, per GPU, as the pod reports it."""
    if not gpus:
        return "no GPU"
    return ", ".join(
        f"GPU{g['index']} {g['usedBytes'] / GIB:.1f} of {g['totalBytes'] / GIB:.1f} GiB"
        + (" (sim)" if g.get("simulated") else "")
        for g in gpus
    )
