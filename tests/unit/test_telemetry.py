"""Pure parts of the telemetry: held memory, metric families, resource metrics, routes."""

from __future__ import annotations

from types import SimpleNamespace

from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance, utcnow
from sardeenz.gpu.budget import held_by_instance
from sardeenz.gpu.inventory import GpuInfo, GpuProcess
from sardeenz.proxy.metrics import ModelMetrics
from sardeenz.proxy.reqlog import Record
from sardeenz.telemetry.admin import UNMATCHED, AdminApiStats, route_template
from sardeenz.telemetry.node import NodeSample, families
from sardeenz.telemetry.resources import resource_metrics
from sardeenz.telemetry.traffic import by_instance

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


def _record(n: int, instance_id: str | None, status: int, latency: float) -> Record:
    return Record(
        id=n,
        request_id=f"r{n}",
        at=float(n),
        model="m",
        instance_id=instance_id,
        pod=None,
        status=status,
        latency=latency,
        ttft=None,
        stream=False,
        key_id=None,
        prompt_tokens=None,
        completion_tokens=None,
    )


def test_resource_metrics_carry_the_seed_fields() -> None:
    stats = ModelMetrics("m")
    for status, seconds in ((200, 0.02), (200, 0.04), (500, 0.3)):
        stats.count(status)
        stats.duration.observe(seconds)
    answered = by_instance(
        [
            _record(1, "i1", 200, 0.02),
            _record(2, "i1", 200, 0.04),
            _record(3, "i1", 500, 0.3),  # an error is no answered latency
            _record(4, "other", 200, 0.9),  # another instance of the same name
            _record(5, None, 404, 0.001),  # never routed
        ]
    )
    m = resource_metrics(
        _inst("i1", "m"), {0: 2 * 10**9}, utcnow(), stats, in_flight=2, answered=answered["i1"]
    )
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
    # The requests' own latencies (20 and 40 ms), not a bucket's interpolation.
    assert (m.avg_response_time, m.p95_response_time) == (30.0, 39.0)
    idle = resource_metrics(_inst("i2", "n"), {}, utcnow(), None, in_flight=0, answered=None)
    assert (idle.request_count, idle.avg_response_time, idle.gpu_memory_used_bytes) == (0, None, 0)
    assert idle.p95_response_time is None


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
