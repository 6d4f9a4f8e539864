"""The simulated engine: an OpenAI-compatible server that behaves like vLLM from the outside.

Run as ``python -m sardeenz.engines.sim --model NAME --port P`` (or ``sardeenz sim-engine``).
It is a product feature, not a test double: the demo runs on it and most tests drive
it as a real process, so everything the supervisor and the proxy observe matches real
vLLM (see ``reference/vllm.md``):

* the same flags style (argparse; an unknown flag exits 2 with ``unrecognized
  arguments``), the same vLLM-format log lines (``(APIServer pid=N) INFO MM-DD
  HH:MM:SS [file.py:LINE] ...``) including the memory lines the log parser reads,
  and uvicorn's own ``INFO:     Application startup complete.`` on stderr;
* the port is bound at once but only listens when the "model" has loaded, so
  connections are refused while loading, exactly like vLLM;
* a real ``VLLM::EngineCor`` child process that is orphaned by a SIGKILL of the
  server (the supervisor must signal the process group), and terminated on a
  graceful shutdown;
* the same endpoints, JSON shapes, SSE framing, error shapes, Prometheus names and
  sleep/wake API (dev mode only), with configurable load time, time to first token
  and inter-token latency.

Deterministic output, so tests can assert content: token ``i`` of a reply is the word
``tok{i}`` and the text is ``"tok0 tok1 ... tok{n-1}"`` (see :func:`completion_text`).
Prompt tokens are counted as whitespace-separated words, at least one (the BOS token);
a chat prompt is first rendered as ``"role: content\\n"`` per message plus
``"assistant:"`` (see :func:`count_prompt_tokens` and :func:`render_chat_prompt`).

Simulated GPU memory (``--memory-gib M``): weights 60 %, CUDA graphs 3 %, KV cache the
rest; the KV cache holds ``weights_bytes / 131072`` bytes per token (the Llama-3-8B
ratio), in blocks of 16 tokens. When the KV cache cannot hold one ``--max-model-len``
request the engine fails like vLLM does (``--fail-after-load`` forces that failure).

Generation: ``max_tokens`` (chat: ``max_completion_tokens`` first) tokens exactly,
``finish_reason="length"``; without it 16 tokens and ``"stop"`` (a simulated EOS). The
first token comes ``--ttft-ms`` after the request is admitted, then one every
``--itl-ms`` on an absolute schedule. There is no scheduler limit on concurrency.

Sleep (``--enable-sleep-mode`` and ``VLLM_SERVER_DEV_MODE=1``): falling asleep takes
50 ms, a full wake-up ``--wake-ms`` (default ``load-seconds / 10``, at most 500 ms;
waking one tag of two takes half). Both levels free weights and KV cache; CUDA graphs
stay. Requests queue while asleep and generation in flight pauses.

Access log: uvicorn's format on stdout, but written by the app, buffered and flushed
every 0.1 s: uvicorn's logging-module access log doubled the cost of a small request
here. ``--disable-uvicorn-access-log`` (vLLM's flag) turns it off.

Everything a user sees says "simulated": the first log line, the version
(``0.0.0+sim``), ``system_fingerprint`` (``sardeenz-sim-<port>``) and ``GET /sim/state``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import re
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from types import FrameType
from typing import Any, Final, TextIO
from urllib.parse import parse_qs
from uuid import uuid4

import orjson
import prometheus_client as prom
import uvicorn

from sardeenz.asgi import Message, Receive, Scope, Send

__all__ = [
    "SIM_VERSION",
    "MemoryPlan",
    "SimConfig",
    "completion_text",
    "count_prompt_tokens",
    "main",
    "parse_args",
    "plan_memory",
    "render_chat_prompt",
]

SIM_VERSION: Final = "0.0.0+sim"
ENGINE_CORE_TITLE: Final = "VLLM::EngineCore"
"""What vLLM names its engine process; Linux keeps 15 bytes: ``VLLM::EngineCor``."""

_GIB: Final = 1 << 30
_KV_BLOCK_TOKENS: Final = 16
_WEIGHTS_SHARE: Final = 0.60
_GRAPHS_SHARE: Final = 0.03
_WEIGHT_BYTES_PER_KV_BYTE: Final = 131_072
_DEFAULT_MAX_TOKENS: Final = 16
_MAX_BODY_BYTES: Final = 64 * 2**20
_SLEEP_SECONDS: Final = 0.05
_GRACEFUL_SHUTDOWN_SECONDS: Final = 5
_CHILD_STOP_SECONDS: Final = 2.0
_CHILD_EXIT_GRACE_SECONDS: Final = 0.3
_STATS_INTERVAL_SECONDS: Final = 10.0
_ACCESS_FLUSH_SECONDS: Final = 0.1
_EARLY_TOLERANCE: Final = 0.001
"""A token due within 1 ms is sent now: uvloop timers have millisecond resolution."""

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]


# --------------------------------------------------------------------------- text


_TOKENS: list[bytes] = []


def _token_bytes(n: int) -> list[bytes]:
    """Token texts ``tok0``, `` tok1``, ... as bytes, grown once and shared by all requests."""
    while len(_TOKENS) < n:
        i = len(_TOKENS)
        _TOKENS.append(f"tok{i}".encode() if i == 0 else f" tok{i}".encode())
    return _TOKENS


def completion_text(n: int) -> str:
    """The exact text of an ``n``-token reply: ``"tok0 tok1 ... tok{n-1}"``."""
    return b"".join(_token_bytes(n)[:n]).decode()


def count_prompt_tokens(text: str) -> int:
    """Prompt tokens of a text: whitespace-separated words, at least one (the BOS token)."""
    return max(1, len(text.split()))


def _message_text(content: object) -> str | None:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if not isinstance(part, dict):
                return None
            text = part.get("text")
            if part.get("type") == "text" and isinstance(text, str):
                texts.append(text)
        return " ".join(texts)
    return None


def render_chat_prompt(messages: Sequence[object]) -> str | None:
    """The simulated chat template: ``"role: content\\n"`` per message, then ``"assistant:"``.

    Returns None when ``messages`` is not a list of ``{"role", "content"}`` objects.
    """
    lines: list[str] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return None
        text = _message_text(message.get("content"))
        if text is None:
            return None
        lines.append(f"{message['role']}: {text}\n")
    lines.append("assistant:")
    return "".join(lines)


def _token_ids(text: str) -> list[int]:
    """Stable fake token ids (CRC32 of each word), consistent with the token count."""
    words = text.split()
    if not words:
        return [1]
    return [256 + zlib.crc32(w.encode()) % 50_000 for w in words]


# --------------------------------------------------------------------------- config


def _human_int(text: str) -> int:
    """Parse ``4096``, ``4k`` (x1000) or ``4K`` (x1024) like vLLM's ``--max-model-len``."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kKmMgG]?)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"invalid integer value: {text!r}")
    number, suffix = float(m.group(1)), m.group(2)
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    value = int(number * scale[suffix])
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


def _positive(text: str) -> float:
    value = _non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _fraction(text: str) -> float:
    value = _positive(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1]: {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """vLLM-like flags; argparse errors (exit 2) on anything unknown, as vLLM does."""
    p = argparse.ArgumentParser(
        prog="sardeenz sim-engine",
        description="Simulated vLLM OpenAI-compatible server (no GPU, no model weights).",
        allow_abbrev=False,
    )
    p.add_argument("--model", required=True, help="model name or path (only echoed)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_port, required=True)
    p.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        metavar="NAME",
        help="names accepted in requests; the first is used in replies (default: --model)",
    )
    p.add_argument("--load-seconds", type=_non_negative, default=1.0)
    p.add_argument("--ttft-ms", type=_non_negative, default=20.0)
    p.add_argument("--itl-ms", type=_non_negative, default=5.0)
    p.add_argument("--memory-gib", type=_positive, default=4.0, help="simulated GPU footprint")
    p.add_argument("--max-model-len", type=_human_int, default=4096)
    p.add_argument("--gpu-memory-utilization", type=_fraction, default=None)
    p.add_argument("--enable-sleep-mode", action="store_true")
    # Accepted and echoed like vLLM's flag, so the pre-Ampere rule is visible end to end.
    p.add_argument("--attention-backend", default=None)
    p.add_argument(
        "--wake-ms",
        type=_non_negative,
        default=None,
        help="time a wake-up takes (default: load-seconds/10, at most 500 ms)",
    )
    p.add_argument(
        "--fail-after-load",
        action="store_true",
        help="fail like vLLM with a KV cache too small for max-model-len",
    )
    p.add_argument("--disable-uvicorn-access-log", action="store_true")
    return p


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The parsed command line, in seconds and GiB."""

    model: str
    host: str
    port: int
    served_model_names: tuple[str, ...]
    load_seconds: float
    ttft_s: float
    itl_s: float
    memory_gib: float
    max_model_len: int
    gpu_memory_utilization: float | None
    enable_sleep_mode: bool
    wake_s: float
    fail_after_load: bool
    access_log: bool
    non_default_args: dict[str, object] = field(default_factory=dict)

    @property
    def served_name(self) -> str:
        return self.served_model_names[0]


def parse_args(argv: Sequence[str] | None = None) -> SimConfig:
    """Parse flags; raises SystemExit like argparse (2 on errors, 0 for ``--help``)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    names: list[str] = ns.served_model_name or [ns.model]
    wake_ms: float = ns.wake_ms if ns.wake_ms is not None else min(500.0, ns.load_seconds * 100)
    non_default = {k: v for k, v in vars(ns).items() if parser.get_default(k) != v}
    return SimConfig(
        model=ns.model,
        host=ns.host,
        port=ns.port,
        served_model_names=tuple(names),
        load_seconds=ns.load_seconds,
        ttft_s=ns.ttft_ms / 1000,
        itl_s=ns.itl_ms / 1000,
        memory_gib=ns.memory_gib,
        max_model_len=ns.max_model_len,
        gpu_memory_utilization=ns.gpu_memory_utilization,
        enable_sleep_mode=ns.enable_sleep_mode,
        wake_s=wake_ms / 1000,
        fail_after_load=ns.fail_after_load,
        access_log=not ns.disable_uvicorn_access_log,
        non_default_args=non_default,
    )


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Where the simulated GPU footprint goes, with vLLM's derived KV numbers."""

    total_gib: float
    weights_gib: float
    graphs_gib: float
    kv_gib: float
    kv_bytes_per_token: int
    kv_tokens: int
    max_model_len: int

    @property
    def max_concurrency(self) -> float:
        return self.kv_tokens / self.max_model_len

    @property
    def fits(self) -> bool:
        """Whether one request of ``max_model_len`` tokens fits (else vLLM refuses to start)."""
        return self.kv_tokens >= self.max_model_len

    @property
    def needed_kv_gib(self) -> float:
        return self.max_model_len * self.kv_bytes_per_token / _GIB

    def tokens_for(self, kv_gib: float) -> int:
        blocks = int(kv_gib * _GIB / self.kv_bytes_per_token) // _KV_BLOCK_TOKENS
        return blocks * _KV_BLOCK_TOKENS


def plan_memory(memory_gib: float, max_model_len: int) -> MemoryPlan:
    """Split ``memory_gib`` like a real load: weights 60 %, graphs 3 %, KV cache the rest."""
    weights = round(memory_gib * _WEIGHTS_SHARE, 4)
    graphs = round(memory_gib * _GRAPHS_SHARE, 2)
    kv = max(0.0, memory_gib - weights - graphs)
    per_token = max(64, int(weights * _GIB) // _WEIGHT_BYTES_PER_KV_BYTE)
    blocks = int(kv * _GIB / per_token) // _KV_BLOCK_TOKENS
    return MemoryPlan(
        total_gib=memory_gib,
        weights_gib=weights,
        graphs_gib=graphs,
        kv_gib=kv,
        kv_bytes_per_token=per_token,
        kv_tokens=blocks * _KV_BLOCK_TOKENS,
        max_model_len=max_model_len,
    )


# --------------------------------------------------------------------------- logging


@functools.cache
def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


class VllmLog:
    """Writes lines exactly as vLLM 0.14 does without colours.

    ``(TAG pid=N) LEVEL MM-DD HH:MM:SS [file.py:LINE] message``; a multi-line message is
    re-prefixed on every line and joined with ``\\r\\n`` (vLLM's NewLineFormatter), and
    every write is flushed because the supervisor tails the log file while we run.
    Writes are small and rare (never per token), so they stay on the event loop thread.
    """

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out = out
        self.err = err
        self.api_tag = f"APIServer pid={os.getpid()}"
        self.core_tag = "EngineCore_DP0 pid=0"
        self._access: list[str] = []
        self._access_flush: asyncio.TimerHandle | None = None

    def set_core_pid(self, pid: int) -> None:
        self.core_tag = f"EngineCore_DP0 pid={pid}"

    def _write(self, stream: TextIO, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            stream.write(text)
            stream.flush()

    def line(self, tag: str, level: str, src: str, message: str) -> None:
        prefix = f"({tag}) {level} {time.strftime('%m-%d %H:%M:%S')} [{src}] "
        text = prefix + ("\r\n" + prefix).join(message.split("\n")) + "\n"
        if self._access:  # keep access lines in order with everything else on stdout
            text = "".join(self._access) + text
            self._access.clear()
        self._write(self.out, text)

    def access(self, scope: Scope, status: int) -> None:
        """uvicorn's access line, at a fraction of its cost: buffered, flushed within 0.1 s.

        uvicorn's own access logger (the logging module plus a flush per request) costs
        about as much as the whole request here; benchmarks hit this server hard.
        """
        client = scope.get("client")
        query = scope.get("query_string", b"")
        path = scope["path"] + ("?" + query.decode("latin-1") if query else "")
        self._access.append(
            f"INFO:     {client[0] if client else ''}:{client[1] if client else ''} - "
            f'"{scope["method"]} {path} HTTP/{scope["http_version"]}" {status} '
            f"{_phrase(status)}\n"
        )
        if self._access_flush is None:
            loop = asyncio.get_running_loop()
            self._access_flush = loop.call_later(_ACCESS_FLUSH_SECONDS, self.flush_access)

    def flush_access(self) -> None:
        if self._access_flush is not None:
            self._access_flush.cancel()
            self._access_flush = None
        if self._access:
            text = "".join(self._access)
            self._access.clear()
            self._write(self.out, text)

    def api(self, src: str, message: str, level: str = "INFO") -> None:
        self.line(self.api_tag, level, src, message)

    def core(self, src: str, message: str, level: str = "INFO") -> None:
        self.line(self.core_tag, level, src, message)

    def raw(self, tag: str, text: str) -> None:
        """Unformatted stderr text (a traceback Python prints itself), tagged per line."""
        self._write(self.err, "".join(f"({tag}) {ln}\n" for ln in text.rstrip("\n").split("\n")))


# --------------------------------------------------------------------------- metrics


_TTFT_BUCKETS: Final = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
_E2E_BUCKETS: Final = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
FINISH_REASONS: Final = ("stop", "length", "abort")
_SLEEP_STATES: Final = ("awake", "weights_offloaded", "discard_all")


class SimMetrics:
    """vLLM's metric names and labels (``model_name``, ``engine="0"``) in a private registry.

    A private registry keeps this process's output exactly what vLLM exposes (no
    ``process_*``/``python_*`` defaults) and never collides with other registries.
    """

    def __init__(self, model_name: str) -> None:
        self.registry = prom.CollectorRegistry(auto_describe=True)
        reg = self.registry
        labels = ["model_name", "engine"]
        values = (model_name, "0")
        self.running = prom.Gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            labels,
            registry=reg,
        ).labels(*values)
        self.waiting = prom.Gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            labels,
            registry=reg,
        ).labels(*values)
        self.kv_usage = prom.Gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            labels,
            registry=reg,
        ).labels(*values)
        sleep_state = prom.Gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
            "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
            "sleep level 2.",
            [*labels, "sleep_state"],
            registry=reg,
        )
        self.sleep_state = {s: sleep_state.labels(*values, s) for s in _SLEEP_STATES}
        self.prompt_tokens = prom.Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=reg
        ).labels(*values)
        self.generation_tokens = prom.Counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            labels,
            registry=reg,
        ).labels(*values)
        success = prom.Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=reg,
        )
        self.success = {r: success.labels(*values, r) for r in FINISH_REASONS}
        self.ttft = prom.Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            buckets=_TTFT_BUCKETS,
            registry=reg,
        ).labels(*values)
        self.e2e = prom.Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            buckets=_E2E_BUCKETS,
            registry=reg,
        ).labels(*values)
        self.wakeups = prom.Counter(
            "sardeenz_sim_wakeups",
            "Simulated engine only: completed wake-ups.",
            labels,
            registry=reg,
        ).labels(*values)
        self.sleeps = prom.Counter(
            "sardeenz_sim_sleeps",
            "Simulated engine only: times the engine fell asleep.",
            labels,
            registry=reg,
        ).labels(*values)
        self.set_sleep_state(None)

    def set_sleep_state(self, level: int | None) -> None:
        self.sleep_state["awake"].set(1 if level is None else 0)
        self.sleep_state["weights_offloaded"].set(1 if level == 1 else 0)
        self.sleep_state["discard_all"].set(1 if level == 2 else 0)

    def render(self) -> bytes:
        return prom.generate_latest(self.registry)


# --------------------------------------------------------------------------- HTTP helpers


_JSON_CT: Final = (b"content-type", b"application/json")
_SSE_START: Final[Message] = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")],
}
_EMPTY_200: Final[Message] = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-length", b"0")],
}
_EMPTY_BODY: Final[Message] = {"type": "http.response.body", "body": b"", "more_body": False}
_DONE: Final = b"data: [DONE]\n\n"


async def _respond(send: Send, status: int, body: bytes, content_type: bytes = b"") -> None:
    headers = [(b"content-type", content_type)] if content_type else [_JSON_CT]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _respond_empty(send: Send) -> None:
    await send(_EMPTY_200)
    await send(_EMPTY_BODY)


def _error_body(message: str, err_type: str, code: int, param: str | None = None) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": err_type, "param": param, "code": code}}
    )


class _RequestError(Exception):
    """A client error to report in OpenAI shape (status, message, type, param)."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        err_type: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param

    async def send_to(self, send: Send) -> None:
        body = _error_body(self.message, self.err_type, self.status, self.param)
        await _respond(send, self.status, body)


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None when the client went away first."""
    message = await receive()
    if message["type"] == "http.disconnect":
        return None
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    chunks = [body]
    size = len(body)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > _MAX_BODY_BYTES:
            raise _RequestError(
                f"Request body larger than {_MAX_BODY_BYTES} bytes", 413, "RequestTooLarge"
            )
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _read_json(receive: Receive) -> dict[str, Any] | None:
    body = await _read_body(receive)
    if body is None:
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _RequestError(f"JSON decode error: {exc}") from None
    if not isinstance(data, dict):
        raise _RequestError("Input should be a valid JSON object")
    return data


# --------------------------------------------------------------------------- engine


class _Gen:
    """One generation request's bookkeeping (slots: hot path)."""

    __slots__ = (
        "admitted",
        "admitted_at",
        "complete",
        "disconnected",
        "emitted",
        "finish_reason",
        "finished",
        "max_tokens",
        "prompt_tokens",
        "rid",
        "t0",
    )

    def __init__(
        self, rid: str, prompt_tokens: int, max_tokens: int, finish_reason: str, t0: float
    ) -> None:
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.finish_reason = finish_reason
        self.t0 = t0
        self.admitted = False
        self.admitted_at = t0
        self.emitted = 0
        self.complete = False
        """The response is (about to be) complete: a disconnect now is not an abort."""
        self.finished = False
        """Metrics were recorded (exactly once per request)."""
        self.disconnected = False


async def _watch_disconnect(receive: Receive, task: asyncio.Task[Any], gen: _Gen) -> None:
    """Cancel the request's task as soon as its client disconnects (vLLM aborts it too).

    uvicorn also answers ``http.disconnect`` once the response is complete, so a
    completed request (``gen.complete``) is left alone.
    """
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not gen.complete:
                gen.disconnected = True
                task.cancel()
            return


class SimEngine:
    """The ASGI application and the simulated engine state behind it.

    A raw ASGI callable rather than Starlette/FastAPI: this server is the upstream in
    proxy benchmarks with hundreds of concurrent streams, so each request is one
    dict lookup for routing, pre-serialised byte templates for SSE chunks and orjson
    for everything else.
    """

    def __init__(self, cfg: SimConfig, plan: MemoryPlan, log: VllmLog, dev_mode: bool) -> None:
        self.cfg = cfg
        self.plan = plan
        self.log = log
        self.dev_mode = dev_mode
        self.sleep_enabled = cfg.enable_sleep_mode and dev_mode
        self.metrics = SimMetrics(cfg.served_name)
        self.model_json = orjson.dumps(cfg.served_name)
        self.fingerprint = f"sardeenz-sim-{cfg.port}"
        self.names = frozenset(cfg.served_model_names)
        self.engine_core_pid: int | None = None
        self.dead = False
        self.server: uvicorn.Server | None = None
        self.created = int(time.time())
        # scheduler state
        self.inflight = 0
        self.running = 0
        self.waiting = 0
        self.kv_reserved = 0
        self.tokens_prompt_window = 0
        self.tokens_gen_window = 0
        # sleep state
        self.awake = asyncio.Event()
        self.awake.set()
        self.sleeping_tags: set[str] = set()
        self.sleep_level: int | None = None
        self.sleep_lock = asyncio.Lock()
        self.wakeups = 0
        self._stats_task: asyncio.Task[None] | None = None
        self.routes: dict[str, dict[str, Handler]] = {
            "/health": {"GET": self._health},
            "/ping": {"GET": self._health, "POST": self._health},
            "/version": {"GET": self._version},
            "/load": {"GET": self._load},
            "/metrics": {"GET": self._metrics},
            "/tokenize": {"POST": self._tokenize},
            "/v1/models": {"GET": self._models},
            "/v1/completions": {"POST": self._completions},
            "/v1/chat/completions": {"POST": self._chat_completions},
            "/sim/state": {"GET": self._sim_state},
        }
        if self.sleep_enabled:
            self.routes["/sleep"] = {"POST": self._sleep}
            self.routes["/wake_up"] = {"POST": self._wake_up}
            self.routes["/is_sleeping"] = {"GET": self._is_sleeping}

    # -- ASGI entry -----------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            if self.cfg.access_log:
                send = self._logging_send(scope, send)
            methods = self.routes.get(scope["path"])
            if methods is None:
                await _respond(send, 404, b'{"detail":"Not Found"}')
                return
            handler = methods.get(scope["method"])
            if handler is None:
                await _respond(send, 405, b'{"detail":"Method Not Allowed"}')
                return
            try:
                await handler(scope, receive, send)
            except _RequestError as exc:
                await exc.send_to(send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    def _logging_send(self, scope: Scope, send: Send) -> Send:
        log = self.log

        async def logging_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                log.access(scope, message["status"])
            await send(message)

        return logging_send

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._stats_task = asyncio.get_running_loop().create_task(self._stats_loop())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._stats_task is not None:
                    self._stats_task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._stats_task
                self.log.flush_access()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- small endpoints --------------------------------------------------------------

    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.dead:
            await _respond(send, 503, b"")
        else:
            await _respond_empty(send)

    async def _version(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _respond(send, 200, orjson.dumps({"version": SIM_VERSION}))

    async def _load(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _respond(send, 200, orjson.dumps({"server_load": self.inflight}))

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _respond(send, 200, self.metrics.render(), prom.CONTENT_TYPE_LATEST.encode())

    async def _models(self, scope: Scope, receive: Receive, send: Send) -> None:
        data = [
            {
                "id": name,
                "object": "model",
                "created": self.created,
                "owned_by": "vllm",
                "root": self.cfg.model,
                "parent": None,
                "max_model_len": self.cfg.max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{uuid4().hex}",
                        "object": "model_permission",
                        "created": self.created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
            for name in self.cfg.served_model_names
        ]
        await _respond(send, 200, orjson.dumps({"object": "list", "data": data}))

    def current_memory_gib(self) -> float:
        """The simulated footprint now: graphs always, weights and KV unless asleep."""
        mem = self.plan.graphs_gib
        if "weights" not in self.sleeping_tags:
            mem += self.plan.weights_gib
        if "kv_cache" not in self.sleeping_tags:
            mem += self.plan.kv_gib
        return round(mem, 4)

    async def _sim_state(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = {
            "simulated": True,
            "model": self.cfg.model,
            "served_model_names": list(self.cfg.served_model_names),
            "memory_gib": self.current_memory_gib(),
            "memory_gib_awake": self.plan.total_gib,
            "weights_gib": self.plan.weights_gib,
            "kv_cache_gib": self.plan.kv_gib,
            "cuda_graph_gib": self.plan.graphs_gib,
            "kv_cache_tokens": self.plan.kv_tokens,
            "max_model_len": self.cfg.max_model_len,
            "sleep_mode_enabled": self.sleep_enabled,
            "sleeping": bool(self.sleeping_tags),
            "sleep_level": self.sleep_level,
            "sleeping_tags": sorted(self.sleeping_tags),
            "wakeups": self.wakeups,
            "num_requests_running": self.running,
            "num_requests_waiting": self.waiting,
            "pid": os.getpid(),
            "engine_core_pid": self.engine_core_pid,
        }
        await _respond(send, 200, orjson.dumps(state))

    async def _tokenize(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_json(receive)
        if body is None:
            return
        self._check_model(body)
        if "messages" in body:
            text = self._chat_text(body)
            tokens = _token_ids(text)
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, str):
                tokens = _token_ids(prompt)
            else:
                raise _RequestError("'prompt' must be a string", param="prompt")
        result = {
            "count": len(tokens),
            "max_model_len": self.cfg.max_model_len,
            "tokens": tokens,
            "token_strs": None,
        }
        await _respond(send, 200, orjson.dumps(result))

    # -- request validation -------------------------------------------------------------

    def _check_model(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if model is not None and model not in self.names:
            raise _RequestError(
                f"The model `{model}` does not exist.", 404, "NotFoundError", "model"
            )

    def _chat_text(self, body: dict[str, Any]) -> str:
        messages = body.get("messages")
        text = render_chat_prompt(messages) if isinstance(messages, list) and messages else None
        if text is None:
            raise _RequestError(
                "'messages' must be a non-empty list of {role, content} objects",
                param="messages",
            )
        return text

    def _new_gen(
        self, body: dict[str, Any], rid: str, prompt_tokens: int, max_tokens: object
    ) -> _Gen:
        """Validate what vLLM validates before scheduling; may raise a 4xx error."""
        if self.dead:
            raise _RequestError(
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                500,
                "InternalServerError",
            )
        n = body.get("n", 1)
        if n != 1:
            raise _RequestError("The simulated engine supports only n=1", param="n")
        limit = self.cfg.max_model_len
        if prompt_tokens >= limit:
            raise _RequestError(
                f"This model's maximum context length is {limit} tokens. However, your "
                f"request has {prompt_tokens} input tokens. Please reduce the length of the "
                "input messages.",
                param="messages",
            )
        if max_tokens is None:
            count, reason = min(_DEFAULT_MAX_TOKENS, limit - prompt_tokens), "stop"
        elif isinstance(max_tokens, int) and not isinstance(max_tokens, bool):
            if max_tokens < 1:
                raise _RequestError(
                    f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens"
                )
            if prompt_tokens + max_tokens > limit:
                raise _RequestError(
                    f"This model's maximum context length is {limit} tokens. However, you "
                    f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
                    f"messages, {max_tokens} in the completion). Please reduce the length of "
                    "the messages or completion.",
                    param="max_tokens",
                )
            count, reason = max_tokens, "length"
        else:
            raise _RequestError("max_tokens must be an integer", param="max_tokens")
        loop = asyncio.get_running_loop()
        return _Gen(rid, prompt_tokens, count, reason, loop.time())

    @staticmethod
    def _stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
        stream = bool(body.get("stream", False))
        options = body.get("stream_options")
        usage = isinstance(options, dict) and bool(options.get("include_usage", False))
        return stream, usage

    # -- completions ----------------------------------------------------------------

    async def _completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_json(receive)
        if body is None:
            return
        self._check_model(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        if isinstance(prompt, str):
            prompt_tokens = count_prompt_tokens(prompt)
        elif (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            prompt_tokens = len(prompt)
        else:
            raise _RequestError(
                "'prompt' must be a string, a list of token ids, or a list of one of those "
                "(batched prompts are not simulated)",
                param="prompt",
            )
        gen = self._new_gen(body, f"cmpl-{uuid4().hex}-0", prompt_tokens, body.get("max_tokens"))
        stream, include_usage = self._stream_flags(body)
        created = int(time.time())
        head = (
            b'{"id":"'
            + gen.rid[:-2].encode()
            + b'","object":"text_completion","created":'
            + str(created).encode()
            + b',"model":'
            + self.model_json
        )
        if stream:
            prefix = b"data: " + head + b',"choices":[{"index":0,"text":"'
            suffix = b'","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
            final = (
                b"data: " + head + b',"choices":[{"index":0,"text":"","logprobs":null,'
                b'"finish_reason":"' + gen.finish_reason.encode() + b'","stop_reason":null}]}\n\n'
            )
            await self._serve(
                receive,
                send,
                gen,
                self._stream(
                    send, gen, b"", prefix, suffix, final, head if include_usage else None
                ),
            )
        else:
            await self._serve(receive, send, gen, self._whole(send, gen, head, chat=False))

    async def _chat_completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_json(receive)
        if body is None:
            return
        self._check_model(body)
        prompt_tokens = count_prompt_tokens(self._chat_text(body))
        max_tokens = body.get("max_completion_tokens")
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        gen = self._new_gen(body, f"chatcmpl-{uuid4().hex}", prompt_tokens, max_tokens)
        stream, include_usage = self._stream_flags(body)
        created = int(time.time())
        head = (
            b'{"id":"'
            + gen.rid.encode()
            + b'","object":"chat.completion'
            + (b".chunk" if stream else b"")
            + b'","created":'
            + str(created).encode()
            + b',"model":'
            + self.model_json
        )
        if stream:
            role = (
                b"data: " + head + b',"choices":[{"index":0,"delta":{"role":"assistant",'
                b'"content":""},"logprobs":null,"finish_reason":null}]}\n\n'
            )
            prefix = b"data: " + head + b',"choices":[{"index":0,"delta":{"content":"'
            suffix = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
            final = (
                b"data: " + head + b',"choices":[{"index":0,"delta":{},"logprobs":null,'
                b'"finish_reason":"' + gen.finish_reason.encode() + b'","stop_reason":null}]}\n\n'
            )
            await self._serve(
                receive,
                send,
                gen,
                self._stream(
                    send, gen, role, prefix, suffix, final, head if include_usage else None
                ),
            )
        else:
            await self._serve(receive, send, gen, self._whole(send, gen, head, chat=True))

    # -- generation -----------------------------------------------------------------

    async def _serve(self, receive: Receive, send: Send, gen: _Gen, work: Awaitable[None]) -> None:
        """Run one generation, aborting it (vLLM-style) if the client disconnects."""
        task = asyncio.current_task()
        assert task is not None
        watcher = asyncio.get_running_loop().create_task(_watch_disconnect(receive, task, gen))
        self.inflight += 1
        try:
            await work
            self._finish(gen, gen.finish_reason)
        except asyncio.CancelledError:
            self._finish(gen, "abort")
            self.log.api("async_llm.py:434", f"Aborted request {gen.rid}.")
            if gen.disconnected and task.uncancel() == 0:
                return  # our own cancellation: the client is gone, nothing to re-raise
            raise
        finally:
            gen.complete = True
            watcher.cancel()
            self.inflight -= 1

    async def _admit(self, gen: _Gen) -> None:
        """Queue while asleep (vLLM keeps requests waiting), then reserve KV and run."""
        if not self.awake.is_set():
            self.waiting += 1
            self.metrics.waiting.set(self.waiting)
            try:
                await self.awake.wait()
            finally:
                self.waiting -= 1
                self.metrics.waiting.set(self.waiting)
        gen.admitted = True
        gen.admitted_at = asyncio.get_running_loop().time()
        self.running += 1
        self.kv_reserved += gen.prompt_tokens + gen.max_tokens
        self.metrics.running.set(self.running)
        self.metrics.kv_usage.set(min(1.0, self.kv_reserved / max(1, self.plan.kv_tokens)))

    def _finish(self, gen: _Gen, reason: str) -> None:
        if gen.finished:
            return
        gen.finished = True
        m = self.metrics
        if gen.admitted:
            self.running -= 1
            self.kv_reserved -= gen.prompt_tokens + gen.max_tokens
            m.running.set(self.running)
            m.kv_usage.set(min(1.0, self.kv_reserved / max(1, self.plan.kv_tokens)))
            m.prompt_tokens.inc(gen.prompt_tokens)
            self.tokens_prompt_window += gen.prompt_tokens
        if gen.emitted:
            m.generation_tokens.inc(gen.emitted)
            self.tokens_gen_window += gen.emitted
        m.success[reason].inc()
        if reason != "abort":
            m.e2e.observe(asyncio.get_running_loop().time() - gen.t0)

    async def _paused(self) -> float:
        """Wait out a sleep of the engine; returns how long generation was paused."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        await self.awake.wait()
        return loop.time() - start

    async def _stream(
        self,
        send: Send,
        gen: _Gen,
        lead: bytes,
        prefix: bytes,
        suffix: bytes,
        final: bytes,
        usage_head: bytes | None,
    ) -> None:
        """SSE: first chunk after TTFT, then one per ITL, on an absolute schedule.

        Tokens already due are written in one ``send`` (as a busy real server does), so
        timer jitter or a slow client never makes the stream drift or fall behind.
        """
        loop = asyncio.get_running_loop()
        await send(_SSE_START)
        await self._admit(gen)
        n = gen.max_tokens
        tokens = _token_bytes(n)
        itl = self.cfg.itl_s
        due = gen.admitted_at + self.cfg.ttft_s
        emitted = 0
        while True:
            if not self.awake.is_set():
                due += await self._paused()
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            now = loop.time()
            if emitted:
                now += _EARLY_TOLERANCE
            elif due > now:
                continue
            parts: list[bytes] = []
            if not emitted:
                self.metrics.ttft.observe(now - gen.t0)
                if lead:
                    parts.append(lead)
            while emitted < n and due <= now:
                parts.append(prefix + tokens[emitted] + suffix)
                emitted += 1
                due += itl
            gen.emitted = emitted
            if emitted >= n:
                break
            if parts:
                await send(
                    {"type": "http.response.body", "body": b"".join(parts), "more_body": True}
                )
        parts.append(final)
        if usage_head is not None:
            parts.append(
                b"data: "
                + usage_head
                + b',"choices":[],"usage":'
                + self._usage_json(gen)
                + b"}\n\n"
            )
        parts.append(_DONE)
        gen.complete = True
        await send({"type": "http.response.body", "body": b"".join(parts), "more_body": False})

    def _usage_json(self, gen: _Gen) -> bytes:
        return orjson.dumps(
            {
                "prompt_tokens": gen.prompt_tokens,
                "total_tokens": gen.prompt_tokens + gen.max_tokens,
                "completion_tokens": gen.max_tokens,
            }
        )

    async def _whole(self, send: Send, gen: _Gen, head: bytes, chat: bool) -> None:
        """Non-streamed reply after ``ttft + itl * (n - 1)`` of (awake) generation."""
        loop = asyncio.get_running_loop()
        await self._admit(gen)
        n = gen.max_tokens
        ttft, itl = self.cfg.ttft_s, self.cfg.itl_s
        start = gen.admitted_at
        deadline = start + ttft + itl * (n - 1)
        try:
            while True:
                delay = deadline - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self.awake.is_set():
                    break
                paused = await self._paused()
                deadline += paused
                start += paused
        except asyncio.CancelledError:
            elapsed = loop.time() - start - ttft
            gen.emitted = 0 if elapsed < 0 else min(n, int(elapsed / itl) + 1 if itl else n)
            raise
        gen.emitted = n
        self.metrics.ttft.observe(gen.admitted_at - gen.t0 + ttft)
        text = orjson.dumps(completion_text(n))
        fr = gen.finish_reason.encode()
        if chat:
            choice = (
                b'{"index":0,"message":{"role":"assistant","content":'
                + text
                + b',"tool_calls":[]},"logprobs":null,"finish_reason":"'
                + fr
                + b'","stop_reason":null}'
            )
        else:
            choice = (
                b'{"index":0,"text":'
                + text
                + b',"logprobs":null,"finish_reason":"'
                + fr
                + b'","stop_reason":null}'
            )
        body = (
            head
            + b',"choices":['
            + choice
            + b'],"usage":'
            + self._usage_json(gen)
            + b',"system_fingerprint":"'
            + self.fingerprint.encode()
            + b'"}'
        )
        gen.complete = True
        await _respond(send, 200, body)

    # -- sleep mode -----------------------------------------------------------------

    async def _sleep(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /sleep?level=1|2``: free weights and KV cache; requests queue meanwhile."""
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        try:
            level = int(query.get("level", ["1"])[-1])
        except ValueError:
            raise _RequestError("level must be 1 or 2", param="level") from None
        if level not in (1, 2):
            raise _RequestError("level must be 1 or 2", param="level")
        async with self.sleep_lock:
            if self.sleeping_tags:
                self.log.core("executor_base.py:206", "Executor is already sleeping.", "WARNING")
            else:
                started = time.perf_counter()
                self.awake.clear()
                await asyncio.sleep(_SLEEP_SECONDS)
                freed = self.plan.weights_gib + self.plan.kv_gib
                self.sleeping_tags = {"weights", "kv_cache"}
                self.sleep_level = level
                self.metrics.set_sleep_state(level)
                self.metrics.sleeps.inc()
                self.log.core(
                    "gpu_worker.py:117",
                    f"Sleep mode freed {freed:.2f} GiB memory, "
                    f"{self.current_memory_gib():.2f} GiB memory is still in use.",
                )
                self.log.core(
                    "executor_base.py:211",
                    f"It took {time.perf_counter() - started:.6f} seconds to fall asleep.",
                )
        await _respond_empty(send)

    async def _wake_up(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /wake_up[?tags=weights&tags=kv_cache]``: restore memory, release requests."""
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        tags: list[str] | None = query.get("tags") or None
        async with self.sleep_lock:
            if not self.sleeping_tags:
                self.log.core("executor_base.py:219", "Executor is not sleeping.", "WARNING")
            elif tags is not None and any(t not in self.sleeping_tags for t in tags):
                bad = next(t for t in tags if t not in self.sleeping_tags)
                self.log.core(
                    "executor_base.py:225",
                    f"Tag {bad} is not in sleeping tags {_set_repr(self.sleeping_tags)}",
                    "WARNING",
                )
            else:
                started = time.perf_counter()
                waking = set(tags) if tags is not None else set(self.sleeping_tags)
                share = len(waking) / len(self.sleeping_tags)
                await asyncio.sleep(self.cfg.wake_s * share)
                shown = repr(tags) if tags is not None else _set_repr(self.sleeping_tags)
                self.sleeping_tags -= waking
                self.log.core(
                    "executor_base.py:232",
                    f"It took {time.perf_counter() - started:.6f} seconds to wake up tags {shown}.",
                )
                if not self.sleeping_tags:
                    self.sleep_level = None
                    self.wakeups += 1
                    self.metrics.wakeups.inc()
                    self.metrics.set_sleep_state(None)
                    self.awake.set()
        await _respond_empty(send)

    async def _is_sleeping(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _respond(send, 200, orjson.dumps({"is_sleeping": bool(self.sleeping_tags)}))

    # -- periodic stats -------------------------------------------------------------

    async def _stats_loop(self) -> None:
        """vLLM's 10-second throughput line, only while there is something to report."""
        while True:
            await asyncio.sleep(_STATS_INTERVAL_SECONDS)
            if not (
                self.tokens_prompt_window or self.tokens_gen_window or self.running or self.waiting
            ):
                continue
            usage = 100 * min(1.0, self.kv_reserved / max(1, self.plan.kv_tokens))
            self.log.api(
                "loggers.py:123",
                f"Engine 000: Avg prompt throughput: "
                f"{self.tokens_prompt_window / _STATS_INTERVAL_SECONDS:.1f} tokens/s, "
                f"Avg generation throughput: "
                f"{self.tokens_gen_window / _STATS_INTERVAL_SECONDS:.1f} tokens/s, "
                f"Running: {self.running} reqs, Waiting: {self.waiting} reqs, "
                f"GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: 0.0%",
            )
            self.tokens_prompt_window = 0
            self.tokens_gen_window = 0


def _set_repr(tags: set[str]) -> str:
    """A set as Python prints it, in a stable order (logs are compared in tests)."""
    return "{" + ", ".join(repr(t) for t in sorted(tags)) + "}"


# --------------------------------------------------------------------------- EngineCore


_ENGINE_CORE_CODE: Final = f"""
import ctypes, signal
try:
    ctypes.CDLL(None, use_errno=True).prctl(15, b{ENGINE_CORE_TITLE[:15]!r}, 0, 0, 0)
except Exception:
    pass
signal.signal(signal.SIGINT, signal.SIG_DFL)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
while True:
    signal.pause()
"""
"""The EngineCore child: names itself like vLLM's (PR_SET_NAME) and idles until signalled.

It deliberately does not watch its parent: a SIGKILLed vLLM server orphans its
EngineCore too, and the supervisor must clean up by process group.
"""


def spawn_engine_core() -> subprocess.Popen[bytes]:
    """Start the idle EngineCore child (isolated, no site import: it starts in ~20 ms)."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _ENGINE_CORE_CODE],
        stdin=subprocess.DEVNULL,
        close_fds=True,
    )


# --------------------------------------------------------------------------- server


_SRC = "/opt/sardeenz/sim/vllm"


def _fmt_int(n: int) -> str:
    return f"{n:,}"


class SimServer:
    """Start-up, serving and shutdown of one simulated engine process."""

    def __init__(self, cfg: SimConfig, log: VllmLog) -> None:
        self.cfg = cfg
        self.log = log
        self.plan = plan_memory(cfg.memory_gib, cfg.max_model_len)
        self.child: subprocess.Popen[bytes] | None = None
        self.engine: SimEngine | None = None
        self.stop_requested = False
        self.stopping = False
        self.core_died = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._pidfd: int | None = None
        self._child_waiter: asyncio.Task[None] | None = None

    # -- signals ------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM/SIGINT outside uvicorn: stop loading (uvicorn handles them while serving).

        Also absorbs the signal uvicorn re-raises after its graceful shutdown, so the
        process exits 0 instead of dying from that signal.
        """
        self.stop_requested = True
        if self._loop is not None and self._stop_event is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop_event.set)

    async def _wait_or_stop(self, seconds: float) -> bool:
        """Sleep ``seconds`` of loading; True when a stop was requested meanwhile."""
        assert self._stop_event is not None
        if self._stop_event.is_set():
            return True
        if seconds <= 0:
            return False
        try:
            await asyncio.wait_for(self._stop_event.wait(), seconds)
        except TimeoutError:
            return False
        return True

    # -- EngineCore watch ---------------------------------------------------------------

    def _watch_child(self, child: subprocess.Popen[bytes]) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._pidfd = os.pidfd_open(child.pid)
            loop.add_reader(self._pidfd, self._on_child_exit)
        except (AttributeError, OSError):  # no pidfd (old kernel): a thread waits instead
            self._pidfd = None
            self._child_waiter = loop.create_task(self._wait_child(child))

    async def _wait_child(self, child: subprocess.Popen[bytes]) -> None:
        await asyncio.to_thread(child.wait)
        self._on_child_exit()

    def _unwatch_child(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def _shutdown_requested(self) -> bool:
        server = self.engine.server if self.engine is not None else None
        return self.stopping or self.stop_requested or (server is not None and server.should_exit)

    def _on_child_exit(self) -> None:
        """The EngineCore exited: decide a moment later whether that was expected.

        A SIGTERM/SIGINT to the process group (how the supervisor stops engines, and
        what Ctrl-C does) reaches the EngineCore and this process at the same time, and
        the child may exit before our own signal handler has run: waiting a little
        tells a group stop apart from a lone EngineCore death.
        """
        self._unwatch_child()
        if self._shutdown_requested() or self.core_died:
            return
        asyncio.get_running_loop().call_later(_CHILD_EXIT_GRACE_SECONDS, self._on_core_death)

    def _on_core_death(self) -> None:
        """The EngineCore died under us: like vLLM, report it and shut the server down."""
        if self._shutdown_requested() or self.core_died:
            return
        self.core_died = True
        self.log.api(
            "core_client.py:564",
            "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
            "ERROR",
        )
        if self.engine is not None:
            self.engine.dead = True
            if self.engine.server is not None:
                self.engine.server.should_exit = True
        if self._stop_event is not None:
            self._stop_event.set()

    async def _stop_child(self) -> None:
        """Terminate the EngineCore (graceful shutdown), SIGKILL after a grace period."""
        self.stopping = True
        self._unwatch_child()
        child = self.child
        if child is None or child.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            child.terminate()
        try:
            await asyncio.to_thread(child.wait, _CHILD_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await asyncio.to_thread(child.wait)

    # -- start-up ---------------------------------------------------------------------

    def _bind(self) -> socket.socket:
        """Bind the port now but listen only when ready: clients get 'connection refused'."""
        infos = socket.getaddrinfo(
            self.cfg.host, self.cfg.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, kind, proto, _, addr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
        except OSError:
            sock.close()
            raise
        sock.set_inheritable(False)
        return sock

    def _api_traceback(self, frames: list[tuple[str, int, str, str]], error: str) -> None:
        lines = ["Traceback (most recent call last):"]
        for path, lineno, func, code in frames:
            lines.append(f'  File "{path}", line {lineno}, in {func}')
            if code:
                lines.append(f"    {code}")
        lines.append(error)
        self.log.raw(self.log.api_tag, "\n".join(lines))

    def _log_banner(self) -> None:
        cfg = self.cfg
        self.log.api(
            "sim.py:1",
            "Simulated engine (sardeenz sim-engine): not a real vLLM. No GPU is used and "
            "all memory figures are simulated.",
            "WARNING",
        )
        self.log.api("api_server.py:1839", f"vLLM API server version {SIM_VERSION}")
        self.log.api("utils.py:233", f"non-default args: {cfg.non_default_args!r}")
        self.log.api("model.py:547", "Resolved architecture: SimulatedForCausalLM")
        self.log.api("model.py:1510", f"Using max model len {cfg.max_model_len}")

    async def _load(self) -> str:
        """The loading phase, log lines spread over ``--load-seconds``.

        Returns "ready", "stopped" (signal) or "failed" (KV cache too small, or the
        EngineCore died).
        """
        cfg, plan, log = self.cfg, self.plan, self.log
        total = cfg.load_seconds
        loop = asyncio.get_running_loop()
        t0 = loop.time()

        async def until(fraction: float) -> bool:
            return await self._wait_or_stop(t0 + total * fraction - loop.time())

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
            self._log_kv_failure(available)
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
            f"init engine (profile, create kv cache, warmup model) took "
            f"{loop.time() - t0:.2f} seconds",
        )
        if await until(1.0):
            return "stopped"
        log.api(
            "loggers.py:147",
            "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: "
            f"{plan.kv_tokens // _KV_BLOCK_TOKENS}",
        )
        return "stopped" if self.core_died else "ready"

    def _log_kv_failure(self, available: float) -> None:
        """vLLM's KV-cache-too-small failure, root cause first, as the parser expects."""
        cfg, plan = self.cfg, self.plan
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
                f"{_SRC}/v1/engine/core.py",
                699,
                "run_engine_core",
                "engine_core = EngineCoreProc(*args, **kwargs)",
            ),
            (
                f"{_SRC}/v1/engine/core.py",
                498,
                "__init__",
                "super().__init__(vllm_config, executor_class, log_stats,",
            ),
            (
                f"{_SRC}/v1/engine/core.py",
                92,
                "__init__",
                "self._initialize_kv_caches(vllm_config)",
            ),
            (
                f"{_SRC}/v1/engine/core.py",
                199,
                "_initialize_kv_caches",
                "kv_cache_configs = get_kv_cache_configs(vllm_config, kv_cache_specs,",
            ),
            (
                f"{_SRC}/v1/core/kv_cache_utils.py",
                1243,
                "get_kv_cache_configs",
                "check_enough_kv_cache_memory(vllm_config, kv_cache_spec_one_worker,",
            ),
            (
                f"{_SRC}/v1/core/kv_cache_utils.py",
                716,
                "check_enough_kv_cache_memory",
                "raise ValueError(",
            ),
        ]
        tb = ["EngineCore failed to start.", "Traceback (most recent call last):"]
        for path, lineno, func, code in frames:
            tb += [f'  File "{path}", line {lineno}, in {func}', f"    {code}"]
        tb.append(f"ValueError: {message}")
        self.log.core("core.py:708", "\n".join(tb), "ERROR")
        bootstrap = [
            "Process EngineCore_DP0:",
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap',
            "    self.run()",
            '  File "/usr/lib/python3.11/multiprocessing/process.py", line 108, in run',
            "    self._target(*self._args, **self._kwargs)",
            f'  File "{_SRC}/v1/engine/core.py", line 712, in run_engine_core',
            "    raise e",
            *tb[2:],
        ]
        self.log.raw(self.log.core_tag, "\n".join(bootstrap))

    def _log_init_failed(self) -> None:
        self._api_traceback(
            [
                ("<frozen runpy>", 198, "_run_module_as_main", ""),
                ("<frozen runpy>", 88, "_run_code", ""),
                (
                    f"{_SRC}/entrypoints/openai/api_server.py",
                    1953,
                    "<module>",
                    "uvloop.run(run_server(args))",
                ),
                (
                    f"{_SRC}/entrypoints/openai/api_server.py",
                    1884,
                    "run_server",
                    "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)",
                ),
                (
                    f"{_SRC}/entrypoints/openai/api_server.py",
                    1898,
                    "run_server_worker",
                    "async with build_async_engine_client(",
                ),
                (
                    f"{_SRC}/v1/engine/core_client.py",
                    449,
                    "__init__",
                    "with launch_core_engines(vllm_config, executor_class,",
                ),
                (
                    f"{_SRC}/v1/engine/utils.py",
                    729,
                    "launch_core_engines",
                    "wait_for_engine_startup(",
                ),
                (
                    f"{_SRC}/v1/engine/utils.py",
                    782,
                    "wait_for_engine_startup",
                    "raise RuntimeError(",
                ),
            ],
            "RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore': 1}",
        )

    def _dev_mode(self) -> bool:
        """``VLLM_SERVER_DEV_MODE`` parsed as vLLM does: an integer, anything else crashes."""
        return bool(int(os.environ.get("VLLM_SERVER_DEV_MODE", "0")))

    # -- main ---------------------------------------------------------------------

    async def run(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self._log_banner()
        try:
            dev_mode = self._dev_mode()
        except ValueError as exc:
            self._api_traceback(
                [
                    (
                        f"{_SRC}/envs.py",
                        1040,
                        "<lambda>",
                        'bool(int(os.getenv("VLLM_SERVER_DEV_MODE", "0")))',
                    )
                ],
                f"ValueError: {exc}",
            )
            return 1
        try:
            sock = self._bind()
        except OSError as exc:
            self._api_traceback(
                [
                    (
                        f"{_SRC}/entrypoints/openai/api_server.py",
                        1790,
                        "create_server_socket",
                        "sock.bind(addr)",
                    )
                ],
                f"OSError: [Errno {exc.errno}] {exc.strerror}",
            )
            return 1
        try:
            return await self._run_bound(sock, dev_mode)
        finally:
            await self._stop_child()
            sock.close()

    async def _run_bound(self, sock: socket.socket, dev_mode: bool) -> int:
        cfg, log = self.cfg, self.log
        self.child = spawn_engine_core()
        log.set_core_pid(self.child.pid)
        self._watch_child(self.child)
        outcome = await self._load()
        if outcome == "failed" or self.core_died:
            self.stopping = True
            await self._stop_child()
            self._log_init_failed()
            return 1
        if outcome == "stopped":
            log.api("api_server.py:1920", "Shutting down before the engine was ready.")
            return 0
        engine = SimEngine(cfg, self.plan, log, dev_mode)
        engine.engine_core_pid = self.child.pid
        self.engine = engine
        if dev_mode:
            log.api(
                "api_server.py:1580",
                "SECURITY WARNING: Development endpoints are enabled! This should NOT be "
                "used in production!",
                "WARNING",
            )
        if cfg.enable_sleep_mode and not dev_mode:
            log.api(
                "api_server.py:1585",
                "--enable-sleep-mode without VLLM_SERVER_DEV_MODE=1: /sleep, /wake_up and "
                "/is_sleeping are not served.",
                "WARNING",
            )
        log.api("api_server.py:1634", "Supported_tasks: ['generate']")
        url_host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
        log.api("api_server.py:1912", f"Starting vLLM API server 0 on http://{url_host}:{cfg.port}")
        log.api("launcher.py:34", "Available routes are:")
        for path, methods in engine.routes.items():
            log.api("launcher.py:42", f"Route: {path}, Methods: {', '.join(sorted(methods))}")
        try:
            sock.listen(2048)
        except OSError as exc:
            self._api_traceback(
                [
                    (
                        f"{_SRC}/entrypoints/launcher.py",
                        80,
                        "serve_http",
                        "await server.serve(sockets=[sock])",
                    )
                ],
                f"OSError: [Errno {exc.errno}] {exc.strerror}",
            )
            return 1
        config = uvicorn.Config(
            engine,
            http="httptools",
            ws="none",
            lifespan="on",
            access_log=False,  # SimEngine writes the same lines, buffered (much cheaper)
            proxy_headers=False,
            timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
            # vLLM's knob, read the way vLLM reads it (envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE).
            timeout_keep_alive=int(os.environ.get("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "5")),
            log_level="info",
        )
        server = uvicorn.Server(config)
        engine.server = server
        if self.stop_requested:
            server.should_exit = True
        await server.serve(sockets=[sock])
        log.api("launcher.py:101", "Shutting down FastAPI HTTP server.")
        return 1 if self.core_died else 0


def _run(coro: Awaitable[int]) -> int:
    """Run on uvloop (as vLLM and uvicorn[standard] do), plain asyncio as a fallback."""

    async def wrapper() -> int:
        return await coro

    try:
        import uvloop
    except ImportError:
        return asyncio.run(wrapper())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(wrapper())


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m sardeenz.engines.sim`` and ``sardeenz sim-engine``."""
    try:
        cfg = parse_args(argv)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    prom.disable_created_metrics()  # type: ignore[no-untyped-call]  # as vLLM's output
    log = VllmLog(sys.stdout, sys.stderr)
    return _run(SimServer(cfg, log).run())


if __name__ == "__main__":
    raise SystemExit(main())
