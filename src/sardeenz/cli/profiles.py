"""``sardeenz profiles``: memory profiles and "will it fit" checks."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from sardeenz.cli.bench import num
from sardeenz.cli.client import DEFAULT_URL, Api, TokenOpt, UrlOpt
from sardeenz.cli.models import InstanceArg
from sardeenz.cli.output import Cell, Col, JsonOpt, emit, emit_json
from sardeenz.cli.resolve import resolve_instance, resolve_profile
from sardeenz.units import gib

__all__ = ["app"]

app = typer.Typer(help="Memory profiles and 'will it fit' checks on a running server.")


@app.command("ls")
def profiles_ls(
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    model: Annotated[str | None, typer.Option("--model", help="Only this model path.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List memory profiles, newest first (full ids)."""
    params = {"model_path": model} if model else None
    items = Api(url, token).call("GET", "/api/memory/profiles", params=params)
    if as_json:
        emit_json(items)
        return
    if not items:
        print("No memory profiles. Save one from a running instance with `sardeenz profiles save`.")
        return
    cols = (
        Col("ID", is_id=True),
        Col("NAME"),
        Col("MODEL"),
        Col("MAX TOKENS", right=True),
        Col("GPU"),
        Col("TOTAL", right=True),
        Col("WEIGHTS", right=True),
        Col("GRAPHS", right=True),
        Col("KV", right=True),
    )
    rows: list[list[Cell]] = [
        [
            p["id"],
            p["profileName"],
            p["modelPath"],
            str(p["maxTokens"]),
            p.get("gpuName") or "-",
            num(p["totalGpuMemoryGib"], 1),
            num(p["weightsMemoryGib"], 1),
            num(p["cudaGraphsGib"], 1),
            num(p["kvCacheAvailableGib"], 1),
        ]
        for p in items
    ]
    emit("Memory profiles (GiB)", cols, rows)


@app.command("save")
def profiles_save(
    instance: InstanceArg,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    name: Annotated[str | None, typer.Option("--name", help="Name of the profile.")] = None,
    comments: Annotated[str | None, typer.Option("--comments", help="Free-form notes.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Save a profile from a running instance's measured memory."""
    api = Api(url, token)
    body = {
        "instanceId": resolve_instance(api, instance),
        "profileName": name,
        "comments": comments,
    }
    p = api.call("POST", "/api/memory/profiles", json=body)
    if as_json:
        emit_json(p)
    else:
        print(f"saved profile {p['id']}: {p['profileName']}")


@app.command("check")
def profiles_check(
    model_path: Annotated[
        str, typer.Argument(help="Model path or Hugging Face id.", show_default=False)
    ],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    max_tokens: Annotated[int | None, typer.Option(help="Context length.")] = None,
    gpu: Annotated[list[int] | None, typer.Option("--gpu", help="GPU index (repeat).")] = None,
    tensor_parallel_size: Annotated[
        int, typer.Option("--tp", help="Tensor-parallel size (number of GPUs).")
    ] = 1,
    gpu_memory_limit: Annotated[
        float | None, typer.Option(help="Memory to reserve per GPU, in GB.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Will MODEL_PATH fit on the server's GPUs now? Exit 1 when it will not."""
    body: dict[str, Any] = {"modelPath": model_path, "tensorParallelSize": tensor_parallel_size}
    if max_tokens is not None:
        body["maxTokens"] = max_tokens
    if gpu:
        body["gpuIds"] = gpu
    if gpu_memory_limit is not None:
        body["gpuMemoryLimit"] = gpu_memory_limit
    flags = {
        "modelPath": "MODEL_PATH",
        "maxTokens": "--max-tokens",
        "gpuIds": "--gpu",
        "tensorParallelSize": "--tp",
        "gpuMemoryLimit": "--gpu-memory-limit",
    }
    verdict = Api(url, token, flags).call("POST", "/api/memory/profiles/check", json=body)
    if as_json:
        emit_json(verdict)
    else:
        colour = {True: "green", False: "red", None: "yellow"}[verdict["fits"]]
        from sardeenz.cli.output import console

        console.print(f"{verdict['reason']} (source: {verdict['source']})", style=colour)
        if verdict["gpus"]:
            cols = (
                Col("GPU", right=True),
                Col("NAME"),
                Col("FREE AFTER RESERVE", right=True),
                Col("NEEDED", right=True),
                Col("FITS"),
            )
            rows: list[list[Cell]] = [
                [
                    str(g["index"]),
                    g["name"],
                    gib(g["availableBytes"]),
                    gib(g["neededBytes"]),
                    {True: "yes", False: "no", None: "?"}[g["fits"]],
                ]
                for g in verdict["gpus"]
            ]
            emit(None, cols, rows)
        for note in verdict.get("notes", []):
            console.print(f"  note: {note}", markup=False)
    if verdict["fits"] is False:
        raise typer.Exit(1)


@app.command("rm")
def profiles_rm(
    profile: Annotated[
        str,
        typer.Argument(help="Profile id, a unique prefix of one, or its name.", show_default=False),
    ],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete a profile."""
    api = Api(url, token)
    profile_id = resolve_profile(api, profile)
    api.call("DELETE", f"/api/memory/profiles/{profile_id}")
    if as_json:
        emit_json({"id": profile_id, "deleted": True})
    else:
        print(f"deleted profile {profile_id}")
