"""Checking a catalog entry: the same rules as a load request, nothing of its own.

An entry is accepted exactly when the load it stands for would be: its load fields
are checked by building that ``LoadRequest`` (field limits) and by the engine
adapter's argument check (``extraArgs`` tokens). What is only the catalog's
(aliases, sleep level, TTLs) is checked by ``CatalogEntry`` and here. Pure
functions: no I/O, no service state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from sardeenz.domain import EngineKind, LoadRequest
from sardeenz.engines import get_adapter
from sardeenz.store.records import CatalogEntry

MAX_NAME = 512


class EntryInvalid(ValueError):
    """A catalog entry that cannot be used; the message names the entry and the field."""


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(entry)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def check_name(name: object) -> str:
    """A served model name usable as a catalog key (or an alias)."""
    if not isinstance(name, str) or not name.strip():
        raise EntryInvalid(f"catalog entry {name!r}: the name must be a non-empty string")
    if name != name.strip() or len(name) > MAX_NAME:
        raise EntryInvalid(
            f"catalog entry {name[:80]!r}: the name must have no surrounding spaces and "
            f"at most {MAX_NAME} characters"
        )
    return name


def load_request(name: str, entry: CatalogEntry) -> LoadRequest:
    """The load request an on-demand start of ``entry`` sends to the supervisor."""
    return LoadRequest(
        model_path=entry.model_path,
        engine=entry.engine,
        served_model_name=name,
        gpu_ids=entry.gpu_ids,
        gpu_memory_limit=entry.gpu_memory_limit,
        tensor_parallel_size=entry.tensor_parallel_size,
        enable_sleep_mode=entry.sleep_level > 0,
        extra_args=list(entry.extra_args),
    )


def check_entry(name: object, data: object, default_engine: EngineKind) -> CatalogEntry:
    """``data`` (YAML mapping or API JSON) as a checked entry, or ``EntryInvalid``."""
    checked_name = check_name(name)
    where = f"catalog entry {checked_name!r}"
    if isinstance(data, CatalogEntry):
        entry = data
    elif not isinstance(data, Mapping):
        raise EntryInvalid(f"{where}: must be a mapping of fields (modelPath, engine, ...)")
    else:
        try:
            entry = CatalogEntry.model_validate(dict(data))
        except ValidationError as exc:
            raise EntryInvalid(f"{where}: {_describe(exc)}") from None
    try:
        req = load_request(checked_name, entry)
    except ValidationError as exc:
        raise EntryInvalid(f"{where}: {_describe(exc)}") from None
    try:
        get_adapter(req.engine or default_engine).validate_args(list(req.extra_args))
    except ValueError as exc:
        raise EntryInvalid(f"{where}: extraArgs: {exc}") from None
    if entry.idle_sleep_seconds is not None and entry.sleep_level == 0:
        raise EntryInvalid(f"{where}: idleSleepSeconds: needs sleepLevel 1 or 2 (0 never sleeps)")
    for alias in entry.aliases:
        try:
            check_name(alias)
        except EntryInvalid:
            raise EntryInvalid(f"{where}: aliases: {alias!r} is not a usable name") from None
        if alias == checked_name:
            raise EntryInvalid(f"{where}: aliases: {alias!r} is the entry's own name")
    return entry


def check_catalog(
    raw: Mapping[str, Any], default_engine: EngineKind
) -> tuple[dict[str, CatalogEntry], dict[str, str]]:
    """Check every entry on its own: (good entries, name -> error) in input order.

    A name (or alias) already used by an earlier good entry makes the later
    entry bad: a request must resolve to one model.
    """
    good: dict[str, CatalogEntry] = {}
    bad: dict[str, str] = {}
    taken: dict[str, str] = {}
    for name, data in raw.items():
        try:
            entry = check_entry(name, data, default_engine)
        except EntryInvalid as exc:
            bad[str(name)] = str(exc)
            continue
        clash = next((n for n in (name, *entry.aliases) if n in taken), None)
        if clash is not None:
            bad[name] = (
                f"catalog entry {name!r}: aliases: {clash!r} already names entry {taken[clash]!r}"
            )
            continue
        good[name] = entry
        for n in (name, *entry.aliases):
            taken[n] = name
    return good, bad
