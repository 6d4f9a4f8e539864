"""Engine adapters: the exact argv and environment each engine kind is started with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sardeenz.config import Settings
from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance
from sardeenz.engines import get_adapter
from sardeenz.engines.base import LaunchContext
from sardeenz.engines.logparse import READY_LINE as PARSER_READY_LINE
from sardeenz.engines.sim_adapter import SimAdapter
from sardeenz.engines.vllm import (
    READY_LINE,
    VllmAdapter,
    format_fraction,
    validate_extra_args,
)

VLLM_PYTHON = "/opt/vllm/bin/python"
SHELLY = ["--chat-template", "x; rm -rf / | cat $(id) `whoami` && echo > /tmp/f", "--x='a b'"]


def make_instance(**kw: Any) -> ModelInstance:
    fields: dict[str, Any] = {
        "id": "abc123",
        "model_path": "/models/Qwen2.5-7B-Instruct",
        "served_model_name": "qwen",
        "display_name": "Qwen",
        "engine": EngineKind.VLLM,
        "status": InstanceStatus.STARTING,
        "port": 12346,
    }
    fields.update(kw)
    return ModelInstance(**fields)


def make_ctx(tmp_path: Path, **kw: Any) -> LaunchContext:
    fields: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": 12346,
        "gpu_ids": [],
        "gpu_memory_utilization": None,
        "kvcached_ipc_name": None,
        "instance_dir": str(tmp_path / "abc123"),
        "settings": Settings(vllm_python=VLLM_PYTHON, data_dir=tmp_path),
    }
    fields.update(kw)
    return LaunchContext(**fields)


def cache_env(data_dir: Path) -> dict[str, str]:
    """Every vLLM engine keeps its compile caches under the data dir, not ~/.cache or /tmp."""
    return {
        "VLLM_CACHE_ROOT": str(data_dir / "cache" / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(data_dir / "cache" / "torchinductor"),
    }


# --- vLLM ----------------------------------------------------------------------------------


def test_vllm_minimal(tmp_path: Path) -> None:
    spec = VllmAdapter().build_launch(make_instance(), make_ctx(tmp_path))
    assert spec.argv == [
        VLLM_PYTHON,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/Qwen2.5-7B-Instruct",
        "--host",
        "127.0.0.1",
        "--port",
        "12346",
        "--served-model-name",
        "qwen",
        "--no-enable-prefix-caching",
    ]
    assert spec.env == {
        "PYTHONUNBUFFERED": "1",
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75",
        **cache_env(tmp_path),
    }
    assert spec.warnings == []


def test_vllm_everything(tmp_path: Path) -> None:
    instance = make_instance(
        tensor_parallel_size=2,
        sleep_mode_enabled=True,
        extra_args=["--max-model-len", "8192", "--dtype=half"],
    )
    ctx = make_ctx(
        tmp_path,
        port=12400,
        gpu_ids=[2, 3],
        gpu_memory_utilization=0.45,
        kvcached_ipc_name="kvcached_vllm_GPU2_3",
    )
    spec = VllmAdapter().build_launch(instance, ctx)
    assert spec.argv == [
        VLLM_PYTHON,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/Qwen2.5-7B-Instruct",
        "--host",
        "127.0.0.1",
        "--port",
        "12400",
        "--served-model-name",
        "qwen",
        "--no-enable-prefix-caching",
        "--gpu-memory-utilization",
        "0.45",
        "--tensor-parallel-size",
        "2",
        "--enable-sleep-mode",
        "--max-model-len",
        "8192",
        "--dtype=half",
    ]
    assert spec.env == {
        "PYTHONUNBUFFERED": "1",
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "2,3",
        "ENABLE_KVCACHED": "true",
        "KVCACHED_AUTOPATCH": "1",
        "KVCACHED_IPC_NAME": "kvcached_vllm_GPU2_3",
        "VLLM_SERVER_DEV_MODE": "1",
        **cache_env(tmp_path),
    }


def test_vllm_single_gpu_gets_no_tensor_parallel_flag(tmp_path: Path) -> None:
    spec = VllmAdapter().build_launch(make_instance(), make_ctx(tmp_path, gpu_ids=[0]))
    assert "--tensor-parallel-size" not in spec.argv
    assert "--enable-sleep-mode" not in spec.argv
    assert spec.env["CUDA_VISIBLE_DEVICES"] == "0"
    assert "VLLM_SERVER_DEV_MODE" not in spec.env


def test_engine_keep_alive_follows_the_setting_unless_the_operator_set_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", raising=False)
    settings = Settings(vllm_python=VLLM_PYTHON, data_dir=tmp_path, engine_keepalive_seconds=30)
    spec = VllmAdapter().build_launch(make_instance(), make_ctx(tmp_path, settings=settings))
    assert spec.env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"] == "30"
    monkeypatch.setenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "9")  # inherited by the engine as is
    spec = VllmAdapter().build_launch(make_instance(), make_ctx(tmp_path, settings=settings))
    assert "VLLM_HTTP_TIMEOUT_KEEP_ALIVE" not in spec.env


def test_sleep_mode_dev_flag_is_an_integer_string(tmp_path: Path) -> None:
    """vLLM parses VLLM_SERVER_DEV_MODE with int(): "true" would crash it."""
    spec = VllmAdapter().build_launch(make_instance(sleep_mode_enabled=True), make_ctx(tmp_path))
    assert spec.env["VLLM_SERVER_DEV_MODE"] == "1"


def test_vllm_warns_when_extra_args_override_the_budget(tmp_path: Path) -> None:
    instance = make_instance(extra_args=["--gpu_memory_utilization=0.9", "-tp", "4"])
    spec = VllmAdapter().build_launch(instance, make_ctx(tmp_path, gpu_memory_utilization=0.3))
    assert len(spec.warnings) == 2
    assert "--gpu-memory-utilization" in spec.warnings[0]
    assert "-tp" in spec.warnings[1]
    assert spec.argv[-3:] == ["--gpu_memory_utilization=0.9", "-tp", "4"]


def test_ready_line_is_uvicorns() -> None:
    assert READY_LINE == PARSER_READY_LINE == "Application startup complete."


@pytest.mark.parametrize(
    ("value", "text"), [(0.45, "0.45"), (0.1 + 0.2, "0.3"), (0.9, "0.9"), (1.0, "1")]
)
def test_format_fraction(value: float, text: str) -> None:
    assert format_fraction(value) == text


def test_vllm_refuses_a_missing_absolute_model_path_before_spawning(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    refusal = VllmAdapter().start_refusal(make_instance(model_path=str(missing)))
    assert refusal == f"model path {missing} does not exist on this node (vLLM was not started)"
    # A folder that exists, even an empty one, and a repo id are vLLM's to judge.
    (tmp_path / "empty").mkdir()
    assert VllmAdapter().start_refusal(make_instance(model_path=str(tmp_path / "empty"))) is None
    assert VllmAdapter().start_refusal(make_instance(model_path="org/no-such-model")) is None
    # The simulated engine reads no weights: any path starts.
    assert SimAdapter().start_refusal(make_instance(model_path=str(missing))) is None


# --- simulated engine --------------------------------------------------------------------


def test_sim_minimal(tmp_path: Path) -> None:
    instance = make_instance(engine=EngineKind.SIM)
    spec = SimAdapter().build_launch(instance, make_ctx(tmp_path))
    assert spec.argv == [
        sys.executable,
        "-m",
        "sardeenz.sim",
        "--model",
        "/models/Qwen2.5-7B-Instruct",
        "--host",
        "127.0.0.1",
        "--port",
        "12346",
        "--served-model-name",
        "qwen",
    ]
    assert spec.env == {"PYTHONUNBUFFERED": "1", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75"}


def test_sim_everything(tmp_path: Path) -> None:
    instance = make_instance(
        engine=EngineKind.SIM,
        sleep_mode_enabled=True,
        tensor_parallel_size=2,
        extra_args=["--ttft-ms", "40", "--load-seconds", "2", "--memory-gib", "6"],
    )
    ctx = make_ctx(
        tmp_path, gpu_ids=[0, 1], gpu_memory_utilization=0.5, kvcached_ipc_name="kvc_GPU0_1"
    )
    spec = SimAdapter().build_launch(instance, ctx)
    assert spec.argv == [
        sys.executable,
        "-m",
        "sardeenz.sim",
        "--model",
        "/models/Qwen2.5-7B-Instruct",
        "--host",
        "127.0.0.1",
        "--port",
        "12346",
        "--served-model-name",
        "qwen",
        "--enable-sleep-mode",
        "--gpu-memory-utilization",
        "0.5",
        "--ttft-ms",
        "40",
        "--load-seconds",
        "2",
        "--memory-gib",
        "6",
    ]
    assert spec.env == {
        "PYTHONUNBUFFERED": "1",
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "ENABLE_KVCACHED": "true",
        "KVCACHED_AUTOPATCH": "1",
        "KVCACHED_IPC_NAME": "kvc_GPU0_1",
        "VLLM_SERVER_DEV_MODE": "1",
    }


# --- extra_args ----------------------------------------------------------------------------


@pytest.mark.parametrize("adapter", [VllmAdapter(), SimAdapter()], ids=["vllm", "sim"])
def test_shell_metacharacters_are_passed_literally(adapter: Any, tmp_path: Path) -> None:
    spec = adapter.build_launch(make_instance(extra_args=SHELLY), make_ctx(tmp_path))
    assert spec.argv[-len(SHELLY) :] == SHELLY


def test_extra_args_reach_the_process_untouched(tmp_path: Path) -> None:
    """Spawned as an argv list the tokens arrive byte for byte; no shell ever runs them."""
    marker = tmp_path / "pwned"
    extra = [f"$(touch {marker})", f"; touch {marker}", "|", "&&", "*", "~", "a b", ""]
    spec = SimAdapter().build_launch(make_instance(extra_args=extra), make_ctx(tmp_path))
    echo = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]
    out = subprocess.run([*echo, *spec.argv[3:]], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == spec.argv[3:]
    assert not marker.exists()


@pytest.mark.parametrize(
    "token",
    [
        "--port",
        "--port=8000",
        "--host",
        "--host=0.0.0.0",
        "--model",
        "--model=/other",
        "--served-model-name",
        "--served-model-name=evil",
        "--served_model_name=evil",
        "--served_model_name",
        "--serv",  # argparse would take an unambiguous prefix
        "--po=1",
    ],
)
def test_owned_flags_are_rejected(token: str) -> None:
    with pytest.raises(ValueError, match="extraArgs may not set --"):
        validate_extra_args(["--max-model-len", "4096", token, "x"])


@pytest.mark.parametrize("token", ["a\x00b", "a\nb", "--x=\r", "\n"])
def test_nul_and_line_breaks_are_rejected(token: str) -> None:
    with pytest.raises(ValueError, match=r"extraArgs\[1\]"):
        validate_extra_args(["--ok", token])


@pytest.mark.parametrize(
    "token",
    ["\x1b[1GCRITICAL forged", "a\u2028b", "a\u2029b", "a\x85b", "a\x0cb", "a\tb", "\x7f", "\x9b"],
    ids=lambda t: repr(t),
)
def test_every_control_character_is_rejected(token: str) -> None:
    """ANSI escapes and the Unicode line separators forge log lines as well as a newline."""
    with pytest.raises(ValueError, match=r"extraArgs\[1\] contains a control character"):
        validate_extra_args(["--ok", token])


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--max-model-len", "4096", "--model-impl", "transformers"],
        ["--portion", "1", "--hostname-x", "--models-dir", "-p", "8000"],
        ["--tokenizer", "/models/tok", "--", "-"],
        SHELLY,
        ["--override-generation-config", '{"--port": 1}'],
    ],
)
def test_ordinary_args_pass(args: list[str]) -> None:
    checked = validate_extra_args(args)
    assert checked == args
    assert checked is not args


def test_adapters_validate_too(tmp_path: Path) -> None:
    instance = make_instance(extra_args=["--port", "9"])
    with pytest.raises(ValueError, match="--port"):
        VllmAdapter().build_launch(instance, make_ctx(tmp_path))
    with pytest.raises(ValueError, match="--port"):
        SimAdapter().build_launch(instance, make_ctx(tmp_path))


# --- registry ------------------------------------------------------------------------------


def test_get_adapter() -> None:
    vllm = get_adapter(EngineKind.VLLM)
    sim = get_adapter(EngineKind.SIM)
    assert isinstance(vllm, VllmAdapter)
    assert isinstance(sim, SimAdapter)
    assert (vllm.kind, vllm.simulated) == (EngineKind.VLLM, False)
    assert (sim.kind, sim.simulated) == (EngineKind.SIM, True)
    assert get_adapter(EngineKind.VLLM) is vllm
