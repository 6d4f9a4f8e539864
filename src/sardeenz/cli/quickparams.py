"""Typer without pydantic for the values that need no conversion.

Typer (0.2x) converts every command-line value through a pydantic ``TypeAdapter``,
built the first time a parameter is processed, even for an option that was not
given (``None``) or a string bound for a ``str`` parameter. Building the first one
imports pydantic and costs ~0.1 s of CPU: a third of a ``sardeenz version`` or
``sardeenz models ls`` run (issue 25; benchmarks/cli_startup.py).

``install()`` lets such values through as they are, with typer's own checks after
conversion (a missing required value, the parameter's callback). Anything that
does need converting (``-n 10`` into an int, a choice, a path) still goes through
typer's pydantic path, unchanged. On a typer without that path, nothing is patched.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer.core

__all__ = ["install"]


def _needs_no_conversion(param: Any, value: Any) -> bool:
    if param.multiple or param.nargs == -1:
        return False
    if value is None:
        return True  # typer's own coercion returns None for it, after building an adapter
    descriptor = param.type_descriptor
    return type(value) is str and descriptor.annotation is str and not descriptor.is_path


def install() -> None:
    parameter: Any = getattr(typer.core, "_TyperParameter", None)
    if parameter is None or not hasattr(parameter, "get_runtime_param"):
        return
    if getattr(parameter.process_value, "_sardeenz_quick", False):
        return
    convert = parameter.process_value
    click_exceptions: Any = importlib.import_module("typer._click.exceptions")

    def process_value(self: Any, ctx: Any, value: Any) -> Any:
        if not _needs_no_conversion(self, value):
            return convert(self, ctx, value)
        if self.required and self.value_is_missing(value):
            raise click_exceptions.MissingParameter(ctx=ctx, param=self)
        if self.callback is not None:
            value = self.callback(ctx, self, value)
        return value

    process_value._sardeenz_quick = True  # type: ignore[attr-defined]
    parameter.process_value = process_value
