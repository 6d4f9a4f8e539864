"""Sardeenz: many LLM engines on shared GPUs behind one OpenAI-compatible endpoint."""

from __future__ import annotations

__all__ = ["__version__"]


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
