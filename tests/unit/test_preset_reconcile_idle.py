"""cluster/preset_service.py: an idle leader with no preset applied reads nothing per tick.

The reconcile loop ticks every second on the leader. It used to read the presets
table on every tick to find that none was applied (most clusters), a database
query a second on an idle leader; it now keeps whether one is applied with the
declared names, refreshed after every change to the table, and reads the table
only when a pass is due for an applied preset. Real SQLite; the cluster around
the service is a stand-in (a single pod that leads, no peers).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from sardeenz.cluster.control import ControlState
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.orders import PodOrders
from sardeenz.cluster.preset_plan import Placer
from sardeenz.cluster.preset_service import PresetService
from sardeenz.cluster.scheduler import ClusterSnapshot, Strategy
from sardeenz.cluster.view import ClusterView
from sardeenz.config import Settings
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.store.db import Database
from sardeenz.store.presets import PresetRepository, PresetRow


class CountingRepository(PresetRepository):
    """The real repository; counts the whole-table reads the reconcile tick makes."""

    reads = 0

    async def list_all(self) -> list[PresetRow]:
        self.reads += 1
        return await super().list_all()


class ReadyControl:
    """The control state of a leader that has adopted its term (nothing to replicate)."""

    def subscribe(self, key: str, action: Any) -> None:
        pass

    def seed(self, key: str, action: Any) -> None:
        pass

    def ready(self) -> bool:
        return True


class EmptyPlacer:
    strategy = Strategy.BALANCED

    async def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(())


def applied_row(models: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": "p",
        "models": models,
        "updatedAt": "2026-12-05T08:00:00+00:00",
        "appliedAt": "2026-12-05T08:00:00+00:00",
        "dropped": [],
    }


async def test_the_tick_reads_the_table_only_while_a_preset_is_applied(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'p.db'}")
    await db.migrate()
    try:
        repo = CountingRepository(db)
        membership = SimpleNamespace(
            identity=SimpleNamespace(pod_id="pod-a"), active=False, is_leader=lambda: True
        )
        svc = PresetService(
            cast(Membership, membership),
            cast(ClusterView, SimpleNamespace(instances=list)),
            cast(PodOrders, None),
            cast(Supervisor, None),
            Settings(data_dir=tmp_path),
            repo,
            cast(Placer, EmptyPlacer()),
            cast(ControlState, ReadyControl()),
        )
        await svc.load()
        repo.reads = 0
        for _ in range(3):
            await svc._tick()
        assert repo.reads == 0, "an idle leader with no preset applied read the table"

        await svc._take([applied_row([])])  # the leader's copy: a preset is applied now
        repo.reads = 0
        await svc._tick()
        assert repo.reads == 1, "a due pass over an applied preset must read it"
        assert svc.status()["consecutiveFailures"] == 0
        await svc._tick()  # the pass ran: the next is due in preset_reconcile_seconds
        assert repo.reads == 1

        await svc._take([])  # every preset deleted
        svc.poke()
        repo.reads = 0
        await svc._tick()
        assert repo.reads == 0, "with the applied preset gone the tick still read the table"
    finally:
        await db.engine.dispose()
