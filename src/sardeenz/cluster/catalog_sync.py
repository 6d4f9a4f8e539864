"""The catalog's API entries as the cluster's: one copy, written by the leader.

In a cluster, ``PUT``/``DELETE /api/v1/catalog/{name}`` reach the leader (the
followers' 307), which writes the whole set of API entries as the ``catalog``
document of the replicated control state (cluster/control_state.py): the
write is acknowledged once a majority of the pods stored it, and every pod's
catalog reloads when its copy arrives, so an entry put through any pod is
resolved, listed and started on demand by every pod.

Each pod's config-file entries (``SARDEENZ_CATALOG`` / the YAML ``catalog:``)
stay its own and are not replicated; the cluster's entries are merged over
them on every pod by catalog/registry.py's rule (an API entry wins over a file
entry of the same name, and the file entry comes back when it is deleted).
"""

from __future__ import annotations

from typing import Any

from sardeenz.catalog.registry import Catalog
from sardeenz.cluster.control import ControlState
from sardeenz.store.catalog import CatalogRepository

KEY = "catalog"


class ReplicatedEntries:
    """catalog/registry.py's ``EntryStore`` over the ``catalog`` document."""

    def __init__(self, control: ControlState) -> None:
        self._control = control

    async def list_all(self) -> dict[str, dict[str, Any]]:
        body = self._control.body(KEY, {})
        return {str(k): dict(v) for k, v in sorted(body.items())} if isinstance(body, dict) else {}

    async def put(self, name: str, entry: dict[str, Any]) -> None:
        async def change(body: Any) -> dict[str, Any]:
            return {**(body if isinstance(body, dict) else {}), name: entry}

        await self._control.update(KEY, change)

    async def delete(self, name: str) -> bool:
        found = False

        async def change(body: Any) -> dict[str, Any]:
            nonlocal found
            current = dict(body) if isinstance(body, dict) else {}
            found = current.pop(name, None) is not None
            return current

        await self._control.update(KEY, change)
        return found


def bind_catalog(control: ControlState, catalog: Catalog, local: CatalogRepository) -> None:
    """Every pod's catalog follows the cluster's copy; a first leader seeds the
    cluster's catalog from the API entries it kept on its own before (an older
    version kept them per pod)."""

    async def reload(_: Any) -> None:
        await catalog.reload()

    async def seed() -> Any:
        return await local.list_all() or None

    control.subscribe(KEY, reload)
    control.seed(KEY, seed)
