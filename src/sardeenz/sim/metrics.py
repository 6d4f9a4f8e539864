"""vLLM's Prometheus metrics, as the simulated engine exposes them on ``/metrics``.

The controller scrapes engines for ``vllm:*`` gauges and counters (running, waiting,
KV usage, sleep state, token counts, latency histograms), so the names, help texts,
labels and buckets here are vLLM's. ``sardeenz_sim_*`` counters are the only
additions, and say they are simulated.

The text is written here rather than by ``prometheus_client``: importing that library
(its exposition module pulls in ``http.server``, ``wsgiref`` and ``urllib.request``)
was about a seventh of a sim engine's start-up CPU, paid at every model load of a demo
and a few hundred times a test run, for a dozen fixed series. The output is byte for
byte what ``prometheus_client.generate_latest`` writes for the same metrics with
``_created`` series disabled (as vLLM runs it): the same order, label escaping and
float formatting (tests/unit/test_sim_metrics_text.py renders both and compares).
The sim serves one request at a time on one event loop, so plain floats need no lock.
"""

from __future__ import annotations

import math
from typing import Final

__all__ = ["CONTENT_TYPE", "FINISH_REASONS", "SimMetrics"]

CONTENT_TYPE: Final = "text/plain; version=1.0.0; charset=utf-8"
"""``prometheus_client.CONTENT_TYPE_LATEST`` of the client vLLM and the controller use."""

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


def go_float(value: float) -> str:
    """A float as Prometheus's text format (and Go) writes it: ``+Inf``, ``1e+06``, ``0.5``."""
    value = float(value)  # a bucket's count is an int, written as a float
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    # Go switches to an exponent sooner than Python (prometheus_client's floatToGoString).
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Value:
    """One gauge or counter series."""

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = float(value)

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class Histogram:
    """One histogram series: a count per bucket (the last is ``+Inf``) and the sum."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = (*bounds, math.inf)
        self.les = [go_float(b) for b in self.bounds]
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.sum += amount
        for i, bound in enumerate(self.bounds):
            if amount <= bound:
                self.counts[i] += 1
                break


def _labels(pairs: dict[str, str]) -> str:
    """``{a="1",b="2"}`` with the names sorted, as the text format writes them."""
    inner = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(pairs.items()))
    return f"{{{inner}}}"


class _Family:
    """A metric name, its help and type lines, and its series in the order they were made."""

    def __init__(self, kind: str, name: str, help_text: str) -> None:
        self.kind = kind
        self.name = name
        # A counter's samples (and so its HELP and TYPE lines) carry ``_total``.
        self.shown = f"{name}_total" if kind == "counter" else name
        escaped = help_text.replace("\\", r"\\").replace("\n", r"\n")
        self.head = f"# HELP {self.shown} {escaped}\n# TYPE {self.shown} {kind}\n"
        self.series: list[tuple[dict[str, str], Value | Histogram]] = []

    def lines(self, out: list[str]) -> None:
        out.append(self.head)
        for labels, metric in self.series:
            if isinstance(metric, Value):
                out.append(f"{self.shown}{_labels(labels)} {go_float(metric.value)}\n")
                continue
            total = 0
            for le, count in zip(metric.les, metric.counts, strict=True):
                total += count
                bucket = _labels({**labels, "le": le})
                out.append(f"{self.name}_bucket{bucket} {go_float(total)}\n")
            out.append(f"{self.name}_count{_labels(labels)} {go_float(total)}\n")
            out.append(f"{self.name}_sum{_labels(labels)} {go_float(metric.sum)}\n")


class SimMetrics:
    """vLLM's metric names and labels (``model_name``, ``engine="0"``), in vLLM's order.

    Only these series, as vLLM exposes them: no ``process_*``/``python_*`` defaults.
    """

    def __init__(self, model_name: str) -> None:
        self._labels = {"model_name": model_name, "engine": "0"}
        self._families: list[_Family] = []
        self.running = self._one(
            "gauge", "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = self._one(
            "gauge", "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.kv_usage = self._one(
            "gauge", "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        self.sleep_state = self._by(
            "gauge",
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
            "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
            "sleep level 2.",
            "sleep_state",
            _SLEEP_STATES,
        )
        self.prompt_tokens = self._one(
            "counter", "vllm:prompt_tokens", "Number of prefill tokens processed."
        )
        self.generation_tokens = self._one(
            "counter", "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self.success = self._by(
            "counter",
            "vllm:request_success",
            "Count of successfully processed requests.",
            "finished_reason",
            FINISH_REASONS,
        )
        self.ttft = self._histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            _TTFT_BUCKETS,
        )
        self.e2e = self._histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            _E2E_BUCKETS,
        )
        self.wakeups = self._one(
            "counter", "sardeenz_sim_wakeups", "Simulated engine only: completed wake-ups."
        )
        self.slow_after_wake = self._one(
            "counter",
            "sardeenz_sim_slow_after_wake_requests",
            "Simulated engine only: requests that ran slower as the first after a wake-up "
            "(--wake-slowdown).",
        )
        self.sleeps = self._one(
            "counter", "sardeenz_sim_sleeps", "Simulated engine only: times the engine fell asleep."
        )
        self.set_sleep_state(None)

    def _family(self, kind: str, name: str, help_text: str) -> _Family:
        family = _Family(kind, name, help_text)
        self._families.append(family)
        return family

    def _one(self, kind: str, name: str, help_text: str) -> Value:
        value = Value()
        self._family(kind, name, help_text).series.append((self._labels, value))
        return value

    def _by(
        self, kind: str, name: str, help_text: str, label: str, keys: tuple[str, ...]
    ) -> dict[str, Value]:
        """One series per value of a third label (``sleep_state``, ``finished_reason``)."""
        family = self._family(kind, name, help_text)
        values = {key: Value() for key in keys}
        family.series.extend(({**self._labels, label: k}, v) for k, v in values.items())
        return values

    def _histogram(self, name: str, help_text: str, buckets: tuple[float, ...]) -> Histogram:
        histogram = Histogram(buckets)
        self._family("histogram", name, help_text).series.append((self._labels, histogram))
        return histogram

    def set_sleep_state(self, level: int | None) -> None:
        self.sleep_state["awake"].set(1 if level is None else 0)
        self.sleep_state["weights_offloaded"].set(1 if level == 1 else 0)
        self.sleep_state["discard_all"].set(1 if level == 2 else 0)

    def render(self) -> bytes:
        """The text ``prometheus_client.generate_latest`` writes for these metrics."""
        out: list[str] = []
        for family in self._families:
            family.lines(out)
        return "".join(out).encode()
