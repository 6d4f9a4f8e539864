"""The relay's semantics: what a client sees when an engine fails, decided once.

Two code paths relay an engine's response: the express path (express.py,
protocol callbacks, no task) and the general handler (forwarder.py and
asgirelay.py, ASGI). A client must not be able to tell which one answered,
so every decision that shapes what it sees is taken here and both paths
call it:

* **before the first byte** reached the client: a connection that could not
  be made is 503 ``engine_unavailable`` with ``Retry-After`` (nothing reached
  the engine: the handler first tries another instance once); an engine
  that failed while or before answering is 502 ``engine_failed``;
* **after the first byte**: an SSE stream gets a final ``event: error`` in
  OpenAI's error shape and ends cleanly; any other body is cut (the client
  connection is closed) because a truncated JSON document must not look
  complete. Either way the request counts as 502;
* **a stale pooled connection** (the engine closed an idle keep-alive
  connection as we used it) is retried on a fresh one, but only when that is
  what happened: the connection was reused, no response byte arrived, and it
  failed within ``STALE_RETRY_WINDOW``; anything else may have reached the
  engine and is not repeated;
* **an engine's error in another shape** (a ``{"detail": "Not Found"}``
  from an engine's web framework for a path it does not serve, a plain
  text body) is rewritten in OpenAI's error shape on ``/v1``, status kept.
  OpenAI-shaped errors, and vLLM's flat ``{"object": "error", "message":
  ...}`` (which OpenAI's clients read too), are relayed as they are.
  ``/api/direct`` relays the engine's bytes unchanged;
* **small bodies are read whole** (``READ_WHOLE_LIMIT``) and sent in one
  write, so an engine dying while sending one is still a clean 502;
* **an operator's end** (a forced sleep, an unload whose grace ran out, or
  the engine dropping requests while it stops; see proxy/inflight.py): the
  same two shapes, with code ``model_sleeping`` / ``model_unloaded`` instead
  of ``engine_failed``, so a client can tell it from a crash;
* **the metrics** of a request (in flight, overhead, time to first byte,
  duration, count by status) are observed by the functions at the bottom.

These are plain functions on plain values: the express path calls them on
every request and they allocate nothing beyond the error bytes of a failure.
"""

from __future__ import annotations

import http
import time
from typing import TYPE_CHECKING, Any, Final

import orjson

from sardeenz.proxy.wire import ErrorReply, openai_error

if TYPE_CHECKING:
    from sardeenz.proxy.metrics import ModelMetrics

_perf = time.perf_counter

STALE_RETRY_WINDOW: Final = 1.0
"""Seconds within which a reused connection that failed with no reply is retried."""
READ_WHOLE_LIMIT: Final = 1 << 20
"""Non-stream bodies up to this size (with a Content-Length) are read whole
and sent in one message: fewer sends, and an engine death while reading them
still becomes a clean 502 instead of a cut connection."""
CUT_STATUS: Final = 502
"""The status a request counts as when the engine failed after its first byte."""


def label(model: str | None, port: int) -> str:
    """How an error message names what failed: the model, or the port on ``/api/direct``."""
    return repr(model) if model is not None else f"port {port}"


# ----------------------------------------------------------- before the first byte
def may_retry_stale(reused: bool, received: bool, elapsed: float) -> bool:
    """Was this failure the engine closing an idle pooled connection under us?

    Only then is resending safe: the request cannot have been processed.
    """
    return reused and not received and elapsed < STALE_RETRY_WINDOW


def engine_unreachable(what: str) -> ErrorReply:
    """No connection to the engine (after the handler tried another instance)."""
    return ErrorReply(
        503,
        f"The engine serving {what} is not reachable; retry shortly",
        "service_unavailable_error",
        "engine_unavailable",
        headers=[(b"retry-after", b"1")],
    )


MODEL_SLEEPING: Final = "model_sleeping"
"""End code of requests cut by a forced sleep (``POST .../sleep`` with ``force``)."""
MODEL_UNLOADED: Final = "model_unloaded"
"""End code of requests cut by an unload (still running when the stop grace ran out)."""
POD_UNAVAILABLE: Final = "pod_unavailable"
"""End code of requests forwarded to a pod the failure detector then called unavailable
(cluster/remote_routes.py): nothing would ever answer them (a network cut sends no reset)."""
_ENDED_BY: Final = {
    MODEL_SLEEPING: "was put to sleep by an operator",
    MODEL_UNLOADED: "was unloaded by an operator",
    POD_UNAVAILABLE: "became unreachable (the pod serving it is unavailable)",
}


def ended_message(what: str, code: str) -> str:
    """The client's message when an operator ended the request (not an engine crash)."""
    return f"The model {what} {_ENDED_BY.get(code, 'was stopped')} while this request ran"


def engine_failed(what: str, received: bool, code: str | None = None) -> ErrorReply:
    """The engine failed before the client got a byte; ``received``: part of a reply came.

    ``code``: the instance's end code when an operator ended it (``Inflight.end_code``):
    the client then learns it was a sleep or an unload, not an engine crash.
    """
    if code is not None:
        return ErrorReply(502, ended_message(what, code), "service_unavailable_error", code)
    return ErrorReply(
        502,
        f"The engine serving {what} failed {_when(received)} answering",
        "upstream_error",
        "engine_failed",
    )


def failure_note(error: Exception, received: bool) -> str:
    """The operator's log line for an engine failure before the first byte."""
    return f"engine failed {_when(received)} answering: {error}"


def _when(received: bool) -> str:
    return "while" if received else "before"


_ERROR_CODES: Final = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    422: "invalid_request",
    429: "rate_limit_exceeded",
}
_MAX_MESSAGE: Final = 2000


def is_error(status: int, length: int | None, event_stream: bool) -> bool:
    """Does this engine response get its body checked for OpenAI's error shape?

    Errors are small; one that declares more than ``READ_WHOLE_LIMIT`` is
    relayed as it comes rather than held in memory.
    """
    return status >= 400 and not event_stream and (length is None or length <= READ_WHOLE_LIMIT)


def openai_error_response(
    status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """An engine's error response as a ``/v1`` client gets it: in OpenAI's shape.

    A body already in that shape is kept byte for byte; anything else gets
    the engine's message (``detail``, a flat ``message``, or the text) in an
    ``{"error": {...}}`` envelope. The status is the engine's either way.
    """
    out = _translated(status, body)
    if out is None:
        out = body
        rest = [(k, v) for k, v in headers if k != b"content-length"]
    else:
        rest = [(k, v) for k, v in headers if k not in (b"content-length", b"content-type")]
        rest.append((b"content-type", b"application/json"))
    rest.append((b"content-length", b"%d" % len(out)))
    return rest, out


def _translated(status: int, body: bytes) -> bytes | None:
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    type_ = "invalid_request_error" if status < 500 else "upstream_error"
    code: Any = _ERROR_CODES.get(status, "engine_error")
    param: Any = None
    message: Any = None
    if isinstance(doc, dict):
        error = doc.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return None  # OpenAI's shape already
        if doc.get("object") == "error" and isinstance(doc.get("message"), str):
            return None  # vLLM's flat ErrorResponse: OpenAI's clients read it as is
        if isinstance(doc.get("message"), str):
            message = doc["message"]
            type_ = doc["type"] if isinstance(doc.get("type"), str) else type_
            code = doc["code"] if isinstance(doc.get("code"), str | int) else code
            param = doc["param"] if isinstance(doc.get("param"), str) else None
        elif "detail" in doc:  # FastAPI / Starlette
            detail = doc["detail"]
            message = detail if isinstance(detail, str) else orjson.dumps(detail).decode()
    if message is None:
        text = body.decode("utf-8", "replace").strip()
        message = text or _phrase(status)
    return openai_error(str(message)[:_MAX_MESSAGE], type_, str(code), param)


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return f"engine error {status}"


def read_whole(length: int | None, event_stream: bool) -> bool:
    """Buffer this response and send head and body in one write? (See READ_WHOLE_LIMIT.)"""
    return length is not None and length <= READ_WHOLE_LIMIT and not event_stream


# ------------------------------------------------------------ after the first byte
def cut_note(error: Exception) -> str:
    """The operator's log line for an engine failure after the response started."""
    return f"engine failed mid-response: {error}"


def stream_end_on_failure(
    what: str, event_stream: bool, last: bytes, code: str | None = None
) -> bytes | None:
    """The bytes that end a started response after an engine failure, or None: cut it.

    ``last`` is the last body data relayed, to know whether the error event
    needs a blank line to start on an event boundary. ``code`` as in ``engine_failed``.
    """
    if not event_stream:
        return None
    if code is not None:
        err = openai_error(ended_message(what, code), "service_unavailable_error", code)
    else:
        err = openai_error(
            f"The engine serving {what} failed mid-stream", "upstream_error", "engine_failed"
        )
    sep = b"" if last.endswith(b"\n\n") else b"\n\n"
    return sep + b"event: error\ndata: " + err + b"\n\n"


# ---------------------------------------------------------------------- metrics
def started(mm: ModelMetrics) -> None:
    """The request is being relayed (in flight until ``finished`` or ``withdrawn``)."""
    mm.in_flight += 1


def head_sent(mm: ModelMetrics, t0: float, t1: float, t2: float) -> None:
    """The response head went out: the proxy's overhead is (t0 -> t1) + (t2 -> now).

    t0: request received; t1: upstream request sent; t2: upstream head received.
    """
    mm.overhead.observe((t1 - t0) + (_perf() - t2))


def first_byte(mm: ModelMetrics, t0: float) -> float:
    """The first body bytes went out (or the response ended without any): the time
    since t0, which the request log keeps as a stream's time to first token."""
    ttfb = _perf() - t0
    mm.ttfb.observe(ttfb)
    return ttfb


def finished(mm: ModelMetrics, t0: float, status: int) -> float:
    """The request is over with ``status`` (499: the client left first); its latency."""
    mm.in_flight -= 1
    mm.count(status)
    latency = _perf() - t0
    mm.duration.observe(latency)
    return latency


def withdrawn(mm: ModelMetrics) -> None:
    """The express path gave the request to the handler, which counts it itself."""
    mm.in_flight -= 1
