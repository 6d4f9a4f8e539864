"""Talking to a running server: the base URL, calls, SSE streams and their errors.

Every operator command goes through ``Api``: one place turns a refused
connection into "how to start the server", an error response into the
server's ``detail (code)``, and ``localhost:3000`` into a URL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console

from sardeenz.safetext import escape_unsafe

__all__ = ["DEFAULT_URL", "Api", "TokenOpt", "UrlOpt", "die", "err", "normalize_url"]

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


def _unreachable(url: str, exc: httpx.HTTPError) -> NoReturn:
    if isinstance(exc, httpx.ConnectError):
        die(
            f"cannot reach {url}: connection refused (no server listening there).\n"
            "Start one with `sardeenz serve` (or `sardeenz serve --demo` to try it on "
            "simulated GPUs),\nor point the CLI at a running one with --url HOST:PORT "
            "or SARDEENZ_URL."
        )
    die(f"cannot reach {url}: {exc}")


def error_message(resp: httpx.Response, flags: Mapping[str, str] | None = None) -> str:
    """The server's ``detail (code)``, or its raw text when the body is not ours.

    ``flags`` maps request fields to the command's flags: a validation error about
    ``gpuMemoryLimit`` is reported as one about ``--gpu-memory-limit``, the name the
    operator typed, not the API's.
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
        detail = re.sub(rf"(?<![\w.-]){re.escape(field)}\b", flag, detail)
    return f"{detail} ({code})" if code else detail


class Api:
    """One server: its base URL and the admin token."""

    def __init__(self, url: str, token: str | None, flags: Mapping[str, str] | None = None) -> None:
        self.url = normalize_url(url)
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.flags = flags

    def client(self, timeout: float | None = 60.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=timeout)

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """The JSON answer; an error status or no connection exits with a message."""
        try:
            with self.client() as client:
                resp = client.request(method, path, **kw)
                if resp.status_code == 307 and resp.headers.get("location"):
                    # A cluster follower names the leader: ask it, with the same
                    # credentials (an automatic redirect would drop the token on the way
                    # to another host).
                    resp = client.request(method, resp.headers["location"], **kw)
        except httpx.InvalidURL as exc:
            die(f"not a URL: {self.url} ({exc})", EXIT_USAGE)
        except httpx.HTTPError as exc:
            _unreachable(self.url, exc)
        if resp.status_code >= 400:
            die(f"error {resp.status_code}: {error_message(resp, self.flags)}")
        if not resp.content:
            return None
        return resp.json()

    def sse(
        self, path: str, params: dict[str, str] | None = None, method: str = "GET"
    ) -> Iterator[tuple[str, Any]]:
        """The (event, JSON data) pairs of a server-sent event stream, as they arrive.

        Lines of one event are joined as the SSE format says (``data:`` lines,
        ended by a blank line); ``event:`` names it (default ``message``). A cluster
        follower's 307 is followed with the same credentials, as ``call`` does.
        """
        try:
            with self.client(timeout=None) as client:
                resp = client.send(client.build_request(method, path, params=params), stream=True)
                if resp.status_code == 307 and resp.headers.get("location"):
                    resp.close()
                    leader = client.build_request(method, resp.headers["location"])
                    resp = client.send(leader, stream=True)
                try:
                    if resp.status_code >= 400:
                        resp.read()
                        die(f"error {resp.status_code}: {error_message(resp)}")
                    event = "message"
                    data: list[str] = []
                    for line in resp.iter_lines():
                        if not line:
                            if data:
                                yield event, json.loads("\n".join(data))
                            event, data = "message", []
                        elif line.startswith("event:"):
                            event = line[6:].strip()
                        elif line.startswith("data:"):
                            data.append(line[5:].removeprefix(" "))
                finally:
                    resp.close()
        except httpx.ConnectError as exc:
            _unreachable(self.url, exc)
