"""The CLI stays quick to start: an operator command imports no server, no pydantic.

A behaviour test, not a timing one (timings live in benchmarks/cli_startup.py): it
runs commands in a fresh interpreter and reads what they imported. ``serve`` pulls
in the server when it runs; ``version`` and ``models ls`` must not (issue 25: every
CLI call took 0.9 s of CPU, most of it importing the server's settings and domain,
httpx and pydantic).
"""

from __future__ import annotations

import json
import subprocess
import sys

from testkit.ports import free_port

# Packages only the server needs, and our modules that pull them in.
SERVER_ONLY = (
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "yaml",
    "pydantic",
    "pydantic_settings",
    "httpx",
    "sardeenz.app",
    "sardeenz.config",
    "sardeenz.domain",
    "sardeenz.store",
    "sardeenz.engines",
    "sardeenz.cluster",
)

RUN_AND_LIST = """
import json, sys
from sardeenz.cli import app
try:
    app(sys.argv[1:])
except SystemExit:
    pass
# A None entry is an import blocked, not made (sardeenz/__init__: httpx's own CLI).
print(json.dumps(sorted(m for m, v in sys.modules.items() if v is not None)), file=sys.stderr)
"""


def imported_by(*argv: str) -> set[str]:
    """The modules loaded once ``sardeenz ARGV`` has run, in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    last = done.stderr.strip().splitlines()[-1]
    return set(json.loads(last))


def server_modules(modules: set[str]) -> list[str]:
    return sorted(
        m for m in modules if any(m == top or m.startswith(f"{top}.") for top in SERVER_ONLY)
    )


def test_version_imports_nothing_of_the_server() -> None:
    modules = imported_by("version")
    assert "sardeenz.cli" in modules
    assert server_modules(modules) == []


def test_models_ls_imports_nothing_of_the_server() -> None:
    # A refused connection still runs the whole command: parse, resolve the URL, call.
    modules = imported_by("models", "ls", "--url", f"127.0.0.1:{free_port()}")
    assert "sardeenz.cli.models" in modules
    assert "http.client" in modules  # it did make the call
    assert server_modules(modules) == []


def test_serve_still_finds_the_server_when_it_runs() -> None:
    """The lazy imports are real imports: ``serve --help``-free paths load the server."""
    modules = imported_by("serve", "--sim-gpus", "bad", "--data-dir", "/nonexistent/x")
    assert "sardeenz.config" in modules
