"""The simulated engine as a real process: what the supervisor and the proxy rely on.

Each test starts ``python -m sardeenz.sim`` in its own session with its log
in a file (as the supervisor does) and always kills the whole process group at the
end. One shared engine serves the request tests; lifecycle tests start their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sardeenz.sim.generation import EARLY_TOLERANCE_SECONDS
from sardeenz.sim.memory import plan_memory
from sardeenz.sim.text import completion_text, count_prompt_tokens, render_chat_prompt
from sardeenz.tls import client_tls
from testkit.ports import free_port
from testkit.waiting import wait_until, within

READY_LINE = "INFO:     Application startup complete."
TTFT_MS = 60
ITL_MS = 5


# --------------------------------------------------------------------------- helpers


@dataclass
class SimProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """``wait_until``, its failure (or the predicate's) followed by the engine's log."""
        try:
            wait_until(predicate, what, timeout, interval=0.02)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; log:\n{self.log()}") from None

    def wait_log(self, text: str, timeout: float = 10.0) -> None:
        self.wait_for(lambda: text in self.log(), timeout, f"{text!r} in the engine's log")

    def wait_ready(self, timeout: float = 15.0) -> None:
        # One client for every poll (50 a second): a new one each time loads the CA
        # bundle, about 20 ms of CPU, which made the wait busier than the engine's start.
        with httpx.Client(timeout=1.0, verify=client_tls()) as http:

            def healthy() -> bool:
                assert self.proc.poll() is None, "engine exited early"  # wait_for adds the log
                try:
                    return http.get(f"{self.base_url}/health").status_code == 200
                except httpx.TransportError:
                    return False

            self.wait_for(healthy, timeout, "the engine's /health answering 200")

    def engine_core(self) -> psutil.Process:
        children = psutil.Process(self.proc.pid).children()
        assert len(children) == 1, children
        return children[0]

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


def start_sim(
    log_dir: Path, *args: str, env: dict[str, str] | None = None, model: str = "sim-model"
) -> SimProcess:
    port = free_port()
    log_path = log_dir / f"sim-{port}.log"
    full_env = {k: v for k, v in os.environ.items() if k != "VLLM_SERVER_DEV_MODE"}
    full_env.update(env or {})
    argv = [sys.executable, "-m", "sardeenz.sim", "--model", model, "--port", str(port)]
    argv.extend(args)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=full_env,
        )
    return SimProcess(proc, port, log_path)


@contextlib.contextmanager
def running_sim(
    log_dir: Path, *args: str, env: dict[str, str] | None = None, ready: bool = True
) -> Iterator[SimProcess]:
    sim = start_sim(log_dir, *args, env=env)
    try:
        if ready:
            sim.wait_ready()
        yield sim
    finally:
        sim.kill_group()


def metric(base_url: str, name: str, **labels: str) -> float:
    """One sample of ``/metrics`` (a sum when several samples match the labels)."""
    text = httpx.get(f"{base_url}/metrics").text
    total, found = 0.0, False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
                found = True
    assert found, f"{name}{labels} not in /metrics:\n{text}"
    return total


def core_pid_from_log(log: str) -> int:
    m = re.search(r"\(EngineCore_DP0 pid=(\d+)\) INFO", log)
    assert m, log
    return int(m.group(1))


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# --------------------------------------------------------------------------- shared engine


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """A sleep-capable engine (dev mode) with two served names, ready to serve."""
    log_dir = tmp_path_factory.mktemp("sim")
    with running_sim(
        log_dir,
        "--served-model-name", "sim-a", "sim-b",
        "--load-seconds", "0.1",
        "--ttft-ms", str(TTFT_MS),
        "--itl-ms", str(ITL_MS),
        "--enable-sleep-mode",
        "--wake-ms", "100",
        env={"VLLM_SERVER_DEV_MODE": "1"},
    ) as engine:  # fmt: skip
        yield engine


@pytest.fixture
def client(sim: SimProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{sim.base_url}/v1", api_key="x", max_retries=0) as c:
        yield c


# --------------------------------------------------------------------------- requests


def test_completion_has_exact_tokens_and_usage(client: openai.OpenAI) -> None:
    resp = client.completions.create(model="sim-b", prompt="one two three", max_tokens=7)
    assert resp.model == "sim-a"  # the first served name is used in replies
    assert resp.id.startswith("cmpl-")
    assert resp.choices[0].text == completion_text(7) == "tok0 tok1 tok2 tok3 tok4 tok5 tok6"
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage is not None
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (3, 7)
    assert resp.usage.total_tokens == 10


def test_chat_completion_and_default_length(client: openai.OpenAI) -> None:
    messages: list[dict[str, str]] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello there"},
    ]
    prompt = render_chat_prompt(messages)
    assert prompt == "system: be brief\nuser: hello there\nassistant:"
    resp = client.chat.completions.create(
        model="sim-a",
        messages=messages,  # type: ignore[arg-type]
        max_completion_tokens=5,
    )
    assert resp.object == "chat.completion"
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content == completion_text(5)
    assert resp.usage is not None
    assert resp.usage.prompt_tokens == count_prompt_tokens(prompt) == 7
    assert resp.usage.completion_tokens == 5
    # Without max_tokens: 16 tokens, then the simulated EOS ("stop").
    resp = client.chat.completions.create(
        model="sim-a", messages=[{"role": "user", "content": "hi"}]
    )
    assert resp.choices[0].message.content == completion_text(16)
    assert resp.choices[0].finish_reason == "stop"


def test_streamed_completion_with_usage(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model="sim-a",
        prompt="a b c d",
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
    )
    texts, finish, usage = [], None, None
    for chunk in stream:
        if chunk.choices:
            if chunk.choices[0].text:
                texts.append(chunk.choices[0].text)
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage
    assert len(texts) == 12
    assert "".join(texts) == completion_text(12)
    assert finish == "length"
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (4, 12, 16)


ROUNDING = 1e-9
"""Seconds of float error allowed when comparing the engine's sums with exact values."""


def _engine_seconds(base_url: str) -> tuple[float, float, float]:
    """The engine's own TTFT and end-to-end sums and the request count, from ``/metrics``."""
    return (
        metric(base_url, "vllm:time_to_first_token_seconds_sum"),
        metric(base_url, "vllm:e2e_request_latency_seconds_sum"),
        metric(base_url, "vllm:e2e_request_latency_seconds_count"),
    )


async def test_async_chat_stream_ttft_and_pacing(sim: SimProcess) -> None:
    """The pacing is checked twice: by the client (never early) and by the engine's clock
    (never late): the client's clock also counts its own scheduling delays, which a
    loaded machine makes as long as it likes, so it cannot bound lateness."""
    n = 40
    async with openai.AsyncOpenAI(
        base_url=f"{sim.base_url}/v1", api_key="x", max_retries=0
    ) as aclient:
        warm = await aclient.completions.create(model="sim-a", prompt="warm", max_tokens=1)
        assert warm.choices[0].text == "tok0"
        ttft_before, e2e_before, count_before = _engine_seconds(sim.base_url)
        started = time.perf_counter()
        stream = await aclient.chat.completions.create(
            model="sim-a",
            messages=[{"role": "user", "content": "count"}],
            max_tokens=n,
            stream=True,
        )
        first: float | None = None
        pieces: list[str] = []
        finish = None
        async for chunk in stream:
            if not chunk.choices:
                continue
            content = chunk.choices[0].delta.content
            if content:
                if first is None:
                    first = time.perf_counter() - started
                pieces.append(content)
            finish = chunk.choices[0].finish_reason or finish
        total = time.perf_counter() - started
    ttft_after, e2e_after, count_after = _engine_seconds(sim.base_url)
    assert count_after - count_before == 1  # the sums below are this request's alone
    engine_first, engine_total = ttft_after - ttft_before, e2e_after - e2e_before
    expected = (TTFT_MS + ITL_MS * (n - 1)) / 1000
    assert first is not None
    # The engine times the first token before sending it, so the client's is no shorter.
    # ROUNDING covers float arithmetic only: the engine subtracts loop times near the
    # machine's uptime and the sums above are differences of running totals (CI once
    # saw 0.05999999999949068 for 60 ms).
    assert TTFT_MS / 1000 - ROUNDING <= engine_first <= first
    assert engine_first < (TTFT_MS + 200) / 1000
    # The engine records its end to end after the last send: either side may finish first.
    # A token due within EARLY_TOLERANCE_SECONDS is sent at once (uvloop's timers have
    # millisecond resolution), so the last one may leave that much before its time.
    assert expected - EARLY_TOLERANCE_SECONDS - ROUNDING <= engine_total < expected + 0.4
    assert expected <= total
    assert len(pieces) == n
    assert "".join(pieces) == completion_text(n)
    assert finish == "length"


async def test_async_completion_not_streamed(sim: SimProcess) -> None:
    async with openai.AsyncOpenAI(
        base_url=f"{sim.base_url}/v1", api_key="x", max_retries=0
    ) as aclient:
        started = time.perf_counter()
        resp = await aclient.completions.create(model="sim-a", prompt="x y", max_tokens=21)
        elapsed = time.perf_counter() - started
    assert resp.choices[0].text == completion_text(21)
    assert resp.usage is not None
    assert resp.usage.completion_tokens == 21
    assert elapsed >= (TTFT_MS + ITL_MS * 20) / 1000


def test_errors_in_openai_shape(sim: SimProcess, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        client.completions.create(model="nope", prompt="x", max_tokens=1)
    assert not_found.value.status_code == 404
    assert not_found.value.body == {
        "message": "The model `nope` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
    bad = httpx.post(
        f"{sim.base_url}/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert bad.status_code == 400
    assert set(bad.json()["error"]) == {"message", "type", "param", "code"}
    assert bad.json()["error"]["code"] == 400
    with pytest.raises(openai.BadRequestError, match="maximum context length is 4096"):
        client.completions.create(model="sim-a", prompt="x", max_tokens=5000)
    assert httpx.get(f"{sim.base_url}/nowhere").status_code == 404


def test_small_endpoints(sim: SimProcess) -> None:
    base = sim.base_url
    health = httpx.get(f"{base}/health")
    assert (health.status_code, health.content) == (200, b"")
    assert httpx.post(f"{base}/ping").status_code == 200
    assert httpx.get(f"{base}/version").json() == {"version": "0.0.0+sim"}
    models = httpx.get(f"{base}/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["sim-a", "sim-b"]
    card = models["data"][0]
    assert card["object"] == "model"
    assert card["owned_by"] == "vllm"
    assert (card["root"], card["parent"], card["max_model_len"]) == ("sim-model", None, 4096)
    tok = httpx.post(f"{base}/tokenize", json={"model": "sim-a", "prompt": "one two three"})
    assert tok.json()["count"] == len(tok.json()["tokens"]) == 3
    assert tok.json()["max_model_len"] == 4096
    assert httpx.get(f"{base}/load").json() == {"server_load": 0}
    state = httpx.get(f"{base}/sim/state").json()
    assert state["simulated"] is True
    assert state["memory_gib"] == pytest.approx(4.0)


def test_metrics_have_vllm_names_and_labels(sim: SimProcess, client: openai.OpenAI) -> None:
    labels = {"model_name": "sim-a", "engine": "0"}
    before = metric(sim.base_url, "vllm:generation_tokens_total", **labels)
    client.completions.create(model="sim-a", prompt="p q", max_tokens=3)
    assert metric(sim.base_url, "vllm:generation_tokens_total", **labels) == before + 3
    text = httpx.get(f"{sim.base_url}/metrics").text
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="sim-a"}',
        'vllm:request_success_total{engine="0",finished_reason="abort",model_name="sim-a"}',
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_count",
    ):
        assert name in text


def test_client_disconnect_is_an_abort(sim: SimProcess) -> None:
    base = sim.base_url
    abort = {"model_name": "sim-a", "engine": "0", "finished_reason": "abort"}
    before = metric(base, "vllm:request_success_total", **abort)
    body = {"model": "sim-a", "prompt": "long", "max_tokens": 2000, "stream": True}
    with (
        httpx.Client(timeout=5) as http,
        http.stream("POST", f"{base}/v1/completions", json=body) as resp,
    ):
        lines = resp.iter_lines()  # held open: closing this generator would disconnect
        assert next(line for line in lines if line.startswith("data: "))
        time.sleep(0.1)
        assert metric(base, "vllm:num_requests_running") == 1
        closed_at = time.monotonic()
    # Leaving both blocks closed the connection mid-stream.
    sim.wait_for(
        lambda: metric(base, "vllm:request_success_total", **abort) == before + 1,
        1.0,
        "the abort counted in vllm:request_success_total",
    )
    assert time.monotonic() - closed_at < 1.0
    assert metric(base, "vllm:num_requests_running") == 0
    assert re.search(r"\(APIServer pid=\d+\) INFO .* Aborted request cmpl-[0-9a-f]+-0\.", sim.log())


async def test_sleep_wake_cycle(sim: SimProcess) -> None:
    base = sim.base_url
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        wakeups = metric(base, "sardeenz_sim_wakeups_total")
        assert (await http.get("/is_sleeping")).json() == {"is_sleeping": False}
        slept = await http.post("/sleep", params={"level": "1"})
        assert (slept.status_code, slept.content) == (200, b"")
        assert (await http.get("/is_sleeping")).json() == {"is_sleeping": True}
        state = (await http.get("/sim/state")).json()
        assert state["sleeping"] is True
        assert state["sleep_level"] == 1
        assert state["memory_gib"] == pytest.approx(state["cuda_graph_gib"])
        assert state["memory_gib"] < 0.1 * state["memory_gib_awake"]
        assert metric(base, "vllm:engine_sleep_state", sleep_state="weights_offloaded") == 1
        # /health stays 200 while asleep; a request queues until the wake-up.
        assert (await http.get("/health")).status_code == 200
        pending = asyncio.create_task(
            http.post("/v1/completions", json={"model": "sim-a", "prompt": "z", "max_tokens": 2})
        )
        await asyncio.sleep(0.3)
        assert not pending.done()
        assert metric(base, "vllm:num_requests_waiting") == 1
        woke = await http.post("/wake_up")
        assert (woke.status_code, woke.content) == (200, b"")
        reply = await within(pending, 5, "the queued completion answered once the engine woke")
        assert reply.json()["choices"][0]["text"] == "tok0 tok1"
        assert (await http.get("/is_sleeping")).json() == {"is_sleeping": False}
        assert (await http.get("/sim/state")).json()["memory_gib"] == pytest.approx(4.0)
        assert metric(base, "sardeenz_sim_wakeups_total") == wakeups + 1
        # Level 2, woken in two steps: still asleep until every tag is back.
        await http.post("/sleep", params={"level": "2"})
        assert metric(base, "vllm:engine_sleep_state", sleep_state="discard_all") == 1
        await http.post("/wake_up", params={"tags": "weights"})
        state = (await http.get("/sim/state")).json()
        assert state["sleeping"] is True
        assert state["memory_gib"] == pytest.approx(state["cuda_graph_gib"] + state["weights_gib"])
        await http.post("/wake_up", params={"tags": "kv_cache"})
        assert (await http.get("/is_sleeping")).json() == {"is_sleeping": False}
        assert metric(base, "sardeenz_sim_wakeups_total") == wakeups + 2
        assert metric(base, "vllm:engine_sleep_state", sleep_state="awake") == 1
    log = sim.log()
    assert re.search(r"It took 0\.\d{6} seconds to fall asleep\.", log)
    assert re.search(r"Sleep mode freed 3\.88 GiB memory, 0\.12 GiB memory is still in use\.", log)
    assert re.search(r"It took 0\.\d{6} seconds to wake up tags \['weights'\]\.", log)


async def _stream_finish(http: httpx.AsyncClient, max_tokens: int) -> tuple[str | None, bool]:
    """Stream a completion; the last finish_reason seen and whether [DONE] came."""
    body = {"model": "sim-a", "prompt": "z", "max_tokens": max_tokens, "stream": True}
    reason: str | None = None
    done = False
    async with http.stream("POST", "/v1/completions", json=body) as resp:
        async for line in resp.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                for choice in json.loads(line[6:])["choices"]:
                    reason = choice.get("finish_reason") or reason
    return reason, done


@pytest.mark.parametrize(
    ("mode", "expected"),
    [(None, "abort"), ("abort", "abort"), ("wait", "length"), ("keep", "length")],
)
async def test_sleep_modes_with_a_stream_in_flight(
    sim: SimProcess, mode: str | None, expected: str
) -> None:
    """vLLM's ``/sleep?mode=``: abort (default) ends streams, wait finishes them, keep pauses."""
    async with httpx.AsyncClient(base_url=sim.base_url, timeout=15) as http:
        stream = asyncio.create_task(_stream_finish(http, 100))  # ~0.6 s
        await asyncio.sleep(0.2)
        params = {"level": "1"} | ({"mode": mode} if mode else {})
        t0 = time.monotonic()
        assert (await http.post("/sleep", params=params)).status_code == 200
        slept_after = time.monotonic() - t0
        if mode == "keep":  # frozen until the wake-up, then it completes
            await asyncio.sleep(0.5)
            assert not stream.done()
            await http.post("/wake_up")
            reason, done = await within(stream, 10, "the paused stream's end after the wake-up")
        else:
            reason, done = await within(stream, 10, f"the stream's end under sleep mode {mode}")
            await http.post("/wake_up")
        assert (reason, done) == (expected, True)
        if mode == "wait":
            assert slept_after > 0.2  # it waited for the stream
        assert metric(sim.base_url, "vllm:num_requests_running") == 0


# --------------------------------------------------------------------------- lifecycle


def test_loading_refuses_connections_then_logs_memory_and_ready(tmp_path: Path) -> None:
    with running_sim(
        tmp_path, "--load-seconds", "1.5", "--memory-gib", "10", "--enable-sleep-mode",
        ready=False,
    ) as sim:  # fmt: skip
        sim.wait_log("Starting to load model sim-model...")
        with (
            pytest.raises(ConnectionRefusedError),
            socket.create_connection(("127.0.0.1", sim.port), timeout=1),
        ):
            pass
        sim.wait_ready()
        log = sim.log()
        lines = log.splitlines()
        assert lines[0].startswith("(APIServer pid=")
        assert "Simulated engine (sardeenz sim-engine): not a real vLLM" in lines[0]
        prefix = r"\(EngineCore_DP0 pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[[a-z_]+\.py:\d+\] "
        for pattern in (
            r"Model loading took 6\.0000 GiB memory and \d+\.\d{6} seconds",
            r"Available KV cache memory: 3\.70 GiB",
            r"GPU KV cache size: \d{2},\d{3} tokens",
            r"Maximum concurrency for 4,096 tokens per request: \d+\.\d\dx",
            r"Graph capturing finished in \d+ secs, took 0\.30 GiB",
            r"init engine \(profile, create kv cache, warmup model\) took 1\.\d\d seconds",
        ):
            assert re.search("^" + prefix + pattern + "$", log, re.MULTILINE), pattern
        assert "vLLM API server version 0.0.0+sim" in log
        assert READY_LINE in lines
        # The EngineCore is a real child named like vLLM's, as the log tag says.
        core = sim.engine_core()
        assert core.name() == "VLLM::EngineCor"
        assert core.pid == core_pid_from_log(log)
        # Sleep endpoints need VLLM_SERVER_DEV_MODE=1 as well.
        for method, path in (("POST", "/sleep"), ("POST", "/wake_up"), ("GET", "/is_sleeping")):
            assert httpx.request(method, f"{sim.base_url}{path}").status_code == 404


def test_fail_after_load_exits_1_with_vllm_error(tmp_path: Path) -> None:
    with running_sim(tmp_path, "--load-seconds", "0.2", "--fail-after-load", ready=False) as sim:
        assert sim.proc.wait(timeout=15) == 1
        log = sim.log()
        assert "EngineCore failed to start." in log
        assert (
            "ValueError: To serve at least one request with the models's max seq len (4096), "
            in log
        )
        assert "Try increasing `gpu_memory_utilization` or decreasing `max_model_len`" in log
        assert log.rstrip().endswith(
            "RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore': 1}"
        )
        assert READY_LINE not in log
        assert gone(core_pid_from_log(log))


def test_sigterm_drains_in_flight_and_stops_engine_core(tmp_path: Path) -> None:
    with running_sim(tmp_path, "--load-seconds", "0.1", "--ttft-ms", "10", "--itl-ms", "5") as sim:
        core = sim.engine_core()
        body = {"model": "sim-model", "prompt": "x", "max_tokens": 100, "stream": True}
        with (
            httpx.Client(timeout=10) as http,
            http.stream("POST", f"{sim.base_url}/v1/completions", json=body) as resp,
        ):
            lines = resp.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            sim.proc.send_signal(signal.SIGTERM)
            rest = [line for line in lines if line.startswith("data: ")]
        assert rest[-1] == "data: [DONE]"
        assert len(rest) == 99 + 2  # the other 99 tokens, the finish chunk, [DONE]
        assert sim.proc.wait(timeout=10) == 0
        sim.wait_for(lambda: gone(core.pid), 3.0, "the EngineCore to exit")
        log = sim.log()
        assert "INFO:     Shutting down" in log
        assert "Shutting down FastAPI HTTP server." in log


def test_group_sigterm_is_a_clean_stop(tmp_path: Path) -> None:
    with running_sim(tmp_path, "--load-seconds", "0.1") as sim:
        core = sim.engine_core()
        os.killpg(sim.proc.pid, signal.SIGTERM)  # how the supervisor stops an engine
        assert sim.proc.wait(timeout=10) == 0
        assert gone(core.pid)
        assert "died unexpectedly" not in sim.log()


def test_engine_core_death_fails_the_server(tmp_path: Path) -> None:
    with running_sim(tmp_path, "--load-seconds", "0.1") as sim:
        sim.engine_core().kill()
        assert sim.proc.wait(timeout=10) == 1
        assert "Engine core proc EngineCore_DP0 died unexpectedly" in sim.log()


def test_sigkill_orphans_engine_core(tmp_path: Path) -> None:
    with running_sim(tmp_path, "--load-seconds", "0.1") as sim:
        core = sim.engine_core()
        sim.proc.kill()
        sim.proc.wait(timeout=5)
        time.sleep(0.3)
        assert core.is_running()
        assert core.status() != psutil.STATUS_ZOMBIE
        assert os.getpgid(core.pid) == sim.proc.pid  # so killpg in cleanup reaches it
    sim.wait_for(lambda: gone(core.pid), 3.0, "killpg to end the orphan")


def test_sigterm_while_loading_exits_0(tmp_path: Path) -> None:
    with running_sim(tmp_path, "--load-seconds", "20", ready=False) as sim:
        sim.wait_log("Starting to load model")
        core_pid = core_pid_from_log(sim.log())
        sim.proc.send_signal(signal.SIGTERM)
        assert sim.proc.wait(timeout=10) == 0
        assert gone(core_pid)


def test_port_in_use_fails_like_vllm(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "sardeenz.sim", "--model", "m", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 1
    assert re.search(
        r"^\(APIServer pid=\d+\) OSError: \[Errno 98\] Address already in use$",
        result.stderr,
        re.MULTILINE,
    )


def test_memory_plan_is_consistent() -> None:
    plan = plan_memory(4.0, 4096)
    assert plan.weights_gib + plan.graphs_gib + plan.kv_gib == pytest.approx(4.0)
    assert (plan.weights_gib, plan.graphs_gib) == (2.4, 0.12)
    assert plan.kv_tokens % 16 == 0
    assert plan.kv_tokens * plan.kv_bytes_per_token <= plan.kv_gib * 2**30
    assert plan.max_concurrency == plan.kv_tokens / 4096
    assert plan.fits
    # Like a real GPU, a context longer than the KV cache cannot be served.
    assert not plan_memory(4.0, 131_072).fits


def test_unknown_flag_exits_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sardeenz.sim", "--model", "m", "--port", "1", "--x"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "error: unrecognized arguments: --x" in result.stderr


def test_start_up_imports_no_controller_machinery() -> None:
    """The engine starts in about 0.1 s because it never imports the controller's stack.

    pydantic alone would add about 0.5 s to every engine start (and tests start many).
    """
    heavy = ("pydantic", "fastapi", "starlette", "sqlalchemy", "typer", "httpx")
    code = (
        "import sys, sardeenz.sim.server\n"
        # A None entry is an import blocked, not made (sardeenz/__init__.py: httpx._main).
        "print(sorted(m for m, mod in sys.modules.items() if mod is not None and ("
        f"m.split('.')[0] in {heavy!r} or m.startswith(('sardeenz.config', "
        "'sardeenz.domain', 'sardeenz.engines')))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    assert result.stdout.strip() == "[]"


def test_idle_keep_alive_follows_vllm_http_timeout_keep_alive(tmp_path: Path) -> None:
    """Like vLLM, the server closes an idle connection after VLLM_HTTP_TIMEOUT_KEEP_ALIVE s."""
    with (
        running_sim(tmp_path, env={"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "1"}) as sim,
        socket.create_connection(("127.0.0.1", sim.port), timeout=10) as sock,
    ):
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        assert sock.recv(4096) == b""  # closed by the engine
        assert 0.5 < time.monotonic() - started < 4
