"""Who manages an instance: the applied preset, the catalog, or nobody.

An instance a steward manages comes back when an operator unloads it: the leader
reconciles the applied preset and loads a replica of a name it declares again; the
catalog starts its entry on the next request. The admin API and the dashboard say
so (``managedBy`` on each instance) so an unload does not surprise anyone.

Computed when instances are listed for the admin API (one read of the presets
table per listing), never on the ``/v1`` path.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from sardeenz.catalog.registry import Catalog
from sardeenz.cluster.preset_service import PresetService
from sardeenz.domain import ManagedBy, ModelInstance


def steward_of(
    served_model_name: str,
    applied_preset: str | None,
    preset_names: Collection[str],
    catalog_names: Collection[str],
) -> ManagedBy | None:
    """The steward of an instance serving ``served_model_name``.

    The applied preset wins over the catalog: its reconcile loop restores the
    instance at once, while the catalog waits for a request.
    """
    if applied_preset is not None and served_model_name in preset_names:
        return ManagedBy(kind="preset", name=applied_preset)
    if served_model_name in catalog_names:
        return ManagedBy(kind="catalog", name=served_model_name)
    return None


class Stewards:
    """Marks instances with ``managedBy`` from the applied preset and the catalog."""

    def __init__(self, presets: PresetService, catalog: Catalog) -> None:
        self._presets = presets
        self._catalog = catalog

    async def mark(self, instances: Iterable[ModelInstance]) -> list[ModelInstance]:
        applied = await self._presets.applied_names()
        preset, names = applied if applied is not None else (None, frozenset[str]())
        catalog = frozenset(self._catalog.names())
        return [
            i.model_copy(
                update={"managed_by": steward_of(i.served_model_name, preset, names, catalog)}
            )
            for i in instances
        ]

    async def mark_one(self, instance: ModelInstance) -> ModelInstance:
        return (await self.mark([instance]))[0]
