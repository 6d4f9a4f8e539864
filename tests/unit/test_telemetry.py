"""Pure parts of the telemetry: histogram quantiles, held memory, metric families, routes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance, utcnow
from sardeenz.gpu.budget import held_by_instance
from sardeenz.gpu.inventory import GpuInfo, GpuProcess
from sardeenz.proxy.metrics import Histogram, ModelMetrics
from sardeenz.telemetry.admin import UNMATCHED, AdminApiStats, route_template
from sardeenz.telemetry.node import NodeSample, families
from sardeenz.telemetry.resources import quantile, resource_metrics

GIB = 2**30


def _gpu(index: int, used: int, procs: list[GpuProcess]) -> GpuInfo:
    return GpuInfo(
        index=index,
        name="NVIDIA L4",
        uuid=f"GPU-{index}",
        total_bytes=24 * GIB,
        used_bytes=used,
        free_bytes=24 * GIB - used,
        processes=procs,
    )


def _inst(iid: str, name: str) -> ModelInstance:
    return ModelInstance(
        id=iid,
        model_path=name,
        served_model_name=name,
        display_name=name,
        engine=EngineKind.SIM,
        status=InstanceStatus.ACTIVE,
        port=1,
    )


def test_quantile_interpolates_inside_the_bucket_like_prometheus() -> None:
    h = Histogram((0.1, 0.2, 0.4))
    assert quantile(h, 0.5) is None
    for v in (0.05, 0.15, 0.15, 0.3):
        h.observe(v)
    # ranks: 0.5*4 = 2 -> second bucket (0.1, 0.2], holding ranks 1..3: 0.1 + 0.1 * 1/2
    assert quantile(h, 0.5) == pytest.approx(0.15)
    assert quantile(h, 1.0) == pytest.approx(0.4)
    h.observe(99.0)  # beyond the last bound: the highest finite bound answers
    assert quantile(h, 1.0) == pytest.approx(0.4)


def test_held_memory_is_matched_by_pid_or_instance_else_the_baseline() -> None:
    gpus = [
        _gpu(
            0,
            10 * GIB,
            [GpuProcess(pid=11, used_bytes=3 * GIB), GpuProcess(pid=99, used_bytes=GIB)],
        ),
        _gpu(1, 2 * GIB, [GpuProcess(pid=None, used_bytes=2 * GIB, instance_id="b")]),
    ]
    held = held_by_instance(
        gpus,
        {"a": {0: 4 * GIB}, "c": {1: 5 * GIB}},
        instance_pids={"a": [11, 12], "b": []},
    )
    assert held == {"a": {0: 3 * GIB}, "b": {1: 2 * GIB}, "c": {1: 5 * GIB}}


def test_node_families_have_every_kind_and_instance_gpu() -> None:
    sample = NodeSample(
        at=utcnow(),
        gpus=[_gpu(0, 3 * GIB, [])],
        promised={0: GIB},
        instances=[_inst("i1", "m")],
        held={"i1": {0: 3 * GIB}},
    )
    got = {
        (f.name, tuple(sorted(s.labels.items()))): s.value
        for f in families(sample)
        for s in f.samples
    }
    assert got[("sardeenz_gpu_memory_bytes", (("gpu", "0"), ("kind", "promised")))] == GIB
    assert got[("sardeenz_gpu_memory_bytes", (("gpu", "0"), ("kind", "free")))] == 21 * GIB
    key = ("sardeenz_instance_memory_bytes", (("gpu", "0"), ("instance_id", "i1"), ("model", "m")))
    assert got[key] == 3 * GIB
    assert len(got) == 5


def test_resource_metrics_carry_the_seed_fields() -> None:
    stats = ModelMetrics("m")
    for status, seconds in ((200, 0.02), (200, 0.04), (500, 0.3)):
        stats.count(status)
        stats.duration.observe(seconds)
    m = resource_metrics(_inst("i1", "m"), {0: 2 * 10**9}, utcnow(), stats, in_flight=2)
    body = m.model_dump(mode="json")
    for seed_field in (
        "modelId",
        "timestamp",
        "gpuMemoryUsed",
        "requestCount",
        "activeConnections",
        "avgResponseTime",
        "p95ResponseTime",
    ):
        assert seed_field in body
    assert (m.gpu_memory_used, m.request_count, m.active_connections) == (2.0, 3, 2)
    assert m.avg_response_time is not None
    assert m.p95_response_time is not None
    assert 25 <= m.avg_response_time <= 50 < m.p95_response_time <= 500
    idle = resource_metrics(_inst("i2", "n"), {}, utcnow(), None, in_flight=0)
    assert (idle.request_count, idle.avg_response_time, idle.gpu_memory_used_bytes) == (0, None, 0)


def test_route_label_is_the_template_or_unmatched() -> None:
    assert route_template({"route": SimpleNamespace(path="/api/v1/models/{instance_id}")}) == (
        "/api/v1/models/{instance_id}"
    )
    assert route_template({}) == UNMATCHED
    assert route_template({"route": SimpleNamespace(path="/{rest:path}")}) == UNMATCHED  # dashboard
    stats = AdminApiStats()
    stats.record("GET", "/api/x", 200, 0.01)
    stats.record("GET", "/api/x", 200, 0.02)
    assert stats.requests == {("GET", "/api/x", 200): 2}
    assert stats.latency[("GET", "/api/x")].buckets()[-1] == ("+Inf", 2)
