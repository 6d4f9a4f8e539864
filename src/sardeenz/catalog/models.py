"""What the catalog API answers: an entry with where it came from and its state now."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sardeenz.domain import CamelModel
from sardeenz.store.records import CatalogEntry

CatalogSource = Literal["config", "api"]
CatalogState = Literal[
    "unloaded", "starting", "active", "sleeping", "stopping", "failed", "invalid", "unreachable"
]


class CatalogModel(CamelModel):
    """``GET /api/v1/catalog/{name}``: the entry (None when invalid) and its instances."""

    name: str = Field(description="the served model name requests use")
    source: CatalogSource = Field(
        description="config: the YAML file (read-only here); api: added with PUT"
    )
    state: CatalogState = Field(
        description="of its instances: active > starting > sleeping > stopping > failed; "
        "unloaded when none; invalid when the entry does not validate. An external "
        "server: starting (not checked yet), active, unreachable, or failed (no usable key)"
    )
    error: str | None = Field(
        None,
        description="why the entry is invalid (names the field), or why its external "
        "server is unreachable or failed",
    )
    overrides_config: bool = Field(
        False, description="an API entry that replaces the config file's entry of this name"
    )
    instance_ids: list[str] = Field(default_factory=list)
    entry: CatalogEntry | None = None


class CatalogView(CatalogModel):
    """A catalog model as the API lists it: the entry, its state and its idle clock."""

    idle_seconds: float | None = Field(
        None,
        description="seconds since its instances last had a request (the clock idleSleepSeconds "
        "and idleUnloadSeconds count, sampled every ondemand tick); null with no instance",
    )
