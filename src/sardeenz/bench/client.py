"""One streamed completion request, timed: the unit of every benchmark.

Why streaming with ``stream_options.include_usage``: the first SSE event
carrying text marks time to first token, the last one the end of decoding,
and the final usage event gives the engine's own token counts. Chunks are
never counted as tokens (an engine may pack several tokens into one event,
and does when it falls behind).

Where the clock starts: when the request body has been handed to the
socket (aiohttp's ``on_request_chunk_sent`` trace signal, installed by
:func:`trace_config`), not before ``session.post``. Building an aiohttp
request takes a few hundred microseconds of our own CPU (measured 0.4 to
0.5 ms on the 2-vCPU test VM), which is not the engine's latency and was
half of the 1 ms accuracy budget. A session without the trace falls back
to the time before the call.

Per streamed event the client does one ``perf_counter()`` per network read
and a few byte searches: the SSE body is split by hand on blank lines,
token events are recognised without a JSON parse (:func:`read_event`), and
the read timeout is one deadline for the exchange pushed forward at most
once a second (aiohttp's ``sock_read`` re-arms a timer on every read). On
the 2-vCPU test VM these took the client's CPU per streamed event from
about 55 to about 43 us (``benchmarks/runner_capacity.py`` measures what the
runner adds to a TTFT).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import orjson

from sardeenz.bench.stats import RequestSample

_JSON_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}

READ_TIMEOUT: Final = 300.0
"""Seconds without a byte from the server before a request counts as failed."""
_REARM_EVERY: Final = 1.0
"""The read deadline is pushed forward at most once a second, not on every event."""
_ERROR_BODY_LIMIT = 2000


class _SentAt:
    """Per-request slot the trace callback writes the send time into."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: float | None = None


async def _on_chunk_sent(
    _session: aiohttp.ClientSession, ctx: Any, _params: aiohttp.TraceRequestChunkSentParams
) -> None:
    slot = ctx.trace_request_ctx
    if isinstance(slot, _SentAt):
        slot.at = time.perf_counter()  # the last body chunk wins


def trace_config() -> aiohttp.TraceConfig:
    """The trace that stamps when a request's body has been written (see module docstring)."""
    config = aiohttp.TraceConfig()
    config.on_request_chunk_sent.append(_on_chunk_sent)
    return config


@dataclass(frozen=True, slots=True)
class Target:
    """Where a scenario sends its requests: a ``/v1/completions`` URL and the model name."""

    url: str
    model: str
    headers: dict[str, str] = field(default_factory=dict)


def completion_body(model: str, prompt: str, max_tokens: int) -> bytes:
    """The request body: exactly ``max_tokens`` tokens (``ignore_eos``), streamed, with usage."""
    return orjson.dumps(
        {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )


def _error_text(payload: Any) -> str:
    if isinstance(payload, dict):
        err = payload.get("error", payload)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)
        return str(err)
    return str(payload)


_TEXT_KEY = b'"text":"'
_TEXT_AT = len(_TEXT_KEY)
_QUOTE = ord('"')


def read_event(data: bytes) -> tuple[bool, dict[str, Any] | None, str | None]:
    """One SSE ``data:`` payload -> (carries text, usage if any, error if any).

    Fast path, for the token events that make up nearly all of a stream: in
    compact JSON without ``"error"`` or a ``"usage"`` object, the first
    ``"text":"`` is the key of ``choices[0].text`` (a string value cannot
    contain an unescaped quote), and the byte after it says whether the text
    is empty. Anything else (usage, errors, other spacing) is parsed in full.
    """
    if data == b"[DONE]":
        return False, None, None
    if b'"error"' not in data and b'"usage":{' not in data and b'"usage": {' not in data:
        i = data.find(_TEXT_KEY)
        if i >= 0 and len(data) > i + _TEXT_AT:
            return data[i + _TEXT_AT] != _QUOTE, None, None
    obj = orjson.loads(data)
    if not isinstance(obj, dict):
        return False, None, None
    if "error" in obj:
        return False, None, _error_text(obj)
    choices = obj.get("choices")
    text = bool(
        isinstance(choices, list)
        and choices
        and isinstance(choices[0], dict)
        and choices[0].get("text")
    )
    usage = obj.get("usage")
    return text, usage if isinstance(usage, dict) and usage else None, None


async def stream_completion(
    session: aiohttp.ClientSession,
    target: Target,
    body: bytes,
    read_timeout: float = READ_TIMEOUT,
) -> RequestSample:
    """Send one streamed completion and time it. Never raises except on cancellation.

    ``read_timeout``: the request fails when the server sends nothing for
    that long (less at most a quarter of it, or ``_REARM_EVERY``), headers
    included.

    A request counts as successful when the answer is 200, the stream carries
    at least one token and a usage event, and no error event. Anything else
    is a failed sample with the reason in ``error``.
    """
    clock = time.perf_counter
    headers = {**_JSON_HEADERS, **target.headers} if target.headers else _JSON_HEADERS
    sent = _SentAt()
    started = clock()
    first: float | None = None
    last: float | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None
    loop = asyncio.get_running_loop()
    try:
        # One deadline for the whole exchange, pushed forward as data arrives: aiohttp's
        # own sock_read timeout re-arms a timer on every read, a cost per event.
        async with (
            asyncio.timeout_at(loop.time() + read_timeout) as deadline,
            session.post(target.url, data=body, headers=headers, trace_request_ctx=sent) as resp,
        ):
            if sent.at is not None:
                started = sent.at
            if resp.status != 200:
                raw = await resp.content.read(_ERROR_BODY_LIMIT)
                try:
                    detail = _error_text(orjson.loads(raw))
                except orjson.JSONDecodeError:
                    detail = raw.decode(errors="replace").strip()
                return RequestSample(
                    started=started, ended=clock(), ok=False, error=f"HTTP {resp.status}: {detail}"
                )
            content = resp.content
            buf = b""
            armed = clock()
            rearm = min(_REARM_EVERY, read_timeout / 4)
            while chunk := await content.readany():
                now = clock()
                if now - armed > rearm:
                    deadline.reschedule(loop.time() + read_timeout)
                    armed = now
                buf = buf + chunk if buf else chunk
                if b"\r" in buf:
                    buf = buf.replace(b"\r\n", b"\n")
                start = 0
                while (end := buf.find(b"\n\n", start)) >= 0:
                    event = buf[start:end]
                    start = end + 2
                    for line in event.split(b"\n") if b"\n" in event else (event,):
                        if line[:5] != b"data:":
                            continue
                        text, got, failure = read_event(line[5:].strip())
                        if text:
                            if first is None:
                                first = now
                            last = now
                        if got is not None:
                            usage = got
                        if failure is not None:
                            error = failure
                buf = buf[start:]
    except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError, ValueError) as exc:
        return RequestSample(
            started=started,
            ended=clock(),
            ok=False,
            first_token_at=first,
            last_token_at=last,
            error=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
        )
    ended = clock()
    if error is None and usage is None:
        error = "the stream carried no usage event (stream_options.include_usage)"
    if error is None and first is None:
        error = "the stream carried no tokens"
    completion = int(usage.get("completion_tokens") or 0) if usage else 0
    prompt = int(usage.get("prompt_tokens") or 0) if usage else 0
    return RequestSample(
        started=started,
        ended=ended,
        ok=error is None,
        first_token_at=first,
        last_token_at=last,
        completion_tokens=completion,
        prompt_tokens=prompt,
        error=error,
    )


async def tokenize_count(
    session: aiohttp.ClientSession, url: str, model: str, text: str
) -> int | None:
    """Token count of ``text`` by the engine's ``POST /tokenize``; None if it has none."""
    try:
        async with session.post(
            url,
            data=orjson.dumps({"model": model, "prompt": text}),
            headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=30),
        ) as resp:
            if resp.status != 200:
                return None
            payload = orjson.loads(await resp.read())
    except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError):
        return None
    count = payload.get("count") if isinstance(payload, dict) else None
    if isinstance(count, int) and not isinstance(count, bool):
        return count
    tokens = payload.get("tokens") if isinstance(payload, dict) else None
    return len(tokens) if isinstance(tokens, list) else None
