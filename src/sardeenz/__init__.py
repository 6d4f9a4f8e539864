"""Sardeenz: many LLM engines on shared GPUs behind one OpenAI-compatible endpoint."""

from __future__ import annotations

import sys

__all__ = ["__version__"]

# httpx's ``__init__`` imports its own command-line client (``httpx._main``) whenever
# click, rich and pygments are installed, as they are here (typer's): about 0.05 s of
# CPU at every start of a server or a sim engine, for a command no Sardeenz process
# runs. A None in ``sys.modules`` makes that one import fail, which httpx expects (its
# ``httpx.main`` then says the CLI's dependencies are missing); the ``httpx`` command,
# a process of its own, is untouched. Set before any of our modules imports httpx.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

# The same for uvicorn's file-watching reloader: ``import uvicorn`` imports
# ``uvicorn.main``, whose supervisors load watchfiles (a Rust extension) and anyio for
# ``--reload``, which no Sardeenz process uses; 5-12 ms of CPU at every sim engine
# start (benchmarks/serve_startup.py). uvicorn expects the import to fail (watchfiles
# is optional) and falls back to its stat-polling reloader.
sys.modules.setdefault("uvicorn.supervisors.watchfilesreload", None)  # type: ignore[arg-type]


def __getattr__(name: str) -> str:
    """``__version__``, read from the installed package when first asked for.

    ``importlib.metadata`` costs more to import than a CLI command's whole run, and
    every ``sardeenz.*`` import passes through this module: only the few callers
    that print the version pay for it.
    """
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("sardeenz")
    except PackageNotFoundError:  # running from a source tree without an install
        found = "0.0.0+local"
    globals()["__version__"] = found
    return found
