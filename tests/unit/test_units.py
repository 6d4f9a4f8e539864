"""One way to print memory (GiB, one decimal) and simulated GPU sizes that need a unit."""

from __future__ import annotations

import pytest

from sardeenz.config import ConfigError, parse_sim_gpus
from sardeenz.units import GIB, gib


def test_gib_prints_one_decimal_like_vllm() -> None:
    assert gib(24 * GIB) == "24.0 GiB"
    assert gib(2 * 10**9) == "1.9 GiB"
    assert gib(0) == "0.0 GiB"
    assert gib(None) == "-"


@pytest.mark.parametrize("spec", ["L4:24", "NVIDIA L4:24 ", "L4:24GiB,T4:16"])
def test_a_simulated_gpu_size_without_unit_is_refused_with_the_forms(spec: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_sim_gpus(spec)
    message = str(refused.value)
    assert "needs a unit" in message
    assert "GiB'" in message  # the corrected spec, e.g. 'L4:24GiB'
    assert "24GiB, 24GB, 512MiB" in message


@pytest.mark.parametrize(
    ("spec", "said"), [("L4", "must look like 'NAME:SIZE'"), ("L4:lots", "is not a size")]
)
def test_other_bad_specs_show_the_accepted_forms(spec: str, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_sim_gpus(spec)
    assert said in str(refused.value)
    assert "24GiB, 24GB, 512MiB" in str(refused.value)


def test_sizes_with_a_unit_still_parse() -> None:
    gpus = parse_sim_gpus("NVIDIA L4:24GiB,Tesla T4:16 GB,X:1.5T")
    assert [g.memory_bytes for g in gpus] == [24 * GIB, 16 * 10**9, int(1.5 * 2**40)]
