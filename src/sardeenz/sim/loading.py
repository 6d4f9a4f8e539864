"""The simulated engine's loading phase, told in vLLM's own log lines.

The controller learns an engine's memory (weights, KV cache, CUDA graphs), its
readiness and its failure causes from these lines alone, so they follow vLLM 0.14 to
the letter, spread over ``--load-seconds`` like a real load. When the KV cache cannot
hold one ``--max-model-len`` request (or with ``--fail-after-load``) the EngineCore
fails as vLLM's does: the root-cause traceback first, then the API server's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal

from sardeenz.sim import SIM_VERSION
from sardeenz.sim.args import SimConfig
from sardeenz.sim.logwriter import VLLM_SRC, VllmLog
from sardeenz.sim.memory import KV_BLOCK_TOKENS, MemoryPlan

__all__ = ["LoadOutcome", "load", "log_banner", "log_init_failed"]

LoadOutcome = Literal["ready", "stopped", "failed"]


def _fmt_int(n: int) -> str:
    return f"{n:,}"


def log_banner(cfg: SimConfig, log: VllmLog) -> None:
    """The first lines: says "simulated" before anything else, then vLLM's version banner."""
    log.api(
        "sim.py:1",
        "Simulated engine (sardeenz sim-engine): not a real vLLM. No GPU is used and "
        "all memory figures are simulated.",
        "WARNING",
    )
    log.api("api_server.py:1839", f"vLLM API server version {SIM_VERSION}")
    log.api("utils.py:233", f"non-default args: {cfg.non_default_args!r}")
    log.api("model.py:547", "Resolved architecture: SimulatedForCausalLM")
    log.api("model.py:1510", f"Using max model len {cfg.max_model_len}")


async def load(
    cfg: SimConfig,
    plan: MemoryPlan,
    log: VllmLog,
    wait_or_stop: Callable[[float], Awaitable[bool]],
    core_died: Callable[[], bool],
) -> LoadOutcome:
    """The loading phase, log lines spread over ``--load-seconds``.

    Returns "ready", "stopped" (a stop was requested, or ``core_died()``: the caller
    tells them apart) or "failed" (KV cache too small).
    """
    total = cfg.load_seconds
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def until(fraction: float) -> bool:
        return await wait_or_stop(t0 + total * fraction - loop.time())

    util = cfg.gpu_memory_utilization if cfg.gpu_memory_utilization is not None else 0.9
    log.core(
        "core.py:77",
        f"Initializing a V1 LLM engine (v{SIM_VERSION}) with config: model={cfg.model!r}, "
        f"speculative_config=None, tokenizer={cfg.model!r}, dtype=torch.bfloat16, "
        f"max_seq_len={cfg.max_model_len}, tensor_parallel_size=1, "
        f"gpu_memory_utilization={util}, enable_sleep_mode={cfg.enable_sleep_mode}, "
        f"served_model_name={cfg.served_name}, simulated=True",
    )
    if await until(0.05):
        return "stopped"
    log.core("gpu_model_runner.py:2602", f"Starting to load model {cfg.model}...")
    load_start = loop.time()
    if await until(0.45):
        return "stopped"
    log.core(
        "gpu_model_runner.py:2653",
        f"Model loading took {plan.weights_gib:.4f} GiB memory and "
        f"{loop.time() - load_start:.6f} seconds",
    )
    if await until(0.60):
        return "stopped"
    fits = plan.fits and not cfg.fail_after_load
    available = plan.kv_gib if fits else min(plan.kv_gib, plan.needed_kv_gib * 0.5)
    log.core("gpu_worker.py:298", f"Available KV cache memory: {available:.2f} GiB")
    if not fits:
        _log_kv_failure(cfg, plan, log, available)
        return "failed"
    log.core("kv_cache_utils.py:1087", f"GPU KV cache size: {_fmt_int(plan.kv_tokens)} tokens")
    log.core(
        "kv_cache_utils.py:1091",
        f"Maximum concurrency for {_fmt_int(cfg.max_model_len)} tokens per request: "
        f"{plan.max_concurrency:.2f}x",
    )
    graphs_start = loop.time()
    if await until(0.90):
        return "stopped"
    log.core(
        "gpu_model_runner.py:3480",
        f"Graph capturing finished in {loop.time() - graphs_start:.0f} secs, "
        f"took {plan.graphs_gib:.2f} GiB",
    )
    if await until(0.95):
        return "stopped"
    log.core(
        "core.py:210",
        f"init engine (profile, create kv cache, warmup model) took {loop.time() - t0:.2f} seconds",
    )
    if await until(1.0):
        return "stopped"
    log.api(
        "loggers.py:147",
        "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: "
        f"{plan.kv_tokens // KV_BLOCK_TOKENS}",
    )
    return "stopped" if core_died() else "ready"


def _log_kv_failure(cfg: SimConfig, plan: MemoryPlan, log: VllmLog, available: float) -> None:
    """vLLM's KV-cache-too-small failure, root cause first, as the parser expects."""
    estimated = plan.tokens_for(available)
    message = (
        f"To serve at least one request with the models's max seq len "
        f"({cfg.max_model_len}), ({plan.needed_kv_gib:.2f} GiB KV cache is needed, which "
        f"is larger than the available KV cache memory ({available:.2f} GiB). Based on "
        f"the available memory, the estimated maximum model length is {estimated}. Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine."
    )
    frames = [
        (
            f"{VLLM_SRC}/v1/engine/core.py",
            699,
            "run_engine_core",
            "engine_core = EngineCoreProc(*args, **kwargs)",
        ),
        (
            f"{VLLM_SRC}/v1/engine/core.py",
            498,
            "__init__",
            "super().__init__(vllm_config, executor_class, log_stats,",
        ),
        (
            f"{VLLM_SRC}/v1/engine/core.py",
            92,
            "__init__",
            "self._initialize_kv_caches(vllm_config)",
        ),
        (
            f"{VLLM_SRC}/v1/engine/core.py",
            199,
            "_initialize_kv_caches",
            "kv_cache_configs = get_kv_cache_configs(vllm_config, kv_cache_specs,",
        ),
        (
            f"{VLLM_SRC}/v1/core/kv_cache_utils.py",
            1243,
            "get_kv_cache_configs",
            "check_enough_kv_cache_memory(vllm_config, kv_cache_spec_one_worker,",
        ),
        (
            f"{VLLM_SRC}/v1/core/kv_cache_utils.py",
            716,
            "check_enough_kv_cache_memory",
            "raise ValueError(",
        ),
    ]
    tb = ["EngineCore failed to start.", "Traceback (most recent call last):"]
    for path, lineno, func, code in frames:
        tb += [f'  File "{path}", line {lineno}, in {func}', f"    {code}"]
    tb.append(f"ValueError: {message}")
    log.core("core.py:708", "\n".join(tb), "ERROR")
    bootstrap = [
        "Process EngineCore_DP0:",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap',
        "    self.run()",
        '  File "/usr/lib/python3.11/multiprocessing/process.py", line 108, in run',
        "    self._target(*self._args, **self._kwargs)",
        f'  File "{VLLM_SRC}/v1/engine/core.py", line 712, in run_engine_core',
        "    raise e",
        *tb[2:],
    ]
    log.raw(log.core_tag, "\n".join(bootstrap))


def log_init_failed(log: VllmLog) -> None:
    """The API server's side of a failed start: vLLM's "Engine core initialization failed"."""
    log.api_traceback(
        [
            ("<frozen runpy>", 198, "_run_module_as_main", ""),
            ("<frozen runpy>", 88, "_run_code", ""),
            (
                f"{VLLM_SRC}/entrypoints/openai/api_server.py",
                1953,
                "<module>",
                "uvloop.run(run_server(args))",
            ),
            (
                f"{VLLM_SRC}/entrypoints/openai/api_server.py",
                1884,
                "run_server",
                "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)",
            ),
            (
                f"{VLLM_SRC}/entrypoints/openai/api_server.py",
                1898,
                "run_server_worker",
                "async with build_async_engine_client(",
            ),
            (
                f"{VLLM_SRC}/v1/engine/core_client.py",
                449,
                "__init__",
                "with launch_core_engines(vllm_config, executor_class,",
            ),
            (
                f"{VLLM_SRC}/v1/engine/utils.py",
                729,
                "launch_core_engines",
                "wait_for_engine_startup(",
            ),
            (
                f"{VLLM_SRC}/v1/engine/utils.py",
                782,
                "wait_for_engine_startup",
                "raise RuntimeError(",
            ),
        ],
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore': 1}",
    )
