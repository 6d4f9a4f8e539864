"""Catalog writes when the cluster's copy of the catalog arrives while one is awaited.

In a cluster the catalog's store is the replicated control state: the leader's write of
the catalog document comes back to the writing pod through its watch and ``reload``s the
catalog, possibly before the write's own ``await`` returns. The chaos soak's Kubernetes
cluster found ``DELETE /api/v1/catalog/{name}`` answering 500 (a KeyError) then, for a
delete that had been stored.
"""

from __future__ import annotations

from typing import Any

from sardeenz.catalog.registry import Catalog
from sardeenz.domain import EngineKind
from sardeenz.store.records import CatalogEntry

ENTRY = CatalogEntry.model_validate({"modelPath": "m", "engine": "sim"})


class ReloadingStore:
    """An in-memory store whose every write lets the catalog reload in the middle, as
    the cluster's watch does."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}
        self.catalog: Catalog | None = None

    async def list_all(self) -> dict[str, dict[str, Any]]:
        return dict(self.entries)

    async def put(self, name: str, entry: dict[str, Any]) -> None:
        self.entries[name] = entry
        assert self.catalog is not None
        await self.catalog.reload()

    async def delete(self, name: str) -> bool:
        found = self.entries.pop(name, None) is not None
        assert self.catalog is not None
        await self.catalog.reload()
        return found


async def _catalog() -> Catalog:
    store = ReloadingStore()
    catalog = Catalog({}, EngineKind.SIM, store, list)
    store.catalog = catalog
    await catalog.start()
    return catalog


async def test_a_delete_the_cluster_copy_already_shows_answers_the_removed_entry() -> None:
    catalog = await _catalog()
    await catalog.put("m", ENTRY)
    removed = await catalog.delete("m")
    assert removed.name == "m"
    assert catalog.names() == []


async def test_a_put_the_cluster_copy_already_shows_is_listed_once() -> None:
    catalog = await _catalog()
    put = await catalog.put("m", ENTRY)
    assert put.name == "m"
    assert catalog.names() == ["m"]
