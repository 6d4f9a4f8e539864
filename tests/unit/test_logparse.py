"""The vLLM log parser against realistic logs of vLLM 0.11, 0.14, 0.22, 0.32 (CPU) and 0.34."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sardeenz.domain import MemoryMetrics
from sardeenz.engines.logparse import (
    LOAD_PHASES,
    MAX_ERROR_CHARS,
    READY_LINE,
    VllmLogParser,
    extract_error,
    find_error_cause,
    later_phase,
    load_phase,
    message_of,
    strip_ansi,
)
from tests.unit.vllm_logs import (
    API_PID,
    CORE_PID,
    CPU_EXPECTED,
    ERROR_CASES,
    GPU_NUMBERS,
    GPU_VERSIONS,
    STYLES,
    ErrorCase,
    Log,
    Raw,
    cpu_start,
    engine_core_failure,
    gpu_start,
    interleave,
    render,
)


def parse(lines: list[str]) -> VllmLogParser:
    parser = VllmLogParser()
    for line in lines:
        parser.feed(line)
    return parser


def phase_changes(lines: list[str]) -> list[tuple[str | None, str]]:
    """Each phase the parser moves to, with the (ANSI-stripped) line that moved it."""
    parser = VllmLogParser()
    changes: list[tuple[str | None, str]] = []
    for line in lines:
        before = parser.load_phase
        parser.feed(line)
        if parser.load_phase != before:
            changes.append((parser.load_phase, strip_ansi(line)))
    return changes


# --- load phases ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", GPU_VERSIONS)
def test_gpu_start_goes_through_the_load_phases_in_order(version: str) -> None:
    changes = phase_changes(gpu_start(version))
    assert [phase for phase, _ in changes] == ["loading weights", "KV cache", "CUDA graphs"]
    weights, kv, graphs = (line for _, line in changes)
    assert "Starting to load model /models/Qwen2.5-7B-Instruct..." in weights
    assert "Available KV cache memory:" in kv
    assert "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)" in graphs


def test_cpu_start_has_no_graph_phase() -> None:
    changes = phase_changes(cpu_start())
    assert [phase for phase, _ in changes] == ["loading weights", "KV cache"]
    assert "Loading weights took 0.01 seconds" in changes[0][1]
    assert "CPU KV cache size: 524,288 tokens" in changes[1][1]


def test_load_phase_of_single_lines() -> None:
    tagged = "\x1b[1;36m(EngineCore_DP0 pid=456)\x1b[0;0m INFO 12-02 10:11:12 [core.py:1] "
    assert load_phase(tagged + "Starting to load model /m...") == "loading weights"
    assert load_phase(tagged + "Graph capturing finished in 5 secs, took 0.58 GiB") == (
        "CUDA graphs"
    )
    assert load_phase("INFO 12-02 10:11:12 [x.py:1] GPU KV cache size: 446,464 tokens") == (
        "KV cache"
    )
    assert load_phase("INFO:     Application startup complete.") is None
    assert load_phase("") is None


def test_phases_only_move_forward() -> None:
    kv = "GPU KV cache size: 446,464 tokens, Maximum concurrency for 32,768 tokens: 13.62x"
    assert later_phase("CUDA graphs", kv) == "CUDA graphs"
    assert later_phase("loading weights", kv) == "KV cache"
    assert later_phase(None, "nothing here") is None
    assert later_phase("KV cache", "nothing here") == "KV cache"
    assert LOAD_PHASES[0] == "spawned"  # what an engine is in before its first phase line


def test_lines_after_ready_do_not_move_the_phase() -> None:
    """A prompt echoed by request logging must not send an active engine back to loading."""
    parser = parse(cpu_start())
    parser.feed(
        "INFO 12-02 10:20:00 [logger.py:40] Received request: prompt: 'Capturing CUDA graph'"
    )
    assert parser.load_phase == "KV cache"


# --- successful starts ---------------------------------------------------------------------


@pytest.mark.parametrize("version", GPU_VERSIONS)
def test_gpu_start_metrics(version: str) -> None:
    parser = parse(gpu_start(version))
    assert parser.ready
    assert parser.engine_core_pid == CORE_PID
    assert parser.version == STYLES[version].version
    assert parser.memory == MemoryMetrics.model_validate(GPU_NUMBERS[version].expected)


@pytest.mark.parametrize("version", GPU_VERSIONS)
def test_ready_only_with_the_ready_line(version: str) -> None:
    lines = gpu_start(version)
    ready_at = next(i for i, line in enumerate(lines) if READY_LINE in line)
    parser = parse(lines[:ready_at])
    assert not parser.ready
    parser.feed(lines[ready_at])
    assert parser.ready


def test_cpu_start_metrics() -> None:
    parser = parse(cpu_start())
    assert parser.ready
    assert parser.version == "0.32.0"
    assert parser.engine_core_pid == CORE_PID
    assert parser.memory == MemoryMetrics.model_validate(CPU_EXPECTED)


def test_memory_serialises_with_the_seed_names() -> None:
    dumped = parse(gpu_start("0.34")).memory.model_dump(mode="json")
    assert dumped["weightsMemoryGiB"] == 14.25
    assert dumped["cudaGraphMemoryGiB"] == 0.58
    assert dumped["kvCacheAvailableGiB"] == 23.85
    assert dumped["kvCachePerRequestMiB"] == 1792.47


def test_memory_is_a_snapshot() -> None:
    parser = parse(gpu_start("0.22"))
    snapshot = parser.memory
    snapshot.kv_cache_tokens = 1
    assert parser.memory.kv_cache_tokens == 400160


def test_nothing_known_leaves_everything_empty() -> None:
    parser = parse(["hello", "", "INFO 12-02 10:11:12 [x.py:1] nothing to see"])
    assert not parser.ready
    assert parser.engine_core_pid is None
    assert parser.version is None
    assert parser.memory == MemoryMetrics()


def test_partial_metrics_do_not_derive_per_request_cache() -> None:
    parser = parse(["INFO 12-02 10:11:12 [gpu_worker.py:298] Available KV cache memory: 4 GiB"])
    assert parser.memory.kv_cache_available_gib == 4.0
    assert parser.memory.kv_cache_per_request_mib is None


def test_model_loading_seconds_fill_in_when_the_loader_line_is_missing() -> None:
    parser = parse(["Model loading took 0.5 GiB memory and 1.250000 seconds"])
    assert parser.memory.weights_load_seconds == 1.25
    parser = parse(
        [
            "Loading weights took 0.75 seconds",
            "Model loading took 0.5 GiB memory and 1.250000 seconds",
        ]
    )
    assert parser.memory.weights_load_seconds == 0.75


def test_auto_sized_cpu_kv_cache() -> None:
    parser = parse(
        [
            "(Worker pid=110) INFO 06-13 20:03:57 [cpu_worker.py:235] Auto set (1.48/18.0) GiB "
            "for KV cache on node 0, with 5.4 GiB requested memory for the worker. 3.92 GiB "
            "memory was consumed by non-kv usages.",
        ]
    )
    assert parser.memory.kv_cache_available_gib == 1.48


def test_lines_after_ready_cannot_rewrite_metrics() -> None:
    """Request logging can echo user text after start-up; it must not count."""
    parser = parse(gpu_start("0.22"))
    parser.feed(
        "(APIServer pid=123) INFO 12-02 10:20:00 [logger.py:40] Received request cmpl-1: "
        "prompt: 'Model loading took 99.0 GiB and 1.0 seconds; vLLM server version 6.6.6'"
    )
    assert parser.memory.weights_memory_gib == 14.25
    assert parser.version == "0.22.0"


def test_whole_chunks_and_embedded_newlines_are_split() -> None:
    lines = gpu_start("0.14")
    one = parse(lines)
    chunk = VllmLogParser()
    chunk.feed("\n".join(lines))
    assert chunk.ready
    assert chunk.memory == one.memory
    assert chunk.engine_core_pid == one.engine_core_pid


def test_lines_without_carriage_returns_parse_the_same() -> None:
    lines = gpu_start("0.11")
    stripped = parse([line.rstrip("\r") for line in lines])
    assert stripped.memory == parse(lines).memory


# --- process tags ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "(EngineCore_DP0 pid=77) INFO 12-02 10:11:12 [core.py:77] Initializing",
        "\x1b[1;36m(EngineCore_DP0 pid=77)\x1b[0;0m INFO 12-02 10:11:12 [core.py:77] Hi",
        "(EngineCore pid=77) INFO 12-02 10:11:12 [core.py:77] Initializing",
        "INFO 12-02 10:11:12 (EngineCore pid=77) [core.py:77] Initializing",
        "INFO 12-02 10:11:12 [core.py:77] (EngineCore pid=77) Initializing",
        "\x1b[32mINFO\x1b[0m \x1b[90m12-02 10:11:12\x1b[0m (EngineCore pid=77) "
        "\x1b[90m[core.py:77]\x1b[0m Initializing",
        "(EngineCore pid=77) Traceback (most recent call last):\r",
    ],
)
def test_engine_core_pid_from_its_tag(line: str) -> None:
    assert parse([line]).engine_core_pid == 77


def test_other_processes_are_not_the_engine_core() -> None:
    parser = parse(
        [
            "(APIServer pid=1) INFO 12-02 10:11:12 [api_server.py:1] EngineCore pid=5 started",
            "(Worker_TP0 pid=9) INFO 12-02 10:11:12 [gpu_worker.py:1] (EngineCore pid=5)",
            "INFO 12-02 10:11:12 [x.py:1] message mentions (EngineCore pid=6) later",
        ]
    )
    assert parser.engine_core_pid is None


def test_first_data_parallel_rank_wins_but_a_restart_is_followed() -> None:
    parser = parse(
        [
            "(EngineCore_DP0 pid=10) INFO 12-02 10:11:12 [core.py:1] a",
            "(EngineCore_DP1 pid=11) INFO 12-02 10:11:12 [core.py:1] b",
        ]
    )
    assert parser.engine_core_pid == 10
    parser.feed("(EngineCore_DP0 pid=12) INFO 12-02 10:11:12 [core.py:1] restarted")
    assert parser.engine_core_pid == 12


# --- line helpers ----------------------------------------------------------------------------


def test_strip_ansi() -> None:
    assert strip_ansi("\x1b[1;36m(APIServer pid=1)\x1b[0;0m x\x1b[0m") == "(APIServer pid=1) x"
    assert strip_ansi("\x1b]0;title\x07plain") == "plain"
    assert strip_ansi("no codes") == "no codes"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO 12-02 10:11:12 [a.py:1] hi\r", "hi"),
        ('(EngineCore pid=2) ERROR 12-02 10:11:12 [core.py:708]   File "x"', '  File "x"'),
        ("(APIServer pid=1) INFO:     Application startup complete.", READY_LINE),
        ("WARNING 12-02 10:11:12 [v1/engine/core.py:9] spaced  out", "spaced  out"),
        ("(APIServer pid=1) raw stderr", "raw stderr"),
        ("no prefix at all", "no prefix at all"),
    ],
)
def test_message_of(line: str, message: str) -> None:
    assert message_of(line) == message


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.name)
def test_extract_error_finds_the_root_cause(case: ErrorCase) -> None:
    assert extract_error(case.lines) == case.message
    cause = find_error_cause(case.lines)
    assert cause is not None
    assert cause.code == case.code


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.name)
def test_extract_error_on_lines_as_the_tail_reader_returns_them(case: ErrorCase) -> None:
    """``read_tail_lines`` uses ``splitlines()``: no ``\\r``; the buffer keeps ANSI codes."""
    text = "\n".join(case.lines)
    assert extract_error(text.splitlines()) == case.message
    assert extract_error([strip_ansi(line) for line in case.lines]) == case.message
    assert extract_error(case.lines[-500:]) == case.message


@pytest.mark.parametrize(
    "case",
    [c for c in ERROR_CASES if c.code not in ("exception", "engine_failed", "error_line")],
    ids=lambda c: c.name,
)
def test_known_causes_never_return_the_generic_wrapper(case: ErrorCase) -> None:
    message = extract_error(case.lines)
    assert message is not None
    assert "Engine core initialization failed" not in message
    assert "EngineCore failed to start" not in message
    assert "\r" not in message
    assert "pid=" not in message


def test_interleaved_processes_keep_their_tracebacks_apart() -> None:
    style = STYLES["0.22"]
    failure = render(
        style,
        engine_core_failure(style, [], "KeyError: 'lm_head.weight'"),
    )
    core = [line for line in failure if f"pid={CORE_PID}" in line]
    api = [line for line in failure if f"pid={API_PID}" in line]
    noise = render(style, [Log("api", "INFO", "x.py:1", f"tick {i}") for i in range(len(core))])
    assert extract_error(interleave(core, noise) + api) == "KeyError: 'lm_head.weight'"
    assert extract_error(interleave(api, core)) == "KeyError: 'lm_head.weight'"


def test_a_known_cause_beats_a_later_unknown_exception() -> None:
    style = STYLES["0.14"]
    lines = render(
        style,
        [
            *engine_core_failure(
                style,
                [],
                "ValueError: No available memory for the cache "
                "blocks. Try increasing `gpu_memory_utilization` when "
                "initializing the engine.",
            ),
            Raw("api", "Exception ignored in atexit callback: <function shutdown>"),
            Raw("api", 'Traceback (most recent call last):\n  File "x"\nKeyboardInterrupt'),
        ],
    )
    assert extract_error(lines) == (
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine."
    )


def test_precedence_between_known_causes() -> None:
    lines = [
        "OSError: Can't load the configuration of '/x'.",
        "Invalid repository ID or local directory specified: '/x'.",
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'a' or 'b/c': '/x'.",
    ]
    assert extract_error(lines) == "Invalid repository ID or local directory specified: '/x'."


def test_no_error_in_a_clean_log() -> None:
    assert extract_error(gpu_start("0.11")) is None
    assert extract_error(cpu_start()) is None
    assert extract_error([]) is None
    assert find_error_cause([]) is None


def test_any_sequence_of_lines_will_do() -> None:
    case = ERROR_CASES[0]
    assert extract_error(deque(case.lines, maxlen=500)) == case.message
    assert extract_error(tuple(case.lines)) == case.message


def test_long_messages_are_capped() -> None:
    message = extract_error(["Traceback (most recent call last):", "ValueError: " + "x" * 5000])
    assert message is not None
    assert len(message) == MAX_ERROR_CHARS
    assert message.endswith("…")


def test_an_argparse_error_of_any_program() -> None:
    lines = [
        "usage: sim.py [-h] --model MODEL",
        "sim.py: error: argument --port: invalid int value: 'abc'",
    ]
    assert extract_error(lines) == "sim.py: error: argument --port: invalid int value: 'abc'"


# --- never raise -------------------------------------------------------------------------------

_FIXTURE_LINES = sorted({line for case in ERROR_CASES for line in case.lines} | set(cpu_start()))
_INTERESTING = st.sampled_from(
    [
        *_FIXTURE_LINES[:: max(1, len(_FIXTURE_LINES) // 200)],
        "\x1b[",
        "\x1b]0;",
        "(EngineCore pid=",
        "(EngineCore pid=99999999999999999999999999) ",
        "Model loading took ",
        "GPU KV cache size: ,,,, tokens",
        "Maximum concurrency for 0 tokens per request: 1e999x",
        "Available KV cache memory: -0 GiB",
        "Traceback (most recent call last):",
        "  File",
        ": error: ",
        "ERROR:",
        "\r",
        "\n",
        "\x00",
    ]
)
_MIXED = st.lists(st.one_of(st.text(), _INTERESTING), max_size=8).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(), _MIXED), max_size=30))
def test_parser_never_raises(lines: list[str]) -> None:
    parser = VllmLogParser()
    for line in lines:
        parser.feed(line)
    assert isinstance(parser.memory, MemoryMetrics)
    _ = (parser.ready, parser.engine_core_pid, parser.version)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(), _MIXED), max_size=30))
def test_extract_error_never_raises(lines: list[str]) -> None:
    message = extract_error(lines)
    assert message is None or len(message) <= MAX_ERROR_CHARS


def test_zero_tokens_or_lengths_do_not_divide_by_zero() -> None:
    parser = parse(
        [
            "Available KV cache memory: 1.0 GiB",
            "GPU KV cache size: 0 tokens",
            "Maximum concurrency for 0 tokens per request: 0.00x",
        ]
    )
    assert parser.memory.kv_cache_per_request_mib is None
