"""The ``sardeenz`` command: serve, sim-engine, and operator commands against a server.

One module per command group: ``server`` (serve, sim-engine, version), ``models``,
``bench``, ``profiles``, ``cluster``, ``catalog``, ``adapters``, ``presets``, ``moves``,
``tenants`` (and ``usage``); ``client``
(URL, calls, errors), ``output`` (table, plain, JSON), ``resolve`` (ids by prefix or
name) and ``control_input`` (a JSON or YAML document) are shared by the operator groups.
Entry points: ``sardeenz.cli:main`` (the ``sardeenz`` script) and ``python -m
sardeenz.cli``.
"""

from __future__ import annotations

import os
from typing import Any

import typer
import typer.core

from sardeenz.cli import (
    adapters,
    bench,
    catalog,
    cluster,
    models,
    moves,
    presets,
    profiles,
    quickparams,
    server,
    tenants,
)
from sardeenz.cli.bench import results_table as _results_table
from sardeenz.cli.server import _configure_logging, config_error_line, demo_settings

__all__ = [
    "_configure_logging",
    "_results_table",
    "app",
    "config_error_line",
    "demo_settings",
    "main",
]

app = typer.Typer(
    help="Sardeenz: many LLM engines on shared GPUs behind one OpenAI-compatible endpoint.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command()(server.serve)
app.command(
    "sim-engine",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)(server.sim_engine)
app.command()(server.version)
app.add_typer(models.app, name="models")
app.add_typer(bench.app, name="bench")
app.add_typer(profiles.app, name="profiles")
app.add_typer(cluster.app, name="cluster")
app.add_typer(catalog.app, name="catalog")
app.add_typer(adapters.app, name="adapters")
app.add_typer(presets.app, name="presets")
app.add_typer(moves.app, name="moves")
app.add_typer(tenants.app, name="tenants")
app.command("usage")(tenants.usage)


def _flag_type(self: typer.core.TyperOption, ctx: Any) -> str | None:
    """No type column for on/off flags: ``--json <bool>`` reads as if it took a value.

    Typer has no setting for it (``metavar`` cannot reach the built-in ``--help``), so
    its one hook, the rich help's type display, is replaced for flags at import.
    """
    if self.is_flag:
        return None
    shown: str | None = _plain_type(self, ctx)
    return shown


_plain_type: Any = getattr(typer.core.TyperOption, "display_type_rich", None)
if hasattr(typer.core.TyperOption, "display_type_rich"):  # typer's rich help (0.2x)
    typer.core.TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


quickparams.install()


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()
