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


AdapterState = Literal["active", "sleeping", "unloaded"]


class AdapterPlacement(CamelModel):
    """One instance of the base holding the adapter."""

    pod_id: str | None = Field(description="the pod (null on a single node)")
    instance_id: str
    in_flight: int = Field(description="the adapter's requests running there now")
    sleeping: bool = Field(description="the base instance sleeps (it keeps its adapters)")


class AdapterView(CamelModel):
    """``GET /api/v1/adapters``: a LoRA adapter entry, its state and where it is loaded."""

    name: str
    base: str = Field(description="the base entry (adapterOf)")
    adapter_path: str
    aliases: list[str] = Field(default_factory=list)
    state: AdapterState = Field(
        description="active: an active instance of the base (on any pod) holds it; "
        "sleeping: only sleeping ones keep it; unloaded: none"
    )
    loaded_on: list[AdapterPlacement] = Field(default_factory=list)
