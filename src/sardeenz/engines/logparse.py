"""Reading vLLM's own log output: readiness, memory metrics and the root cause of a failure.

vLLM reports how it used GPU memory, and why it died, only in its log; nothing of it is
available over HTTP while it starts. The simulated engine prints the same lines on purpose,
so one parser serves both. Formats follow ``/work/shared/reference/vllm.md`` (vLLM 0.11 to
0.34): a ``LEVEL MM-DD HH:MM:SS [file.py:N]`` prefix, a process tag such as
``(EngineCore_DP0 pid=34)`` either prepended (0.11 to 0.22, ANSI-coloured in 0.11) or part of
the format (0.34), and multi-line messages re-prefixed on every line and joined with ``\\r\\n``.

``VllmLogParser.feed`` runs on every log line of every engine, so it only does substring tests
until a line is known to be interesting; regular expressions are compiled once, here.
Nothing in this module raises on odd input: a log is untrusted text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

from sardeenz.domain import LoadPhase, MemoryMetrics

READY_LINE = "Application startup complete."
"""uvicorn's line, printed once vLLM listens; the log-side readiness signal."""

MAX_ERROR_CHARS = 1000
"""Longest message ``extract_error`` returns: enough for a root cause, short enough for a UI."""

MAX_ERROR_LINES = 2000
"""``extract_error`` looks at no more than this many lines from the end of what it is given."""

_READY_NEEDLE = READY_LINE.rstrip(".")

LOAD_PHASES: tuple[LoadPhase, ...] = ("spawned", "loading weights", "KV cache", "CUDA graphs")
"""A starting engine's phases in order; ``spawned`` lasts until a line opens the next."""

_PHASE_MARKERS: tuple[tuple[LoadPhase, tuple[str, ...]], ...] = (
    ("loading weights", ("Starting to load model", "Loading weights", "Loading safetensors")),
    # "KV cache size:" is GPU's and the CPU build's line; "Available ..." comes first on GPU.
    ("KV cache", ("Available KV cache memory", "KV cache size:", "# GPU blocks")),
    # tqdm's "Capturing CUDA graphs" bar; the "finished" line when the bar is not logged.
    ("CUDA graphs", ("Capturing CUDA graph", "Graph capturing")),
)
_PHASE_RANK = {phase: rank for rank, phase in enumerate(LOAD_PHASES)}

# --- line shape ---------------------------------------------------------------------------

# CSI sequences (colours, cursor moves), OSC sequences (titles, links) and 2-byte escapes.
_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")

_TAG = r"\([A-Za-z_][\w.\-]* pid=\d+\) ?"
_TAG_RE = re.compile(r"\(([A-Za-z_][\w.\-]*) pid=(\d+)\)", re.ASCII)
_LEVELS = "DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL"
# Every part is optional, so this always matches; ``end()`` is where the message starts.
# A process tag may come first (0.11 to 0.22 and, we expect, 0.34) or sit anywhere inside the
# logging prefix. Exactly one space is consumed after ``]`` and after a tag so traceback
# indentation survives. ``LEVEL:`` with padding is uvicorn's own format.
_PREFIX_RE = re.compile(
    rf"(?:{_TAG})?"
    rf"(?:(?P<level>{_LEVELS}) (?:{_TAG})?"
    rf"\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? (?:{_TAG})?"
    rf"(?:\[[^\]\s]+\] ?)?(?:{_TAG})?"
    rf"|(?P<ulevel>{_LEVELS}):\s+)?",
    re.ASCII,
)

# --- startup metrics ----------------------------------------------------------------------

_NUM = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_COUNT = r"(\d[\d,]*)"

_MODEL_LOADING_RE = re.compile(
    rf"Model loading took {_NUM} GiB(?: memory)? and {_NUM} seconds", re.ASCII
)
_LOADING_WEIGHTS_RE = re.compile(rf"Loading weights took {_NUM} seconds", re.ASCII)
_INIT_ENGINE_RE = re.compile(rf"init engine \([^)]*\) took {_NUM} s(?:econds)?\b", re.ASCII)
_GRAPH_RE = re.compile(rf"Graph capturing finished in {_NUM} secs?, took {_NUM} GiB", re.ASCII)
_KV_AVAILABLE_RE = re.compile(rf"Available KV cache memory: {_NUM} GiB", re.ASCII)
_KV_SIZE_RE = re.compile(rf"KV cache size: {_COUNT} tokens", re.ASCII)
_CPU_KV_RE = re.compile(rf"(?:Explicitly|Auto) set \({_NUM}/{_NUM}\) GiB for KV cache", re.ASCII)
_CONCURRENCY_RE = re.compile(
    rf"Maximum concurrency for {_COUNT} tokens per request: {_NUM}x", re.ASCII
)
_VERSION_RE = re.compile(r"vLLM (?:API )?server version ([^\s,]+)")


def strip_ansi(text: str) -> str:
    """Remove terminal escape codes: vLLM 0.11 colours its process tags even in a file."""
    if "\x1b" not in text:
        return text
    return _ANSI_RE.sub("", text)


def load_phase(line: str) -> LoadPhase | None:
    """The load phase a log line opens, if any (ANSI codes and process tags do not matter).

    The one place that knows vLLM's (and the simulated engine's) phase lines: the runner
    keeps the instance's ``loadPhase`` with it and ``models load --wait`` prints it.
    """
    for phase, markers in _PHASE_MARKERS:
        if any(m in line for m in markers):
            return phase
    return None


def later_phase(current: LoadPhase | None, line: str) -> LoadPhase | None:
    """``current``, or the phase ``line`` opens when that one comes after it.

    Phases only move forward: a KV line printed after the graphs (vLLM 0.34 merges the
    KV size into a later line) must not send a progress display back.
    """
    found = load_phase(line)
    if found is None:
        return current
    if current is None or _PHASE_RANK[found] > _PHASE_RANK[current]:
        return found
    return current


def _segments(raw: str) -> list[str]:
    """Physical lines of one raw line: a trailing ``\\r``, or tqdm's ``\\r`` redraws."""
    if "\r" not in raw and "\n" not in raw:
        return [raw] if raw else []
    return [s for s in raw.splitlines() if s]


def _to_float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _to_int(text: str) -> int | None:
    digits = text.replace(",", "")
    if not digits or len(digits) > 18:  # no real count is that long; keeps int() cheap
        return None
    return int(digits)


class VllmLogParser:
    """Follows one engine's log, one line at a time, and remembers what start-up reported.

    Memory figures, the version and the load phase are taken only until the ready line: after
    that, request logging can echo user text, which must not be able to rewrite what the
    engine reported.
    """

    __slots__ = (
        "_concurrency",
        "_engine_core_name",
        "_engine_core_pid",
        "_engine_core_tag",
        "_engine_init_s",
        "_graph_gib",
        "_kv_gib",
        "_kv_tokens",
        "_max_model_len",
        "_phase",
        "_ready",
        "_version",
        "_weights_gib",
        "_weights_load_exact",
        "_weights_load_s",
    )

    def __init__(self) -> None:
        self._ready = False
        self._engine_core_pid: int | None = None
        self._engine_core_name: str | None = None
        self._engine_core_tag = "\x00"  # "NAME pid=N)" once known: skips re-parsing its lines
        self._version: str | None = None
        self._weights_gib: float | None = None
        self._weights_load_s: float | None = None
        self._weights_load_exact = False
        self._graph_gib: float | None = None
        self._kv_gib: float | None = None
        self._kv_tokens: int | None = None
        self._max_model_len: int | None = None
        self._concurrency: float | None = None
        self._engine_init_s: float | None = None
        self._phase: LoadPhase | None = None

    # --- read side ----------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def load_phase(self) -> LoadPhase | None:
        """The latest load phase the log opened (None before the first one)."""
        return self._phase

    @property
    def engine_core_pid(self) -> int | None:
        return self._engine_core_pid

    @property
    def version(self) -> str | None:
        return self._version

    @property
    def memory(self) -> MemoryMetrics:
        """A fresh snapshot: callers may keep or change it without affecting the parser."""
        return MemoryMetrics(
            weights_memory_gib=self._weights_gib,
            cuda_graph_memory_gib=self._graph_gib,
            kv_cache_available_gib=self._kv_gib,
            kv_cache_per_request_mib=self._kv_per_request_mib(),
            max_model_len=self._max_model_len,
            kv_cache_tokens=self._kv_tokens,
            max_concurrency=self._concurrency,
            engine_init_seconds=self._engine_init_s,
            weights_load_seconds=self._weights_load_s,
        )

    def _kv_per_request_mib(self) -> float | None:
        # KV memory / (KV tokens / max_model_len): the cache one full-length request needs.
        kv, tokens, mml = self._kv_gib, self._kv_tokens, self._max_model_len
        if kv is None or not tokens or not mml or kv <= 0:
            return None
        return round(kv * 1024.0 / (tokens / mml), 3)

    # --- write side ---------------------------------------------------------------------
    def feed(self, raw_line: str) -> None:
        """Take one line as read from the log file (ANSI codes, ``\\r`` and tags included)."""
        for line in _segments(raw_line):
            self._feed_one(line)

    def _feed_one(self, line: str) -> None:
        if "\x1b" in line:
            line = _ANSI_RE.sub("", line)
        if "EngineCore" in line and "pid=" in line and self._engine_core_tag not in line:
            self._note_engine_core(line)
        if self._ready:
            return
        if _READY_NEEDLE in line:
            self._ready = True
            return
        self._phase = later_phase(self._phase, line)
        if "took" in line:
            self._took(line)
        if "KV cache" in line:
            self._kv_cache(line)
        if "Maximum concurrency for" in line:
            m = _CONCURRENCY_RE.search(line)
            if m:
                self._max_model_len = _to_int(m.group(1))
                self._concurrency = _to_float(m.group(2))
        if "server version" in line:
            v = _VERSION_RE.search(line)
            if v:
                self._version = v.group(1)

    def _note_engine_core(self, line: str) -> None:
        prefix = _PREFIX_RE.match(line)
        if prefix is None or not prefix.end():
            return
        # The first tag in the prefix is the writer; anything after it is message text.
        tag = _TAG_RE.search(line, 0, prefix.end())
        if tag is None or not tag.group(1).startswith("EngineCore"):
            return
        name = tag.group(1)
        # Keep following the first EngineCore we saw (a restarted one gets a new pid), but
        # ignore other data-parallel ranks (EngineCore_DP1, ...).
        if self._engine_core_name in (None, name):
            self._engine_core_name = name
            self._engine_core_pid = _to_int(tag.group(2))
            self._engine_core_tag = f"{name} pid={tag.group(2)})"

    def _took(self, line: str) -> None:
        if "Model loading took" in line:
            m = _MODEL_LOADING_RE.search(line)
            if m:
                self._weights_gib = _to_float(m.group(1))
                if not self._weights_load_exact:
                    self._weights_load_s = _to_float(m.group(2))
        elif "Loading weights took" in line:
            m = _LOADING_WEIGHTS_RE.search(line)
            if m:
                # The loader's own figure is the weights alone; "Model loading took ... and
                # N seconds" also counts model construction, so it only fills a gap.
                self._weights_load_s = _to_float(m.group(1))
                self._weights_load_exact = True
        elif "init engine" in line:
            m = _INIT_ENGINE_RE.search(line)
            if m:
                self._engine_init_s = _to_float(m.group(1))
        elif "Graph capturing finished" in line:
            m = _GRAPH_RE.search(line)
            if m:
                self._graph_gib = _to_float(m.group(2))

    def _kv_cache(self, line: str) -> None:
        if "Available KV cache memory" in line:
            m = _KV_AVAILABLE_RE.search(line)
            if m:
                self._kv_gib = _to_float(m.group(1))
        elif "KV cache size:" in line:
            m = _KV_SIZE_RE.search(line)
            if m:
                self._kv_tokens = _to_int(m.group(1))
        elif "for KV cache" in line:
            m = _CPU_KV_RE.search(line)
            if m:
                self._kv_gib = _to_float(m.group(1))


# --- errors -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorCause:
    """Why an engine failed: a stable ``code`` for programs, a ``message`` for people."""

    code: str
    """A known vLLM failure (``kv_cache_too_small``, ``out_of_memory``, ``port_in_use``,
    ``model_not_found``, ...), else ``exception`` (the last specific exception),
    ``error_line`` (the last ERROR line) or ``engine_failed`` (only vLLM's generic wrapper)."""
    message: str


@dataclass(frozen=True, slots=True)
class _Line:
    level: str | None
    """DEBUG ... CRITICAL when the line carries a logging prefix, else None."""
    process: str
    """The process tag (``EngineCore_DP0 pid=34``), or "" when there is none."""
    text: str
    """The message with prefix, tag, ANSI codes and ``\\r`` removed; indentation kept."""


def _split_line(line: str) -> _Line:
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
    m = _PREFIX_RE.match(line)
    if m is None or not m.end():
        return _Line(None, "", line)
    tag = _TAG_RE.search(line, 0, m.end())
    process = f"{tag.group(1)} pid={tag.group(2)}" if tag else ""
    return _Line(m.group("level") or m.group("ulevel"), process, line[m.end() :])


def message_of(raw_line: str) -> str:
    """The message part of one log line: no ANSI codes, level/date/file prefix or tag."""
    return " ".join(_split_line(seg).text for seg in _segments(raw_line))


@dataclass(frozen=True, slots=True)
class _RootCause:
    """A fatal error vLLM is known to print; the message is kept from ``start`` onwards."""

    code: str
    """Stable and machine-readable; several patterns may share one."""
    needle: str
    """Cheap substring test before any regular expression runs."""
    start: re.Pattern[str] | None = None
    """Where the useful message starts; None keeps the whole message (with its class)."""
    pattern: re.Pattern[str] | None = None
    """A stricter test than the needle, where the needle alone could mislead."""


_MODEL_LOAD_OOM = _RootCause(
    "out_of_memory", "Failed to load model - not enough", start=re.compile(r"Failed to load model")
)
_CUDA_OOM = _RootCause(
    "out_of_memory",
    "out of memory",
    start=re.compile(r"(?:[\w.]*OutOfMemoryError: )?CUDA (?:error: )?out of memory"),
)

# In precedence order: when two match, the earlier entry wins; for one entry, the last
# occurrence in the log wins. Messages with a meaningful exception class (OSError,
# torch.OutOfMemoryError, HFValidationError, ...) keep it; vLLM's plain ValueErrors and
# pydantic's "Value error, " wrapper are dropped because they add nothing for a human.
_ROOT_CAUSES: tuple[_RootCause, ...] = (
    # argparse: "api_server.py: error: unrecognized arguments: --no-such-flag" (exit 2)
    _RootCause(
        "bad_arguments", ": error: ", pattern=re.compile(r"^[\w.\-]+(?: [\w.\-]+)?: error: \S")
    ),
    _RootCause(
        "port_in_use",
        "already in use",
        pattern=re.compile(r"address already in use", re.IGNORECASE),
    ),
    _RootCause(
        "kv_cache_too_small",
        "To serve at least one request",
        start=re.compile(r"To serve at least one request with the model(?:s's|'s) max seq len"),
    ),
    _RootCause(
        "no_kv_cache_memory",
        "No available memory for the cache blocks",
        start=re.compile(r"No available memory"),
    ),
    _RootCause(
        "insufficient_free_memory",
        "on startup is less than desired",
        start=re.compile(r"(?:Free|Available) memory on (?:device|node)\b"),
    ),
    _MODEL_LOAD_OOM,
    _CUDA_OOM,
    _RootCause(
        "gpu_unsupported",
        "Bfloat16 is only supported",
        start=re.compile(r"Bfloat16 is only supported"),
    ),
    _RootCause(
        "gpu_unsupported",
        "is not valid for this configuration",
        start=re.compile(r"Selected backend "),
    ),
    _RootCause(
        "gpu_unsupported",
        "No valid attention backend",
        start=re.compile(r"No valid attention backend"),
    ),
    _RootCause(
        "max_model_len_too_long",
        "User-specified max_model_len",
        start=re.compile(r"User-specified max_model_len"),
    ),
    _RootCause(
        "sleep_mode_unsupported",
        "Sleep mode is not supported",
        start=re.compile(r"Sleep mode is not supported"),
    ),
    _RootCause(
        "model_not_found",
        "Invalid repository ID or local directory",
        start=re.compile(r"Invalid repository ID or local directory"),
    ),
    _RootCause("model_not_found", "is not a local folder and is not a valid model identifier"),
    _RootCause("model_not_found", "Can't load the configuration of"),
    _RootCause("model_not_found", "Repo id must"),
    _RootCause("bad_weights", "SafetensorError"),
    _RootCause("bad_weights", "Error while deserializing header"),
    # SARDEENZ_VLLM_PYTHON names an interpreter without vLLM: `python -m` prints one line,
    # "<python>: Error while finding module specification for 'vllm....' (ModuleNotFoundError:
    # No module named 'vllm')", and no traceback.
    _RootCause(
        "engine_not_installed",
        "Error while finding module specification",
        start=re.compile(r"Error while finding module specification"),
    ),
)
_MODEL_LOAD_OOM_RANK = _ROOT_CAUSES.index(_MODEL_LOAD_OOM)
_CUDA_OOM_RANK = _ROOT_CAUSES.index(_CUDA_OOM)

# Wrappers that only say "see above": never the answer while anything better exists.
_GENERIC = (
    "Engine core initialization failed",
    "EngineCore failed to start",
    "EngineCore encountered a fatal error",
    "EngineCore encountered an issue",
    "EngineDeadError",
)
_NOISE_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "WARN"})
_EXCEPTION_LINE_RE = re.compile(r"^[A-Za-z_][\w.]*(?::\s|:$|$)")
_PYDANTIC_TAIL_RE = re.compile(r"\s*\[type=[\w.]+, input_value=.*$")
_SPACE_RE = re.compile(r"\s+")


def _is_generic(text: str) -> bool:
    return any(g in text for g in _GENERIC)


def _clean(text: str) -> str:
    text = _PYDANTIC_TAIL_RE.sub("", text)
    text = _SPACE_RE.sub(" ", text).strip()
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 1].rstrip() + "…"
    return text


def _known_cause(lines: Sequence[_Line]) -> ErrorCause | None:
    last: dict[int, str] = {}  # precedence -> message of its last occurrence
    for line in lines:
        if line.level in _NOISE_LEVELS:
            continue
        text = line.text
        for rank, cause in enumerate(_ROOT_CAUSES):
            if cause.needle not in text:
                continue
            if cause.pattern is not None and not cause.pattern.search(text):
                continue
            start = 0
            if cause.start is not None:
                m = cause.start.search(text)
                if m is None:
                    continue
                start = m.start()
            last[rank] = text[start:].strip()
            break
    if not last:
        return None
    rank = min(last)
    message = last[rank]
    oom = last.get(_CUDA_OOM_RANK)
    if rank == _MODEL_LOAD_OOM_RANK and oom is not None and "out of memory" not in message:
        # 0.14+ logs the advice first and the allocation that failed in the traceback;
        # later versions inline it the same way: "(original error: CUDA out of memory...)".
        message = f"{message} (original error: {oom[oom.find('CUDA') :]})"
    return ErrorCause(_ROOT_CAUSES[rank].code, _clean(message))


def _exception_lines(lines: Sequence[_Line]) -> list[str]:
    """The final exception line of every traceback, oldest first.

    Tracebacks of different processes interleave in a shared log, so each process tag keeps
    its own state. Up to two indented lines right after an exception line (pydantic puts
    the actual reason there) are appended to it. Traceback lines are either unprefixed
    (stderr) or ERROR lines (``logger.exception``); INFO and friends are ignored.
    """
    in_traceback: dict[str, bool] = {}
    found: list[list[str]] = []
    open_for: dict[str, int] = {}  # process -> index in found still taking detail lines
    for line in lines:
        if line.level in _NOISE_LEVELS:
            continue
        text = line.text
        proc = line.process
        if text.startswith("Traceback (most recent call last)"):
            in_traceback[proc] = True
            open_for.pop(proc, None)
        elif in_traceback.get(proc):
            if text[:1].isspace() or not text:
                continue
            if _EXCEPTION_LINE_RE.match(text):
                in_traceback[proc] = False
                found.append([text.strip()])
                open_for[proc] = len(found) - 1
        elif proc in open_for:
            detail = text.strip()
            entry = found[open_for[proc]]
            if text[:1].isspace() and detail and len(entry) < 3:
                if detail.startswith("For further information visit"):
                    del open_for[proc]
                else:
                    entry.append(detail)
            else:
                del open_for[proc]
    return [" ".join(parts) for parts in found]


def _error_lines(lines: Sequence[_Line]) -> list[str]:
    """Messages of ERROR lines that are not part of a printed traceback."""
    out = []
    for line in lines:
        if line.level not in ("ERROR", "CRITICAL"):
            continue
        text = line.text
        if not text.strip() or text[:1].isspace() or text.startswith("Traceback ("):
            continue
        out.append(text.strip())
    return out


def find_error_cause(lines: Sequence[str]) -> ErrorCause | None:
    """The root cause of an engine failure, from the tail of its log (raw lines).

    vLLM ends every failed start with a generic "Engine core initialization failed. See root
    cause above."; the cause a human needs is earlier, often in another process's traceback.
    Order: a known vLLM root cause; else the last specific exception of any traceback; else
    the last specific ERROR line; else the generic wrappers themselves; else None.
    """
    parsed: list[_Line] = []
    # islice, not a slice: a deque is a Sequence too, and cannot be sliced.
    for raw in islice(lines, max(0, len(lines) - MAX_ERROR_LINES), None):
        if isinstance(raw, str):
            parsed.extend(_split_line(seg) for seg in _segments(raw))
    known = _known_cause(parsed)
    if known is not None:
        return known
    exceptions = _exception_lines(parsed)
    errors = _error_lines(parsed)
    for code, candidates in (("exception", exceptions), ("error_line", errors)):
        for text in reversed(candidates):
            if not _is_generic(text):
                return ErrorCause(code, _clean(text))
    for candidates in (exceptions, errors):
        if candidates:
            return ErrorCause("engine_failed", _clean(candidates[-1]))
    return None


def extract_error(lines: Sequence[str]) -> str | None:
    """The message of ``find_error_cause``: what the instance's ``errorMessage`` shows."""
    cause = find_error_cause(lines)
    return cause.message if cause is not None else None
