"""The engine log buffer keeps the engine's own lines however long the health polls go on
(issue 25 item 2: ``sardeenz models logs -n 10`` printed nothing on a server up for an
hour, every line of the buffer being a ``GET /health`` access line)."""

from __future__ import annotations

from sardeenz.healthpolls import is_health_poll
from sardeenz.runtime.logs import POLL_LINES, LogBuffer

POLL = 'INFO:     127.0.0.1:55912 - "GET /health HTTP/1.1" 200 OK'


def test_polls_never_push_the_engines_own_lines_out() -> None:
    buf = LogBuffer(100)
    for n in range(5):
        buf.append(f"engine line {n}")
    for _ in range(10 * POLL_LINES):  # hours of polls
        buf.append(POLL)
    own = [ln for ln in buf.lines() if not is_health_poll(ln)]
    assert own == [f"engine line {n}" for n in range(5)]
    polls = [ln for ln in buf.lines() if is_health_poll(ln)]
    assert len(polls) == min(100, POLL_LINES)


def test_lines_come_back_in_arrival_order_and_last_counts_both() -> None:
    buf = LogBuffer(10)
    sent = ["a", POLL, "b", POLL, "c"]
    for line in sent:
        buf.append(line)
    assert buf.lines() == sent
    assert buf.lines(2) == [POLL, "c"]
    assert len(buf) == 5
    for n in range(20):  # the engine's own lines still roll over at max_lines
        buf.append(f"x{n}")
    assert [ln for ln in buf.lines() if not is_health_poll(ln)] == [f"x{n}" for n in range(10, 20)]
