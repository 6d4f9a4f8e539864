"""Presets: the schema, the diff against what runs, and the plan the scheduler makes of it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from sardeenz.cluster.preset_plan import make_plan
from sardeenz.cluster.presets import Observed, PresetBody, PresetModel, diff
from sardeenz.cluster.scheduler import (
    GIB,
    ClusterSnapshot,
    GpuState,
    PlacementRequest,
    PodState,
    Strategy,
)
from sardeenz.domain import InstanceStatus, LoadRequest
from sardeenz.gpu.selection import RESERVED_BYTES

T0 = datetime(2026, 12, 3, tzinfo=UTC)


def model(name: str, replicas: int = 1, **kw: object) -> PresetModel:
    return PresetModel.model_validate(
        {"modelPath": f"/m/{name}", "servedModelName": name, "replicas": replicas, **kw}
    )


def seen(pod: str, iid: str, name: str, status: str = "active", age_s: int = 0) -> Observed:
    return Observed(pod, iid, name, InstanceStatus(status), T0 - timedelta(seconds=age_s))


# --- schema ---------------------------------------------------------------------------


def test_body_is_camel_case_and_checked_like_a_load() -> None:
    body = PresetBody.model_validate(
        {
            "models": [
                {
                    "modelPath": "/m/a",
                    "servedModelName": "a",
                    "replicas": 2,
                    "gpuType": "L4",
                    "minVramGiB": 20,
                    "tensorParallelSize": 1,
                    "sleepLevel": 1,
                    "pinned": True,
                    "extraArgs": ["--max-model-len", "512"],
                }
            ]
        }
    )
    load = body.models[0].load_request()
    assert load.enable_sleep_mode is True
    assert load.gpu_type == "L4"
    assert load.min_vram_gib == 20
    assert body.models[0].model_dump(by_alias=True)["minVramGiB"] == 20
    with pytest.raises(ValidationError, match="appears twice"):
        PresetBody.model_validate({"models": [model("a").model_dump(), model("a").model_dump()]})
    with pytest.raises(ValidationError):
        PresetBody.model_validate({"models": [{"modelPath": "/m/a", "servedModelName": "a",
                                               "replicas": -1}]})  # fmt: skip
    with pytest.raises(ValidationError):
        PresetBody.model_validate({"models": [{"modelPath": "/m", "servedModelName": "a",
                                               "typo": 1}]})  # fmt: skip


# --- diff -------------------------------------------------------------------------------


def test_diff_counts_serving_replicas_only() -> None:
    d = diff(
        [model("a", 2), model("b", 1), model("c", 1)],
        [
            seen("p1", "i1", "a"),
            seen("p2", "i2", "a", "failed"),  # does not serve: a replacement is due
            seen("p1", "i3", "b", "sleeping"),
            seen("p3", "i4", "zzz"),  # not the preset's: never touched
        ],
    )
    assert [(m.model.served_model_name, m.count, m.pods_with_replica) for m in d.missing] == [
        ("a", 1, frozenset({"p1"})),
        ("c", 1, frozenset()),
    ]
    assert d.surplus == ()
    assert d.satisfied == ("b",)
    assert not d.converged


def test_surplus_keeps_the_longest_running_replicas() -> None:
    """A pod that comes back with its re-adopted engines keeps them; the replicas placed
    meanwhile on the survivors (newer) are the surplus."""
    d = diff(
        [model("a", 2)],
        [
            seen("p1", "old1", "a", age_s=600),
            seen("p2", "new", "a", age_s=30),
            seen("p3", "old2", "a", age_s=500),
        ],
    )
    assert [o.instance_id for o in d.surplus] == ["new"]
    # A replica still starting goes before those that serve, whatever its age.
    d = diff(
        [model("a", 1)],
        [seen("p1", "starting", "a", "starting", age_s=900), seen("p2", "serving", "a")],
    )
    assert [o.instance_id for o in d.surplus] == ["starting"]


def test_dropped_names_are_surplus_and_others_are_not() -> None:
    d = diff([model("a")], [seen("p1", "i1", "a"), seen("p1", "i2", "gone"),
                            seen("p2", "i3", "manual")], dropped=["gone"])  # fmt: skip
    assert [o.instance_id for o in d.surplus] == ["i2"]
    assert d.converged is False
    assert diff([model("a")], [seen("p1", "i1", "a")]).converged


# --- plan -------------------------------------------------------------------------------


@dataclass
class FixedPlacer:
    """The leader's placement over a fixed snapshot: each model needs ``need`` GiB."""

    snap: ClusterSnapshot
    need_gib: float
    strategy: Strategy = Strategy.BALANCED

    async def snapshot(self) -> ClusterSnapshot:
        return self.snap

    async def request_for(
        self, req: LoadRequest, snapshot: ClusterSnapshot
    ) -> tuple[PlacementRequest, dict[str, str]]:
        return (
            PlacementRequest(
                need_bytes_per_gpu=round(self.need_gib * GIB),
                tensor_parallel_size=req.tensor_parallel_size,
                gpu_type=req.gpu_type,
            ),
            {},
        )


def gpu(index: int, free_gib: float, name: str = "NVIDIA L4") -> GpuState:
    free = round(free_gib * GIB) + RESERVED_BYTES
    return GpuState(index, name, round(24 * GIB), free)


def cluster(*free: float) -> ClusterSnapshot:
    return ClusterSnapshot(tuple(PodState(f"p{i + 1}", (gpu(0, f),)) for i, f in enumerate(free)))


def plan_of(
    models: list[PresetModel], observed: list[Observed], placer: FixedPlacer
) -> list[tuple[str, str, str | None]]:
    plan = asyncio.run(make_plan(models, observed, placer))
    return [(s.action, s.model, s.pod_id) for s in plan.steps]


def test_plan_spreads_replicas_and_books_each_placement() -> None:
    placer = FixedPlacer(cluster(20, 20, 20), need_gib=8)
    steps = plan_of([model("a", 3), model("b", 1)], [], placer)
    # Three replicas of a: one per pod. Then b goes where the most stays free: every pod has
    # 12 GiB left, so the lowest pod id wins the tie.
    assert steps == [("load", "a", "p1"), ("load", "a", "p2"), ("load", "a", "p3"),
                     ("load", "b", "p1")]  # fmt: skip


def test_plan_packs_with_maximize_models() -> None:
    placer = FixedPlacer(cluster(20, 10, 20), need_gib=8, strategy=Strategy.MAXIMIZE_MODELS)
    # Pack: the pod that keeps the least free after the load (p2: 2 GiB left).
    assert plan_of([model("a", 1)], [], placer) == [("load", "a", "p2")]


def test_replicas_share_a_pod_only_when_no_other_fits() -> None:
    placer = FixedPlacer(cluster(20, 4), need_gib=8)
    assert plan_of([model("a", 2)], [], placer) == [("load", "a", "p1"), ("load", "a", "p1")]


def test_what_fits_nowhere_is_unschedulable_with_reasons_per_pod() -> None:
    placer = FixedPlacer(cluster(10, 10), need_gib=8)
    plan = asyncio.run(make_plan([model("a", 3)], [], placer))
    actions = [s.action for s in plan.steps]
    assert actions == ["load", "load", "unschedulable"]
    stuck = plan.unschedulable[0]
    assert set(stuck.reasons) == {"p1", "p2"}
    # Each pod has 2 GiB left after the first two replicas: the scheduler says so.
    assert "per GPU" in stuck.reasons["p1"]
    assert "per GPU" in stuck.reasons["p2"]
    assert stuck.as_json()["reasons"] == stuck.reasons


def test_plan_of_a_converged_cluster_is_nothing_to_do() -> None:
    placer = FixedPlacer(cluster(20, 20), need_gib=8)
    plan = asyncio.run(
        make_plan([model("a", 2)], [seen("p1", "i1", "a"), seen("p2", "i2", "a")], placer)
    )
    assert plan.nothing_to_do
    assert plan.as_json()["nothingToDo"] is True
    assert plan.counts == {"a": 2}


def test_surplus_unloads_come_first() -> None:
    placer = FixedPlacer(cluster(20, 20), need_gib=8)
    plan = asyncio.run(
        make_plan(
            [model("a", 1), model("b", 1)],
            [seen("p1", "i1", "a", age_s=9), seen("p2", "i2", "a", age_s=1)],
            placer,
        )
    )
    assert [(s.action, s.model, s.instance_id) for s in plan.steps] == [
        ("unload", "a", "i2"),
        ("load", "b", None),
    ]


def test_a_model_being_moved_gets_no_step_until_the_move_ends() -> None:
    """A move runs its target next to the source: one replica more, the target the newest.
    Reconcile must not unload it (nor add one while a replica is missing mid-move)."""
    during = [seen("p1", "source", "a", age_s=600), seen("p2", "target", "a", "starting")]
    assert [o.instance_id for o in diff([model("a")], during).surplus] == ["target"]
    held = diff([model("a"), model("b")], during, moving=frozenset({"a"}))
    assert held.surplus == ()
    assert held.moving == ("a",)
    assert [m.model.served_model_name for m in held.missing] == ["b"]
    # Nothing else held: a model with no difference is not listed as moving.
    assert diff([model("a", 2)], during, moving=frozenset({"a"})).moving == ()
