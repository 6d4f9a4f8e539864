"""Ids as people type them: a full id, a unique prefix of one, or a name.

``sardeenz models show 3fa`` or ``sardeenz models wake qwen`` should work
without copying a 12- or 36-character id. A reference that matches nothing is
passed to the server unchanged (its 404 names the problem); one that matches
several is refused here, with the candidates listed, never guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sardeenz.cli.client import EXIT_USAGE, Api, die

__all__ = ["pick", "resolve_instance", "resolve_profile", "resolve_run"]


def pick(
    ref: str,
    items: Sequence[dict[str, Any]],
    names: Callable[[dict[str, Any]], Sequence[str | None]],
    kind: str,
    describe: Callable[[dict[str, Any]], str],
) -> str:
    """The one id ``ref`` designates among ``items`` (exact id, unique prefix, or name)."""
    for item in items:
        if item["id"] == ref:
            return ref
    found = [it for it in items if ref and (it["id"].startswith(ref) or ref in names(it))]
    if len(found) == 1:
        return str(found[0]["id"])
    if not found:
        return ref
    lines = "\n".join(f"  {it['id']}  {describe(it)}" for it in found)
    die(
        f"{ref!r} matches {len(found)} {kind}s; give more of the id:\n{lines}",
        EXIT_USAGE,
    )


def resolve_instance(api: Api, ref: str) -> str:
    items = api.call("GET", "/api/v1/models")
    return pick(
        ref,
        items,
        lambda it: (it["servedModelName"],),
        "instance",
        lambda it: f"{it['servedModelName']} ({it['status']})",
    )


def resolve_run(api: Api, ref: str) -> str:
    runs = api.call("GET", "/api/benchmarks")
    return pick(
        ref,
        runs,
        lambda r: (r.get("name"),),
        "benchmark run",
        lambda r: f"{r.get('name') or '-'} ({r['status']}, {r['createdAt'][:19]})",
    )


def resolve_profile(api: Api, ref: str) -> str:
    items = api.call("GET", "/api/memory/profiles")
    return pick(
        ref,
        items,
        lambda p: (p.get("profileName"),),
        "profile",
        lambda p: f"{p['profileName']} ({p['modelPath']})",
    )
