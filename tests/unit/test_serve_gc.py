"""``serve`` pauses the garbage collector while it imports the server, never for longer.

The pause is a start-up saving (a fifth of the import's CPU, benchmarks/serve_startup.py);
a refusal must not leave it paused for whoever called ``serve`` in-process.
"""

from __future__ import annotations

import gc
from pathlib import Path

from typer.testing import CliRunner

from sardeenz.cli import app


def test_a_refused_serve_leaves_the_collector_on(tmp_path: Path) -> None:
    assert gc.isenabled()
    result = CliRunner().invoke(app, ["serve", "--sim-gpus", "bad", "--data-dir", str(tmp_path)])
    assert result.exit_code != 0
    assert "invalid configuration" in result.output
    assert gc.isenabled()
