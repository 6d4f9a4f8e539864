"""A simulated engine process on its own, and a minimal HTTP reader for fake engines."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

import httpx

from testkit.ports import free_port


class Sim:
    """One simulated engine process in its own session (killed as a group)."""

    def __init__(
        self,
        model: str,
        *,
        ttft_ms: float = 5,
        itl_ms: float = 2,
        extra: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.model = model
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sardeenz.sim",
                "--model",
                model,
                "--port",
                str(self.port),
                "--load-seconds",
                "0",
                "--ttft-ms",
                str(ttft_ms),
                "--itl-ms",
                str(itl_ms),
                "--disable-uvicorn-access-log",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **env} if env is not None else None,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 30) -> Sim:
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=1) as http:  # one client: each new one loads the CA bundle
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"sim engine exited with {self.proc.returncode}")
                with contextlib.suppress(httpx.HTTPError):
                    if http.get(f"{self.url}/health").status_code == 200:
                        return self
                time.sleep(0.1)
        raise RuntimeError(f"sim engine {self.url} not ready (/health) in {timeout}s")

    def aborts(self) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=5).text
        for line in text.splitlines():
            if line.startswith("vllm:request_success_total{") and 'finished_reason="abort"' in line:
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


async def read_request(reader: asyncio.StreamReader) -> None:
    """Read one HTTP/1.1 request with a Content-Length body (for fake engines)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
