"""Talking to a running server: the base URL, calls, SSE streams and their errors.

Every operator command goes through ``Api``: one place turns a refused
connection into "how to start the server", an error response into the
server's ``detail (code)``, and ``localhost:3000`` into a URL.

It speaks HTTP with the standard library's ``http.client``, not httpx: a command
is one or two requests to a known server, and httpx's import plus the TLS context
it builds for every client (the whole CA bundle, even for ``http://127.0.0.1``)
cost more CPU than the rest of the command (issue 25; benchmarks/cli_startup.py).
TLS is set up only for an ``https`` URL.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn
from urllib.parse import urlencode, urljoin, urlsplit

import typer
from rich.console import Console

from sardeenz.safetext import escape_unsafe

__all__ = [
    "DEFAULT_URL",
    "Api",
    "ConnectionLost",
    "Response",
    "TokenOpt",
    "UrlOpt",
    "die",
    "err",
    "normalize_url",
]

DEFAULT_URL = "http://127.0.0.1:3000"

# soft_wrap: a long error stays one line in a pipe or log (rich would cut it at 80).
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)

UrlOpt = Annotated[
    str,
    typer.Option(
        "--url",
        envvar="SARDEENZ_URL",
        help="Base URL of a running server; 'localhost:3000' works too (http is assumed).",
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", envvar="SARDEENZ_TOKEN", help="Bearer token for the admin API."),
]

EXIT_USAGE = 2


def die(message: str, code: int = 1) -> NoReturn:
    """Print ``message`` on stderr and exit: no markup or emoji codes, and no control
    character of its content (a name the server stored) reaches the terminal."""
    shown = "\n".join(escape_unsafe(line) for line in message.split("\n"))
    err.print(shown, markup=False, soft_wrap=True, style="red")
    raise typer.Exit(code)


def normalize_url(url: str) -> str:
    """``localhost:3000`` -> ``http://localhost:3000``; a trailing slash is dropped.

    Without this, httpx reads ``localhost`` as a URL scheme and fails with an
    error that says nothing about the missing ``http://``.
    """
    text = url.strip().rstrip("/")
    if "://" not in text:
        text = f"http://{text}"
    return text


class ConnectionLost(Exception):
    """The server stopped answering in the middle of a stream (or never answered)."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def _unreachable(url: str, exc: OSError) -> NoReturn:
    if isinstance(exc, ConnectionRefusedError):
        die(
            f"cannot reach {url}: connection refused (no server listening there).\n"
            "Start one with `sardeenz serve` (or `sardeenz serve --demo` to try it on "
            "simulated GPUs),\nor point the CLI at a running one with --url HOST:PORT "
            "or SARDEENZ_URL."
        )
    die(f"cannot reach {url}: {exc}")


def error_message(resp: Response, flags: Mapping[str, str] | None = None) -> str:
    """The server's ``detail (code)``, or its raw text when the body is not ours.

    ``flags`` maps request fields to the command's flags: a validation error about
    ``gpuMemoryLimit`` is reported as one about ``--gpu-memory-limit``, and "pass
    force: true" as "pass --force", the names the operator typed, not the API's.
    """
    try:
        body = resp.json()
    except ValueError:
        return resp.text
    if not (isinstance(body, dict) and "detail" in body):
        return resp.text
    code = body.get("code")
    detail = str(body["detail"])
    for field, flag in (flags or {}).items():
        # "force: true" / "force=true" is how an API message turns a flag on: "--force".
        name = rf"(?<![\w.-]){re.escape(field)}\b"
        detail = re.sub(rf"{name}(?::\s*|=)true\b", flag, detail)
        # A field's name elsewhere: a camelCase one is never prose; a plain word
        # ("engine", "force") is the field only where a validation error puts its
        # location ("engine: Input should be ...", "extraArgs[0]: ..."), so "starts
        # the engine anyway" keeps its engine.
        where = "" if field != field.lower() else r"(?=[:\[])"
        detail = re.sub(name + where, flag, detail)
    return f"{detail} ({code})" if code else detail


def _connection(url: str, timeout: float | None) -> http.client.HTTPConnection:
    """A connection to the host of ``url`` (TLS, with the system's CAs, for https)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if parts.scheme == "https":
        import ssl

        return http.client.HTTPSConnection(
            parts.hostname, port, timeout=timeout, context=ssl.create_default_context()
        )
    return http.client.HTTPConnection(parts.hostname, port, timeout=timeout)


class Api:
    """One server: its base URL and the admin token."""

    def __init__(self, url: str, token: str | None, flags: Mapping[str, str] | None = None) -> None:
        self.url = normalize_url(url)
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.flags = flags

    def _target(self, path: str, params: Mapping[str, Any] | None) -> str:
        target = urljoin(self.url + "/", path.lstrip("/")) if "://" not in path else path
        if params:
            target += ("&" if "?" in target else "?") + urlencode(params)
        return target

    def _open(
        self,
        method: str,
        target: str,
        body: bytes | None,
        timeout: float | None,
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = _connection(target, timeout)
        parts = urlsplit(target)
        headers = {**self.headers, "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        path = parts.path or "/"
        if parts.query:
            path += f"?{parts.query}"
        try:
            conn.request(method, path, body=body, headers=headers)
            return conn, conn.getresponse()
        except BaseException:
            conn.close()
            raise

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = 60.0,
    ) -> Response:
        """One request and its whole answer; a cluster follower's 307 is followed once.

        No connection exits with how to start a server; an error status is returned.
        """
        body = None if json is None else _dumps(json)
        try:
            target = self._target(path, params)
            for _ in range(2):
                conn, raw = self._open(method, target, body, timeout)
                with closing(conn):
                    resp = Response(raw.status, dict(raw.getheaders()), raw.read())
                location = resp.headers.get("location") or resp.headers.get("Location")
                if resp.status != 307 or not location:
                    return resp
                # A cluster follower names the leader: ask it, with the same
                # credentials (an automatic redirect would drop the token on the way
                # to another host).
                target = urljoin(target, location)
            return resp
        except ValueError as exc:
            die(f"not a URL: {self.url} ({exc})", EXIT_USAGE)
        except (OSError, http.client.HTTPException) as exc:
            _unreachable(self.url, exc if isinstance(exc, OSError) else OSError(str(exc)))

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """The JSON answer; an error status or no connection exits with a message."""
        resp = self.request(method, path, **kw)
        if resp.status >= 400:
            die(f"error {resp.status}: {error_message(resp, self.flags)}")
        if not resp.content:
            return None
        return resp.json()

    def sse(
        self, path: str, params: dict[str, str] | None = None, method: str = "GET"
    ) -> Iterator[tuple[str, Any]]:
        """The (event, JSON data) pairs of a server-sent event stream, as they arrive.

        Lines of one event are joined as the SSE format says (``data:`` lines,
        ended by a blank line); ``event:`` names it (default ``message``). A cluster
        follower's 307 is followed once with the same credentials, as ``request`` does.
        A stream cut in the middle raises ``ConnectionLost``.
        """
        try:
            target = self._target(path, params)
            conn, raw = self._open(method, target, None, None)
            location = raw.getheader("location")
            if raw.status == 307 and location:
                conn.close()
                conn, raw = self._open(method, urljoin(target, location), None, None)
        except ValueError as exc:
            die(f"not a URL: {self.url} ({exc})", EXIT_USAGE)
        except OSError as exc:
            _unreachable(self.url, exc)
        except http.client.HTTPException as exc:
            raise ConnectionLost(str(exc)) from exc
        with closing(conn):
            if raw.status >= 400:
                resp = Response(raw.status, dict(raw.getheaders()), raw.read())
                die(f"error {resp.status}: {error_message(resp)}")
            event = "message"
            data: list[str] = []
            while True:
                try:
                    chunk = raw.readline()
                except (OSError, http.client.HTTPException) as exc:
                    raise ConnectionLost(str(exc) or type(exc).__name__) from exc
                if not chunk:
                    return
                line = chunk.decode("utf-8", errors="replace").rstrip("\r\n")
                if not line:
                    if data:
                        yield event, json.loads("\n".join(data))
                    event, data = "message", []
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))


def _dumps(data: Any) -> bytes:
    return json.dumps(data).encode()
