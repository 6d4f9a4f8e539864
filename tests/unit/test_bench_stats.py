"""Benchmark statistics: numpy-identical percentiles, exact goodput, usage-based TPS."""

from __future__ import annotations

import asyncio
import math
import socket
import time

import numpy as np
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from sardeenz.bench.client import Target, read_event, stream_completion
from sardeenz.bench.runner import new_session
from sardeenz.bench.stats import RequestSample, percentile, scenario_metrics, summarize

finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)


@settings(max_examples=250, deadline=None)
@given(
    values=st.lists(finite, min_size=1, max_size=300),
    p=st.one_of(st.sampled_from([0.0, 50.0, 90.0, 95.0, 99.0, 100.0]), st.floats(0, 100)),
)
def test_percentile_equals_numpy_default_method(values: list[float], p: float) -> None:
    ours = percentile(sorted(values), p)
    theirs = float(np.percentile(np.array(values, dtype=np.float64), p))
    assert ours == theirs  # bit for bit: same virtual index, same two-sided lerp


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=200))
def test_summary_matches_numpy(values: list[float]) -> None:
    s = summarize(values)
    assert s is not None
    arr = np.array(values)
    assert s.min == arr.min()
    assert s.max == arr.max()
    assert math.isclose(s.avg, float(arr.mean()), rel_tol=1e-9, abs_tol=1e-9)
    for got, p in ((s.p50, 50), (s.p90, 90), (s.p95, 95), (s.p99, 99)):
        assert got == float(np.percentile(arr, p))


def test_percentile_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="within"):
        percentile([1.0], 101)
    assert summarize([]) is None


def _sample(
    e2e_ms: float, *, ok: bool = True, tokens: int = 11, ttft_ms: float = 10.0
) -> RequestSample:
    start = 100.0
    first = start + ttft_ms / 1000
    end = start + e2e_ms / 1000
    return RequestSample(
        started=start,
        ended=end,
        ok=ok,
        first_token_at=first if ok else None,
        last_token_at=end if ok else None,
        completion_tokens=tokens if ok else 0,
        error=None if ok else "boom",
    )


@settings(max_examples=200, deadline=None)
@given(
    latencies=st.lists(st.integers(1, 5000), min_size=1, max_size=100),
    failures=st.integers(0, 20),
    sla=st.integers(1, 5000),
)
def test_goodput_counts_exactly_the_successful_requests_under_the_sla(
    latencies: list[int], failures: int, sla: int
) -> None:
    samples = [_sample(float(ms), ttft_ms=min(ms, 1) / 2) for ms in latencies]
    samples += [_sample(1.0, ok=False) for _ in range(failures)]
    # Half-millisecond SLAs: no latency sits on the threshold, where float rounding of
    # perf_counter differences would decide.
    m = scenario_metrics("s", samples, sla + 0.5)
    assert m is not None
    expected = sum(1 for ms in latencies if ms <= sla + 0.5)
    assert m.goodput_count == expected
    assert m.goodput_percent == pytest.approx(100 * expected / (len(latencies) + failures))


def test_without_sla_every_successful_request_is_good() -> None:
    m = scenario_metrics("s", [_sample(10), _sample(20), _sample(5, ok=False)], None)
    assert m is not None
    assert m.goodput_count == 2
    assert m.goodput_percent == pytest.approx(200 / 3)


def test_tps_is_decode_rate_after_the_first_token_from_usage_counts() -> None:
    # 11 tokens: first at 10 ms, last at 110 ms -> 10 tokens in 100 ms = 100 tokens/s.
    s = _sample(110.0, tokens=11, ttft_ms=10.0)
    assert s.tps == pytest.approx(100.0)
    assert _sample(50.0, tokens=1).tps is None  # one token: no decode phase
    m = scenario_metrics("s", [s], None)
    assert m is not None
    assert m.tps_p50 == pytest.approx(100.0)
    assert m.ttft_p50 == pytest.approx(10.0)
    assert m.e2e_p50 == pytest.approx(110.0)
    assert m.tokens_per_second_total == pytest.approx(11 / 0.110)
    assert m.requests_per_second == pytest.approx(1 / 0.110)


def test_no_successful_request_means_no_metrics() -> None:
    assert scenario_metrics("s", [_sample(1, ok=False)], 100.0) is None
    assert scenario_metrics("s", [], None) is None


def test_metrics_json_uses_the_seed_names() -> None:
    m = scenario_metrics("s", [_sample(10)], 5.0)
    assert m is not None
    keys = set(m.model_dump(mode="json"))
    for prefix in ("ttft", "tps", "e2e"):
        for stat in ("Min", "Max", "Avg", "P50", "P90", "P95", "P99"):
            assert f"{prefix}{stat}" in keys
    assert {"scenarioId", "goodputCount", "goodputPercent", "requestsPerSecond"} <= keys
    assert "tokensPerSecondTotal" in keys


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"id":"c","choices":[{"index":0,"text":" tok3","finish_reason":null}]}', (True, None)),
        (b'{"id":"c","choices":[{"index":0,"text":"","finish_reason":"length"}]}', (False, None)),
        (b'{"choices":[{"text":"error"}],"usage":null}', (True, None)),  # a token spelt "error"
        (b'{"choices": [{"text": " spaced"}]}', (True, None)),  # not compact: full parse
        (b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}', (False, 5)),
        (b'{"choices":[{"text":"x"}],"usage": {"completion_tokens":7}}', (True, 7)),
        (b"[DONE]", (False, None)),
    ],
)
def test_read_event_fast_path_agrees_with_a_full_parse(
    data: bytes, expected: tuple[bool, int | None]
) -> None:
    text, usage, error = read_event(data)
    assert error is None
    assert (text, usage["completion_tokens"] if usage else None) == expected


def test_read_event_reports_engine_errors() -> None:
    _, _, error = read_event(b'{"error":{"message":"engine died","type":"InternalServerError"}}')
    assert error == "engine died"


async def test_a_stalled_stream_fails_after_the_read_timeout_not_before() -> None:
    """Data every 0.1 s for 1 s keeps a 0.4 s read deadline alive; then silence fails it."""
    release = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(10):
            await resp.write(f'data: {{"choices":[{{"text":"t{i}"}}]}}\n\n'.encode())
            await asyncio.sleep(0.1)
        await release.wait()
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    await web.SockSite(runner, sock).start()
    session = new_session()
    try:
        t0 = time.perf_counter()
        sample = await stream_completion(
            session, Target(f"http://127.0.0.1:{port}/v1/completions", "m"), b"{}", 0.4
        )
        elapsed = time.perf_counter() - t0
    finally:
        release.set()
        await session.close()
        await runner.cleanup()
    assert not sample.ok
    assert sample.error is not None
    assert "TimeoutError" in sample.error
    assert sample.first_token_at is not None
    assert 1.2 < elapsed < 2.5
