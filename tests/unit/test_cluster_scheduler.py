"""PodScheduler (cluster/scheduler.py): table-driven cases and hypothesis properties.

Properties over random clusters: a placement never over-commits a GPU (each
chosen GPU has the need available, TP GPUs on one pod, constraints hold);
balanced leaves at least as much free on its least-free chosen GPU as any
other feasible placement (it never leaves a pod emptier than needed), pack
at most as much; a refusal happens exactly when nothing is feasible; the
answer does not depend on the order pods and GPUs are listed in.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sardeenz.cluster.scheduler import (
    GIB,
    ClusterSnapshot,
    GpuState,
    Placement,
    PlacementRequest,
    PodState,
    Refusal,
    Strategy,
    book,
    matches_type,
    schedule,
)
from sardeenz.gpu.selection import GB, RESERVED_BYTES

BAL, PACK = Strategy.BALANCED, Strategy.MAXIMIZE_MODELS


def gpu(index: int, free_gb: float, name: str = "NVIDIA L4", total_gib: int = 24) -> GpuState:
    # free_gb is what is AVAILABLE (after the reserve), to keep the tables readable.
    return GpuState(index, name, total_gib * GIB, int(free_gb * GB) + RESERVED_BYTES)


def pods(**spec: list[GpuState]) -> ClusterSnapshot:
    return ClusterSnapshot(
        tuple(PodState(name.replace("_", "-"), tuple(g)) for name, g in spec.items())
    )


SNAP = pods(
    pod_a=[gpu(0, 10), gpu(1, 30)],
    pod_b=[gpu(0, 20), gpu(1, 6, "Tesla T4", 16)],
    pod_c=[gpu(0, 50, "NVIDIA A100-SXM4-80GB", 80), gpu(1, 50, "NVIDIA A100-SXM4-80GB", 80)],
)


@pytest.mark.parametrize(
    ("request_", "strategy", "want"),
    [
        # balanced: the GPU with the most left after the load
        (PlacementRequest(need_bytes_per_gpu=5 * GB), BAL, ("pod-c", (0,))),
        # pack: the tightest GPU that fits
        (PlacementRequest(need_bytes_per_gpu=5 * GB), PACK, ("pod-b", (1,))),
        (PlacementRequest(need_bytes_per_gpu=8 * GB), PACK, ("pod-a", (0,))),
        # type by substring and by glob; minimum VRAM
        (PlacementRequest(need_bytes_per_gpu=GB, gpu_type="l4"), BAL, ("pod-a", (1,))),
        (PlacementRequest(need_bytes_per_gpu=GB, gpu_type="tesla*"), BAL, ("pod-b", (1,))),
        # (the T4, 16 GiB, would be the tightest fit without it)
        (PlacementRequest(need_bytes_per_gpu=GB, min_vram_bytes=20 * GIB), PACK, ("pod-a", (0,))),
        # tensor parallel: both GPUs on one pod
        (
            PlacementRequest(need_bytes_per_gpu=15 * GB, tensor_parallel_size=2),
            PACK,
            ("pod-c", (0, 1)),
        ),
        (
            PlacementRequest(need_bytes_per_gpu=9 * GB, tensor_parallel_size=2),
            PACK,
            ("pod-a", (0, 1)),
        ),
        # pinned GPUs
        (PlacementRequest(need_bytes_per_gpu=GB, gpu_ids=(1,)), BAL, ("pod-c", (1,))),
        # a per-pod need (profile of that pod's GPU model) changes the answer
        (
            PlacementRequest(need_bytes_per_gpu=5 * GB, need_by_pod={"pod-c": 60 * GB}),
            BAL,
            ("pod-a", (1,)),
        ),
        # restricted candidates
        (PlacementRequest(need_bytes_per_gpu=GB, pods=frozenset({"pod-b"})), BAL, ("pod-b", (0,))),
        # unknown need: most free (balanced)
        (PlacementRequest(), BAL, ("pod-c", (0,))),
    ],
)
def test_placement_table(
    request_: PlacementRequest, strategy: Strategy, want: tuple[str, tuple[int, ...]]
) -> None:
    got = schedule(SNAP, request_, strategy)
    assert isinstance(got, Placement), got
    assert (got.pod_id, got.gpu_ids) == want


def test_free_after_and_verdict() -> None:
    got = schedule(SNAP, PlacementRequest(need_bytes_per_gpu=12 * GB, gpu_type="L4"), BAL)
    assert isinstance(got, Placement)
    assert got.free_after_bytes == ((1, 18 * GB),)
    assert got.min_free_after_bytes == 18 * GB
    assert got.verdict() == (
        "would go to pod-a, GPU 1 (NVIDIA L4): 16.8 GiB free after (needs 11.2 GiB per GPU)"
    )


@pytest.mark.parametrize(
    ("request_", "reasons"),
    [
        (
            PlacementRequest(need_bytes_per_gpu=60 * GB),
            {"pod-a": "needs 55.9 GiB per GPU", "pod-b": "needs 55.9 GiB", "pod-c": "needs 55.9"},
        ),
        (
            PlacementRequest(need_bytes_per_gpu=GB, gpu_type="H100"),
            {"pod-a": "no GPU named like 'H100'", "pod-b": "has NVIDIA L4, Tesla T4"},
        ),
        (
            PlacementRequest(need_bytes_per_gpu=GB, tensor_parallel_size=3),
            {"pod-a": "tensorParallelSize 3 needs 3 GPUs on one pod; 2 eligible"},
        ),
        (
            PlacementRequest(need_bytes_per_gpu=GB, min_vram_bytes=100 * GIB),
            {"pod-c": "with at least 100 GiB"},
        ),
        (PlacementRequest(need_bytes_per_gpu=GB, gpu_ids=(5,)), {"pod-a": "no eligible GPU [5]"}),
    ],
)
def test_refusal_says_why_per_pod(request_: PlacementRequest, reasons: dict[str, str]) -> None:
    got = schedule(SNAP, request_, BAL)
    assert isinstance(got, Refusal), got
    assert set(got.by_pod) == {"pod-a", "pod-b", "pod-c"}
    for pod, part in reasons.items():
        assert part in got.by_pod[pod], got.by_pod[pod]
    assert got.message().startswith("no pod can take this load: pod-a: ")


def test_unavailable_pod_and_promised_memory() -> None:
    snap = ClusterSnapshot(
        (
            PodState("pod-a", (gpu(0, 40),), unavailable="pod unavailable (no heartbeat)"),
            # 30 GB available, but 25 GB promised to an engine still starting
            PodState("pod-b", (GpuState(0, "L4", 80 * GIB, 32 * GB, promised_bytes=25 * GB),)),
            PodState("pod-c", (gpu(0, 8),)),
        )
    )
    got = schedule(snap, PlacementRequest(need_bytes_per_gpu=6 * GB), BAL)
    assert isinstance(got, Placement)
    assert got.pod_id == "pod-c"
    refused = schedule(snap, PlacementRequest(need_bytes_per_gpu=9 * GB), BAL)
    assert isinstance(refused, Refusal)
    assert refused.by_pod["pod-a"] == "pod unavailable (no heartbeat)"
    assert "GPU0 L4 4.7 GiB" in refused.by_pod["pod-b"]


def test_pods_without_gpus() -> None:
    cpu = ClusterSnapshot((PodState("pod-a", instances=3), PodState("pod-b", instances=1)))
    bal = schedule(cpu, PlacementRequest(need_bytes_per_gpu=GB), BAL)
    pack = schedule(cpu, PlacementRequest(need_bytes_per_gpu=GB), PACK)
    assert isinstance(bal, Placement)
    assert (bal.pod_id, bal.gpu_ids) == ("pod-b", ())
    assert isinstance(pack, Placement)
    assert pack.pod_id == "pod-a"
    assert "no GPUs" in bal.verdict()
    refused = schedule(cpu, PlacementRequest(gpu_type="L4"), BAL)
    assert isinstance(refused, Refusal)
    assert refused.by_pod["pod-a"] == "this pod has no GPUs (gpuType 'L4' asked)"
    # a pod with GPUs is preferred to one without
    mixed = ClusterSnapshot((PodState("pod-a"), PodState("pod-b", (gpu(0, 3),))))
    got = schedule(mixed, PlacementRequest(need_bytes_per_gpu=GB), BAL)
    assert isinstance(got, Placement)
    assert got.pod_id == "pod-b"
    # an engine on host memory never gets GPUs
    host = schedule(mixed, PlacementRequest(uses_gpus=False), BAL)
    assert isinstance(host, Placement)
    assert host.gpu_ids == ()


def test_book_plans_loads_in_a_row() -> None:
    """Three 12 GB loads, each placed as if the previous ones ran: balanced spreads them."""
    snap = pods(pod_a=[gpu(0, 30)], pod_b=[gpu(0, 30)])
    placed = []
    for _ in range(3):
        got = schedule(snap, PlacementRequest(need_bytes_per_gpu=12 * GB), BAL)
        assert isinstance(got, Placement)
        placed.append(got.pod_id)
        snap = book(snap, got)
    assert placed == ["pod-a", "pod-b", "pod-a"]
    assert [p.instances for p in snap.pods] == [2, 1]
    assert snap.pods[0].gpus[0].available_bytes == 6 * GB
    fourth = schedule(snap, PlacementRequest(need_bytes_per_gpu=12 * GB), BAL)
    assert isinstance(fourth, Placement)
    assert fourth.pod_id == "pod-b"
    fifth = schedule(book(snap, fourth), PlacementRequest(need_bytes_per_gpu=12 * GB), BAL)
    assert isinstance(fifth, Refusal)


def test_empty_cluster_is_a_refusal() -> None:
    got = schedule(ClusterSnapshot(()), PlacementRequest(), BAL)
    assert isinstance(got, Refusal)
    assert got.by_pod == {}


@pytest.mark.parametrize(
    ("name", "pattern", "ok"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100", True),
        ("NVIDIA A100-SXM4-80GB", "*A100*80GB", True),
        ("NVIDIA A100-SXM4-40GB", "*A100*80GB", False),
        ("NVIDIA L4", "T4", False),
        ("NVIDIA L4", None, True),
    ],
)
def test_matches_type(name: str, pattern: str | None, ok: bool) -> None:
    assert matches_type(name, pattern) is ok


# --------------------------------------------------------------------- properties
NAMES = ["NVIDIA L4", "Tesla T4", "NVIDIA A100"]

gpu_states = st.builds(
    # Whole GB around the reserve, so needs often sit exactly at (or 1 GB over) a GPU's
    # available memory: the boundaries where an over-commit would hide.
    lambda name, total_gib, free_gb, promised_gb: GpuState(
        0, name, total_gib * GIB, min(total_gib * GIB, free_gb * GB), promised_gb * GB
    ),
    st.sampled_from(NAMES),
    st.sampled_from([16, 24, 40, 80]),
    st.integers(0, 86),
    st.integers(0, 4),
)


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    n = draw(st.integers(0, 4))
    out = []
    for i in range(n):
        gs = draw(st.lists(gpu_states, min_size=0, max_size=4))
        gpus = tuple(
            GpuState(j, g.name, g.total_bytes, g.free_bytes, g.promised_bytes)
            for j, g in enumerate(gs)
        )
        down = draw(st.sampled_from([None, None, None, "unavailable"]))
        out.append(PodState(f"pod-{i}", gpus, down, draw(st.integers(0, 5))))
    return ClusterSnapshot(tuple(out))


requests = st.builds(
    PlacementRequest,
    need_bytes_per_gpu=st.one_of(st.none(), st.integers(0, 30).map(lambda g: g * GB)),
    tensor_parallel_size=st.sampled_from([1, 1, 2, 3]),
    gpu_type=st.sampled_from([None, None, "L4", "t4", "*A100*"]),
    min_vram_bytes=st.sampled_from([None, None, 24 * GIB, 40 * GIB]),
)


def feasible(snapshot: ClusterSnapshot, req: PlacementRequest) -> list[tuple[str, int]]:
    """Brute force: (pod, least free after) of every feasible GPU placement."""
    out = []
    for pod in snapshot.pods:
        if pod.unavailable or not pod.gpus:
            continue
        need = req.need_on(pod.pod_id)
        ok = [
            g
            for g in pod.gpus
            if matches_type(g.name, req.gpu_type)
            and (req.min_vram_bytes is None or g.total_bytes >= req.min_vram_bytes)
            and (g.available_bytes >= need if need is not None else g.available_bytes > 0)
        ]
        for combo in itertools.combinations(ok, req.tensor_parallel_size):
            out.append((pod.pod_id, min(g.available_bytes for g in combo) - (need or 0)))
    return out


@settings(max_examples=400, deadline=None)
@given(snap=snapshots(), req=requests, strategy=st.sampled_from(list(Strategy)))
def test_properties(snap: ClusterSnapshot, req: PlacementRequest, strategy: Strategy) -> None:
    got = schedule(snap, req, strategy)
    options = feasible(snap, req)
    gpu_pods = any(p.gpus and not p.unavailable for p in snap.pods)
    if isinstance(got, Refusal):
        assert not options
        assert set(got.by_pod) == {p.pod_id for p in snap.pods}
        return
    pod = next(p for p in snap.pods if p.pod_id == got.pod_id)
    assert pod.unavailable is None
    if not got.gpu_ids:  # a pod without GPUs: only when no GPU placement exists
        assert not pod.gpus
        assert not options
        assert req.gpu_type is None
        assert req.min_vram_bytes is None
        return
    assert gpu_pods
    # never over-commits: distinct GPUs of one pod, each with the need available
    assert len(set(got.gpu_ids)) == len(got.gpu_ids) == req.tensor_parallel_size
    by_index = {g.index: g for g in pod.gpus}
    need = req.need_on(pod.pod_id)
    for index, after in got.free_after_bytes:
        g = by_index[index]
        assert after >= 0
        assert after == g.available_bytes - (need or 0)
        assert matches_type(g.name, req.gpu_type)
        assert req.min_vram_bytes is None or g.total_bytes >= req.min_vram_bytes
    least = got.min_free_after_bytes
    assert least is not None
    if strategy is Strategy.BALANCED:  # nothing feasible would leave more free
        assert least == max(f for _, f in options)
    else:  # best fit: nothing feasible would leave less
        assert least == min(f for _, f in options)
    # same input, same answer, whatever order pods and GPUs are listed in
    assert schedule(snap, req, strategy) == got
    shuffled = list(snap.pods)
    random.Random(len(shuffled)).shuffle(shuffled)
    shuffled = [
        PodState(p.pod_id, tuple(reversed(p.gpus)), p.unavailable, p.instances) for p in shuffled
    ]
    assert schedule(ClusterSnapshot(tuple(shuffled)), req, strategy) == got
