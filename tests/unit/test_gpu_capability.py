"""Compute capability from GPU names and the pre-Ampere attention-backend rule."""

from __future__ import annotations

import pytest

from sardeenz.gpu.capability import attention_backend_override, capability_from_name
from sardeenz.gpu.inventory import GpuInfo

GiB = 2**30


@pytest.mark.parametrize(
    ("name", "cap"),
    [
        ("Tesla T4", (7, 5)),
        ("Tesla V100-SXM2-16GB", (7, 0)),
        ("Tesla P100-PCIE-16GB", (6, 0)),
        ("Tesla P40", (6, 1)),
        ("Tesla P4", (6, 1)),
        ("Tesla K80", (3, 7)),
        ("NVIDIA GeForce RTX 2080 Ti", (7, 5)),
        ("NVIDIA TITAN RTX", (7, 5)),
        ("Quadro RTX 8000", (7, 5)),
        ("Quadro RTX 5000", (7, 5)),
        ("NVIDIA A100-SXM4-80GB", (8, 0)),
        ("NVIDIA A100 80GB PCIe", (8, 0)),
        ("NVIDIA A30", (8, 0)),
        ("NVIDIA A10", (8, 6)),
        ("NVIDIA A10G", (8, 6)),
        ("NVIDIA A40", (8, 6)),
        ("NVIDIA GeForce RTX 3090", (8, 6)),
        ("NVIDIA RTX A6000", (8, 6)),
        ("NVIDIA L4", (8, 9)),
        ("NVIDIA L40", (8, 9)),
        ("NVIDIA L40S", (8, 9)),
        ("NVIDIA GeForce RTX 4090", (8, 9)),
        ("NVIDIA RTX 5000 Ada Generation", (8, 9)),
        ("NVIDIA H100 80GB HBM3", (9, 0)),
        ("NVIDIA H200", (9, 0)),
        ("NVIDIA GH200 480GB", (9, 0)),
        ("NVIDIA B200", (10, 0)),
        ("NVIDIA GeForce RTX 5090", (12, 0)),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", (12, 0)),
        ("Some Future Accelerator", None),
        ("", None),
    ],
)
def test_capability_from_name(name: str, cap: tuple[int, int] | None) -> None:
    assert capability_from_name(name) == cap


def _gpu(index: int, name: str, cap: tuple[int, int] | None = None) -> GpuInfo:
    return GpuInfo(
        index=index,
        name=name,
        uuid=f"GPU-test-{index}",
        total_bytes=16 * GiB,
        used_bytes=0,
        free_bytes=16 * GiB,
        compute_capability=cap if cap is not None else capability_from_name(name),
    )


def test_t4_gets_triton_and_a_warning() -> None:
    args, warnings = attention_backend_override([_gpu(1, "Tesla T4")], ["--max-model-len", "4096"])
    assert args == ["--attention-backend", "TRITON_ATTN"]
    assert warnings == [
        "GPU 1 (Tesla T4) has compute capability 7.5 < 8.0: FlashInfer/FlashAttention "
        "kernels need Ampere; using --attention-backend TRITON_ATTN"
    ]


def test_several_old_gpus_are_named_in_one_warning() -> None:
    args, warnings = attention_backend_override(
        [_gpu(0, "Tesla V100-SXM2-16GB"), _gpu(1, "NVIDIA L4"), _gpu(2, "Tesla T4")], []
    )
    assert args == ["--attention-backend", "TRITON_ATTN"]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        "GPU 0 (Tesla V100-SXM2-16GB, 7.0) and GPU 2 (Tesla T4, 7.5) have compute capability < 8.0"
    )


@pytest.mark.parametrize(
    "extra",
    [
        ["--attention-backend", "XFORMERS"],
        ["--attention-backend=TORCH_SDPA"],
        ["--enforce-eager", "--attention_backend", "TRITON_ATTN"],
    ],
)
def test_a_user_backend_is_respected(extra: list[str]) -> None:
    assert attention_backend_override([_gpu(0, "Tesla T4")], extra) == ([], [])


def test_a_user_ampere_only_backend_on_a_t4_gets_a_note() -> None:
    args, warnings = attention_backend_override(
        [_gpu(0, "Tesla T4")], ["--attention-backend=FLASHINFER"]
    )
    assert args == []
    assert len(warnings) == 1
    assert "FLASHINFER" in warnings[0]
    assert "TRITON_ATTN" in warnings[0]


def test_ampere_and_unknown_gpus_get_nothing() -> None:
    assert attention_backend_override([_gpu(0, "NVIDIA A100-SXM4-80GB")], []) == ([], [])
    assert attention_backend_override([_gpu(0, "NVIDIA L4")], []) == ([], [])
    assert attention_backend_override([_gpu(0, "Mystery GPU")], []) == ([], [])
    assert attention_backend_override([], []) == ([], [])
