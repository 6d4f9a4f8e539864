"""The uvicorn internals the fast lane (proxy/fastlane.py) relies on are still there.

The lane is handed to uvicorn as its HTTP protocol class, registers itself in
uvicorn's ``ServerState`` and passes connections on to uvicorn's
``HttpToolsProtocol``. None of that is public API, so pyproject.toml pins
uvicorn to the versions checked, and this file fails with the name of what
changed when an upgrade moves one of them. Each check is one thing the lane
does; if one fails, read the lane's use of it before widening the pin.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import socket
import tomllib
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from packaging.requirements import Requirement
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import Server, ServerState

from testkit.waiting import within

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
HINT = "proxy/fastlane.py relies on it; adapt the lane, then the pin in pyproject.toml"


def changed(what: str) -> str:
    return f"uvicorn {uvicorn.__version__}: {what}. {HINT}"


def test_installed_uvicorn_is_within_the_pinned_range() -> None:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    pins = [Requirement(d) for d in deps if re.match(r"uvicorn\b", d)]
    assert len(pins) == 1, "pyproject.toml must name uvicorn exactly once"
    spec = pins[0].specifier
    assert spec.filter([uvicorn.__version__]), (
        f"uvicorn {uvicorn.__version__} is outside the pin {spec} in pyproject.toml: "
        "the fast lane was checked against that range only (run this file after widening it)"
    )
    assert any(s.operator in ("<", "<=", "==", "~=") for s in spec), (
        "the uvicorn pin needs an upper bound: an upgrade may move the fast lane's internals"
    )


def test_server_state_has_what_the_lane_registers_in() -> None:
    state = ServerState()
    for name, kind in (
        ("connections", set),  # graceful shutdown finds the lane's connections here
        ("tasks", set),  # and waits for the lane's ASGI tasks here
        ("total_requests", int),  # limit_max_requests counts the lane's requests
        ("default_headers", list),  # the lane writes uvicorn's date/server headers
    ):
        assert isinstance(getattr(state, name, None), kind), changed(
            f"ServerState().{name} is no longer a {kind.__name__}"
        )


def test_config_takes_a_protocol_class_and_keeps_the_keep_alive_timeout() -> None:
    class Marker(asyncio.Protocol):
        pass

    config = Config(app=_app, http=Marker, timeout_keep_alive=7)
    config.load()
    assert getattr(config, "http_protocol_class", None) is Marker, changed(
        "Config(http=<class>) no longer uses the class as the connection protocol"
    )
    assert getattr(config, "timeout_keep_alive", None) == 7, changed(
        "Config.timeout_keep_alive is gone (the lane's idle timer reads it)"
    )


def test_http_tools_protocol_can_take_over_a_connection() -> None:
    params = inspect.signature(HttpToolsProtocol.__init__).parameters
    for name in ("config", "server_state", "app_state", "_loop"):
        assert name in params, changed(
            f"HttpToolsProtocol.__init__ lost its {name!r} parameter (the lane's hand-over)"
        )
    for method in ("connection_made", "data_received", "pause_writing", "shutdown"):
        assert callable(getattr(HttpToolsProtocol, method, None)), changed(
            f"HttpToolsProtocol.{method} is gone (called when the lane hands a connection over)"
        )


def test_http_tools_protocol_has_what_the_head_guard_overrides() -> None:
    """proxy/headguard.py wraps these parser callbacks and the 400 reply."""
    for method in (
        "connection_lost",
        "on_message_begin",
        "on_header",
        "on_headers_complete",
        "on_message_complete",
        "send_400_response",
        "_unset_keepalive_if_required",  # called on every connection_lost (a reset too)
    ):
        assert callable(getattr(HttpToolsProtocol, method, None)), changed(
            f"HttpToolsProtocol.{method} is gone (proxy/headguard.py overrides or calls it)"
        )
    source = inspect.getsource(HttpToolsProtocol.data_received)
    assert "send_400_response" in source, changed(
        "HttpToolsProtocol.data_received no longer answers parser errors with "
        "send_400_response (the head guard suppresses that reply after its 431)"
    )


def test_request_response_cycle_has_what_the_body_timeout_uses() -> None:
    """proxy/headguard.py's body timeout answers 408 unless the response started, then
    tells the app its client is gone (``disconnected`` + ``message_event``)."""
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    init = inspect.getsource(RequestResponseCycle.__init__)
    for name in ("response_started", "disconnected", "message_event"):
        assert f"self.{name} =" in init, changed(f"RequestResponseCycle.{name} is gone")
    receive = inspect.getsource(RequestResponseCycle.receive)
    for needed in ("self.disconnected", "http.disconnect"):
        assert needed in receive, changed(
            "RequestResponseCycle.receive no longer returns http.disconnect once disconnected"
        )


async def _app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})


@pytest.mark.timeout(20)
async def test_server_builds_the_protocol_and_shuts_it_down_as_the_lane_expects() -> None:
    """One real uvicorn server: the keyword arguments it builds a connection's
    protocol with, the default headers it fills in, and ``shutdown()`` on every
    connection registered in ``server_state.connections``."""
    built: list[dict[str, Any]] = []
    shut: list[bool] = []
    connected = asyncio.Event()

    class Recording(asyncio.Protocol):
        def __init__(self, **kwargs: Any) -> None:
            built.append(kwargs)
            self.state: ServerState = kwargs["server_state"]

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            self.state.connections.add(self)  # type: ignore[arg-type]
            connected.set()

        def connection_lost(self, exc: Exception | None) -> None:
            self.state.connections.discard(self)

        def shutdown(self) -> None:
            shut.append(True)
            self.transport.close()

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = Config(
        app=_app, host="127.0.0.1", port=port, http=Recording, loop="none", log_level="error"
    )
    server = Server(config)
    serve = asyncio.get_running_loop().create_task(server.serve())
    try:
        while not server.started:
            assert not serve.done(), "uvicorn did not start"
            await asyncio.sleep(0.01)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        await within(connected.wait(), 5, "the recording protocol saw the connection")
        names = {h[0] for h in server.server_state.default_headers}
        server.should_exit = True
        await within(serve, 10, "uvicorn's serve() ended after should_exit")
        writer.close()
    finally:
        server.should_exit = True
        if not serve.done():
            serve.cancel()
    assert built, changed("the server built no protocol from Config(http=<class>)")
    assert set(built[0]) == {"config", "server_state", "app_state", "_loop"}, changed(
        f"the connection protocol is now built with {sorted(built[0])}"
        ", not config/server_state/app_state/_loop"
    )
    assert built[0]["config"] is config, changed("the protocol no longer gets the Config")
    assert isinstance(built[0]["server_state"], ServerState), changed(
        "the protocol no longer gets the ServerState"
    )
    assert isinstance(built[0]["app_state"], dict), changed("app_state is no longer a dict")
    for name in (b"date", b"server"):
        assert name in names, changed(
            f"server_state.default_headers holds {sorted(names)}, not {name.decode()}"
        )
    assert shut, changed("graceful shutdown no longer calls shutdown() on registered connections")
