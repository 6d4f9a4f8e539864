"""The JSON-lines formatter keeps the one-record-per-line rule of ``safetext``."""

from __future__ import annotations

import io
import json
import logging

from sardeenz.logsetup import JsonLineFormatter, configure_logging, request_id


def _record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("sardeenz.t", logging.WARNING, __file__, 1, msg, args, None)


def test_json_record_is_one_line_with_controls_escaped() -> None:
    out = JsonLineFormatter().format(_record("model %s", "a\nFAKE\x1b[31m"))
    assert "\n" not in out
    entry = json.loads(out)
    assert entry["msg"] == "model a\\x0aFAKE\\x1b[31m"
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "sardeenz.t"
    assert "request_id" not in entry


def test_json_record_carries_the_request_id() -> None:
    token = request_id.set("r-1")
    try:
        entry = json.loads(JsonLineFormatter().format(_record("hello")))
    finally:
        request_id.reset(token)
    assert entry["request_id"] == "r-1"


def test_json_exception_stays_on_the_line() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        import sys

        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom", (), sys.exc_info())
    out = JsonLineFormatter().format(rec)
    assert "\n" not in out
    assert "ValueError" in json.loads(out)["exc"]


def test_http_client_request_logs_only_at_debug() -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        configure_logging("info", "text", io.StringIO())
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
        assert not logging.getLogger("httpcore").isEnabledFor(logging.INFO)
        # alembic's set-up and migration steps do not drown the start-up (issue 25)
        assert not logging.getLogger("alembic.runtime.migration").isEnabledFor(logging.INFO)
        assert logging.getLogger("alembic.runtime.migration").isEnabledFor(logging.WARNING)
        configure_logging("debug", "json", io.StringIO())
        assert logging.getLogger("httpx").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("alembic").isEnabledFor(logging.DEBUG)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        for name in ("httpx", "httpcore", "alembic"):
            logging.getLogger(name).setLevel(logging.NOTSET)
