"""The catalog: which models this node may start on demand, and how.

Two sources, one view. The YAML file (``catalog:`` of ``--config``) is read at
start-up; API entries (``PUT /api/v1/catalog/{name}``) are stored in SQLite.
On a name clash the API entry wins (an operator fixing a model at run time
should not need a restart) and the YAML entry comes back when the API entry is
deleted; a YAML entry itself cannot be deleted or replaced through DELETE, only
overridden with PUT. Every entry is checked on its own (``validation``): a bad
one is logged and listed with its error, the others serve.

In a cluster the API entries are the cluster's, not the pod's: the store is the
replicated control state (cluster/catalog_sync.py), written by the leader and
held by every pod, while the YAML file stays each pod's own. The merge rule is
the same on every pod: the cluster's entry wins over a file entry of its name.

``resolve`` (name or alias -> entry name) is a dict lookup: the proxy calls it
for every request that misses the routing table.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from sardeenz.catalog.adapterfiles import AdapterProbe, probe_ranks
from sardeenz.catalog.models import CatalogModel, CatalogSource, CatalogState
from sardeenz.catalog.validation import (
    EntryInvalid,
    check_adapter_base,
    check_catalog,
    check_entry,
    check_name,
    is_adapter,
    is_external,
)
from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance
from sardeenz.errors import Conflict, InvalidRequest, NotFound, SardeenzError
from sardeenz.proxy.demand import model_state
from sardeenz.store.records import CatalogEntry

log = logging.getLogger(__name__)


def state_of(statuses: set[InstanceStatus]) -> CatalogState:
    """A model's state from its instances' statuses: the most useful one wins (the
    same rule as ``state`` in ``GET /v1/models``)."""
    return cast(CatalogState, model_state(statuses))


class EntryStore(Protocol):
    """Where the API entries live: this node's table (store/catalog.py) or, in a
    cluster, the replicated control state (cluster/catalog_sync.py)."""

    async def list_all(self) -> dict[str, dict[str, Any]]: ...

    async def put(self, name: str, entry: dict[str, Any]) -> None: ...

    async def delete(self, name: str) -> bool: ...


class ExternalChecks(Protocol):
    """What the catalog needs of its ``engine: external`` servers (catalog/external.py)."""

    def catalog_state(self, name: str) -> tuple[CatalogState, str | None] | None: ...

    async def refusal(self, entry: CatalogEntry) -> str | None: ...


@dataclass(frozen=True, slots=True)
class _Item:
    name: str
    source: CatalogSource
    entry: CatalogEntry | None
    error: str | None
    overrides_config: bool = False


class Catalog:
    """The merged catalog; see the module docstring. All mutation on the event loop."""

    def __init__(
        self,
        config_entries: Mapping[str, Any],
        default_engine: EngineKind,
        repo: EntryStore,
        instances: Callable[[], list[ModelInstance]],
    ) -> None:
        self._config_raw = dict(config_entries)
        self._default_engine = default_engine
        self._repo = repo
        self._instances = instances
        self._api_raw: dict[str, dict[str, Any]] = {}
        self._items: dict[str, _Item] = {}
        self._names: dict[str, str] = {}
        self._adapters_of: dict[str, list[str]] = {}
        self._probes: dict[str, AdapterProbe] = {}
        """Adapter folder -> its rank or why it has none, read when entries are (re)read."""
        self.version = 0
        """Bumped on every change (``GET /v1/models`` caches on it)."""
        self.external_state: Callable[[str], tuple[CatalogState, str | None] | None] | None = None
        """The health of ``engine: external`` entries (catalog/external.py); see
        ``attach_external``."""
        self.external_refusal: Callable[[CatalogEntry], Awaitable[str | None]] | None = None
        """Why an external entry may not be stored (its key source, a url that is this
        server's own; catalog/external.py), checked on ``put``."""

    def attach_external(self, external: ExternalChecks) -> None:
        """Take the health and the refusals of ``engine: external`` entries from ``external``.

        Late by necessity: the external servers (catalog/external.py) read their entries
        from this catalog, so it is built first. app.py calls this once, right after
        building them.
        """
        self.external_state = external.catalog_state
        self.external_refusal = external.refusal

    async def start(self) -> None:
        """Read the stored API entries and build the view; log every bad entry once."""
        self._api_raw = await self._repo.list_all()
        await self._probe_adapters()
        self._rebuild()
        for item in self._items.values():
            if item.error is not None:
                log.error("%s (%s; the other entries serve)", item.error, item.source)
        good = [i.name for i in self._items.values() if i.entry is not None]
        if self._items:
            log.info("catalog: %d model(s) on demand: %s", len(good), ", ".join(good) or "none")

    async def reload(self) -> None:
        """The stored API entries changed elsewhere (the leader wrote the cluster's
        catalog): rebuild the view from them."""
        self._api_raw = await self._repo.list_all()
        await self._probe_adapters()
        self._rebuild()
        log.info("catalog: %d API entr(ies) from the cluster", len(self._api_raw))

    # ------------------------------------------------------------------ reads
    def resolve(self, name: str) -> str | None:
        """The entry a request's ``model`` names (its name or an alias), or None."""
        return self._names.get(name)

    def entry(self, name: str) -> CatalogEntry | None:
        item = self._items.get(name)
        return item.entry if item is not None else None

    def names(self) -> list[str]:
        """Names of the usable entries, sorted."""
        return sorted(n for n, i in self._items.items() if i.entry is not None)

    def adapters_of(self, base: str) -> list[str]:
        """The usable LoRA adapter entries of ``base``, sorted."""
        return self._adapters_of.get(base, [])

    def entries(self) -> dict[str, CatalogEntry]:
        return {n: i.entry for n, i in self._items.items() if i.entry is not None}

    def list_models(self) -> list[CatalogModel]:
        by_name: dict[str, list[ModelInstance]] = {}
        for inst in self._instances():
            by_name.setdefault(inst.served_model_name, []).append(inst)
        return [self._model(i, by_name.get(i.name, [])) for i in self._sorted()]

    def get_model(self, name: str) -> CatalogModel:
        item = self._items.get(name)
        if item is None:
            raise NotFound(f"no catalog entry named {name!r}", code="catalog_entry_not_found")
        insts = [i for i in self._instances() if i.served_model_name == name]
        return self._model(item, insts)

    # ---------------------------------------------------------------- changes
    async def put(
        self,
        name: str,
        entry: CatalogEntry,
        engine_check: Callable[[object], Awaitable[None]] | None = None,
    ) -> CatalogModel:
        """Add or replace the API entry ``name`` (overrides a config entry of that name).

        ``engine_check`` (the node's ``EngineAvailability.require``) runs once the entry is
        otherwise valid: it raises when the entry's engine cannot run on this node.
        """
        try:
            check_name(name)
            checked = check_entry(name, entry, self._default_engine)
        except EntryInvalid as exc:
            raise InvalidRequest(str(exc), code="invalid_catalog_entry") from None
        if is_adapter(checked):
            path = checked.adapter_path or ""
            self._probes.update(await asyncio.to_thread(probe_ranks, [path]))
            probe = self._probes[path]
            try:
                check_adapter_base(name, checked, self.entries(), self._errors(), probe)
            except EntryInvalid as exc:
                raise InvalidRequest(str(exc), code="invalid_catalog_entry") from None
        if is_external(checked) and self.external_refusal is not None:
            why = await self.external_refusal(checked)
            if why is not None:
                raise InvalidRequest(f"catalog entry {name!r}: {why}", code="invalid_catalog_entry")
        for n in (name, *checked.aliases):
            owner = self._names.get(n)
            if owner is not None and owner != name:
                raise Conflict(
                    f"catalog entry {name!r}: {n!r} already names entry {owner!r}",
                    code="catalog_name_taken",
                )
        if engine_check is not None:
            await engine_check(checked.engine)
        data = checked.model_dump(mode="json", exclude_defaults=True)
        try:
            await self._repo.put(name, data)
        except SardeenzError:  # not acknowledged (a cluster without a majority): show the store
            await self.reload()
            raise
        self._api_raw[name] = data
        self._rebuild()
        log.info("catalog: entry %s set through the API", name)
        return self.get_model(name)

    async def delete(self, name: str) -> CatalogModel:
        """Remove the API entry ``name``; a config entry of that name comes back."""
        if name not in self._api_raw:
            if name in self._config_raw:
                raise Conflict(
                    f"catalog entry {name!r} comes from the config file; change it there "
                    "(or override it with PUT)",
                    code="catalog_entry_readonly",
                )
            raise NotFound(f"no catalog entry named {name!r}", code="catalog_entry_not_found")
        removed = self.get_model(name)
        try:
            await self._repo.delete(name)
        except SardeenzError:
            await self.reload()
            raise
        # The cluster's copy may have arrived while the delete was awaited (``reload``
        # from the replicated catalog, already without the entry): gone either way.
        self._api_raw.pop(name, None)
        self._rebuild()
        log.info("catalog: entry %s deleted through the API", name)
        return removed

    # -------------------------------------------------------------- internals
    def _errors(self) -> dict[str, str]:
        return {n: i.error for n, i in self._items.items() if i.error is not None}

    async def _probe_adapters(self) -> None:
        """Read the rank of every adapter folder the entries name (in a thread: file I/O)."""
        paths: set[str] = set()
        for data in (*self._config_raw.values(), *self._api_raw.values()):
            if isinstance(data, Mapping):
                path = data.get("adapterPath", data.get("adapter_path"))
                if isinstance(path, str) and path.strip():
                    paths.add(path)
        self._probes = await asyncio.to_thread(probe_ranks, sorted(paths)) if paths else {}

    def _rebuild(self) -> None:
        merged: dict[str, Any] = {
            n: d for n, d in self._config_raw.items() if str(n) not in self._api_raw
        }
        merged.update(self._api_raw)
        good, bad = check_catalog(merged, self._default_engine, self._probes)
        items: dict[str, _Item] = {}
        for raw_name in merged:
            name = str(raw_name)
            source: CatalogSource = "api" if name in self._api_raw else "config"
            items[name] = _Item(
                name=name,
                source=source,
                entry=good.get(name),
                error=bad.get(name),
                overrides_config=source == "api" and name in self._config_raw,
            )
        names: dict[str, str] = {}
        for name, entry in good.items():
            for n in (name, *entry.aliases):
                names[n] = name
        adapters: dict[str, list[str]] = {}
        for name, entry in sorted(good.items()):
            if entry.adapter_of is not None:
                adapters.setdefault(entry.adapter_of, []).append(name)
        self._items, self._names, self._adapters_of = items, names, adapters
        self.version += 1

    def _sorted(self) -> list[_Item]:
        return [self._items[n] for n in sorted(self._items)]

    def _model(self, item: _Item, insts: list[ModelInstance]) -> CatalogModel:
        state: CatalogState = (
            "invalid" if item.entry is None else state_of({i.status for i in insts})
        )
        error = item.error
        external = self.external_state(item.name) if self.external_state is not None else None
        if item.entry is not None and external is not None:
            state, error = external
        return CatalogModel(
            name=item.name,
            source=item.source,
            state=state,
            error=error,
            overrides_config=item.overrides_config,
            instance_ids=sorted(i.id for i in insts),
            entry=item.entry,
        )
