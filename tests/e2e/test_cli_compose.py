"""The CLI composes: full ids at 80 columns and in pipes, ids by prefix or name, --wait.

Run against one real server shared by the module. "At 80 columns" is a real
pseudo-terminal of 80 columns (rich sizes its tables from it); "piped" is the
plain output of ``subprocess`` with captured stdout.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from typing import Any

import pytest
import typer.main

from sardeenz import cli as cli_module
from sardeenz.cli.resolve import pick
from testkit.ports import free_port
from testkit.servers import ServerPool, ServerProcess, load_active, sim_load, wait_for_status

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
COLUMNS = 80


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sardeenz.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cli_tty(*args: str, timeout: float = 60, columns: int = COLUMNS) -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a terminal (80 columns): (exit code, text)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm-256color"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sardeenz.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    with contextlib.suppress(OSError):  # EIO once the child closed the terminal
        while chunk := os.read(master, 65536):
            chunks.append(chunk)
    os.close(master)
    code = proc.wait(timeout)
    return code, ANSI.sub("", b"".join(chunks).decode(errors="replace")).replace("\r", "")


@pytest.fixture(scope="module")
def srv(module_server_factory: ServerPool) -> ServerProcess:
    return module_server_factory().start()


@pytest.fixture(scope="module")
def two(srv: ServerProcess) -> list[dict[str, Any]]:
    """Two active instances; the second has a long served name to crowd the table.
    Loaded side by side, then waited for."""
    with srv.client() as api:
        loading = [
            sim_load(api, "compose-a", servedModelName="alpha-served"),
            sim_load(
                api,
                "compose-b",
                servedModelName="a-rather-long-served-model-name-that-crowds-the-table",
                enableSleepMode=True,
            ),
        ]
        return [wait_for_status(api, inst["id"], "active") for inst in loading]


def test_ids_complete_at_80_columns(srv: ServerProcess, two: list[dict[str, Any]]) -> None:
    code, out = cli_tty("models", "ls", "--url", srv.url)
    assert code == 0, out
    for inst in two:
        assert inst["id"] in out, out
    assert max(len(line) for line in out.splitlines()) <= COLUMNS, out


def test_ids_complete_when_piped(srv: ServerProcess, two: list[dict[str, Any]]) -> None:
    out = cli("models", "ls", "--url", srv.url)
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split("\t")[:4] == ["ID", "NAME", "ENGINE", "STATUS"]
    assert "\x1b" not in out.stdout
    by_id = {row.split("\t")[0]: row.split("\t") for row in rows}
    for inst in two:
        assert by_id[inst["id"]][1] == inst["servedModelName"]
        assert by_id[inst["id"]][3] == "active"


def test_prefix_and_name_lookup(srv: ServerProcess, two: list[dict[str, Any]]) -> None:
    a, b = two
    prefix = next(a["id"][:n] for n in range(1, 13) if not b["id"].startswith(a["id"][:n]))
    shown = cli("models", "show", prefix, "--url", srv.url)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == a["id"]
    by_name = cli("models", "show", "alpha-served", "--json", "--url", srv.url)
    assert by_name.returncode == 0, by_name.stderr
    assert json.loads(by_name.stdout)["id"] == a["id"]


def test_ambiguous_name_lists_the_candidates(srv: ServerProcess) -> None:
    with srv.client() as api:
        loading = [sim_load(api, f"twin-{i}", servedModelName="twin") for i in range(2)]
        twins = [wait_for_status(api, inst["id"], "active") for inst in loading]
    try:
        out = cli("models", "show", "twin", "--url", srv.url)
        assert out.returncode == 2
        assert "'twin' matches 2 instances" in out.stderr
        for inst in twins:
            assert inst["id"] in out.stderr
    finally:
        with srv.client() as api:
            for inst in twins:
                api.post(f"/api/v1/models/{inst['id']}/unload")


def test_ambiguous_prefix_is_refused() -> None:
    items = [{"id": "abc123", "n": "x"}, {"id": "abd456", "n": "y"}]

    def names(it: dict[str, Any]) -> tuple[str]:
        return (it["n"],)

    assert pick("abc", items, names, "instance", str) == "abc123"
    assert pick("y", items, names, "instance", str) == "abd456"
    assert pick("zzz", items, names, "instance", str) == "zzz"  # the server's 404 says it
    with pytest.raises(typer.Exit) as exc:
        pick("ab", items, names, "instance", lambda it: it["n"])
    assert exc.value.exit_code == 2


def test_url_without_scheme(srv: ServerProcess, two: list[dict[str, Any]]) -> None:
    out = cli("models", "ls", "--json", "--url", f"localhost:{srv.port}")
    assert out.returncode == 0, out.stderr
    assert {i["id"] for i in two} <= {i["id"] for i in json.loads(out.stdout)}


def test_connection_refused_says_how_to_start_a_server() -> None:
    out = cli("models", "ls", "--url", f"127.0.0.1:{free_port()}")
    assert out.returncode == 1
    assert "connection refused" in out.stderr
    assert "sardeenz serve" in out.stderr
    assert "Traceback" not in out.stderr


def test_sleep_and_wake_by_name(srv: ServerProcess, two: list[dict[str, Any]]) -> None:
    name = two[1]["servedModelName"]
    out = cli("models", "sleep", name, "--url", srv.url)
    assert out.returncode == 0, out.stderr
    assert "sleeping" in out.stdout
    assert two[1]["id"] in out.stdout
    out = cli("models", "wake", two[1]["id"][:6], "--json", "--url", srv.url)
    assert out.returncode == 0, out.stderr
    assert '"status": "active"' in out.stdout


def test_load_wait_shows_phases_and_exits_0_when_active(srv: ServerProcess) -> None:
    code, out = cli_tty(
        "models",
        "load",
        "wait-ok",
        "--engine",
        "sim",
        "--name",
        "wait-ok",
        "--force",
        "--wait",
        "--arg",
        "--load-seconds",
        "--arg",
        "1",
        "--url",
        srv.url,
    )
    assert code == 0, out
    phases = ["spawned", "loading weights", "KV cache", "ready"]
    where = [out.find(p) for p in phases]
    assert all(w >= 0 for w in where), out
    assert where == sorted(where), out
    assert "active" in out


def test_load_wait_exits_non_zero_with_the_error_when_failed(srv: ServerProcess) -> None:
    out = cli(
        "models",
        "load",
        "wait-bad",
        "--engine",
        "sim",
        "--wait",
        "--arg",
        "--load-seconds",
        "--arg",
        "0.3",
        "--arg",
        "--fail-after-load",
        "--url",
        srv.url,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "spawned" in out.stderr
    assert "failed:" in out.stderr
    failed_line = next(ln for ln in out.stderr.splitlines() if "failed:" in ln)
    assert len(failed_line.split("failed:", 1)[1].strip()) > 10  # the error message itself
    assert "failed" in out.stdout


def test_help_has_text_on_every_flag_and_no_bool_noise() -> None:
    root = typer.main.get_command(cli_module.app)
    missing: list[str] = []

    def walk(cmd: Any, path: str) -> None:
        for param in cmd.params:
            if not getattr(param, "help", None) and param.name != "ctx":
                missing.append(f"{path} {param.name}")
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(root, "sardeenz")
    assert missing == []
    for args in (["serve"], ["models", "load"], ["models", "ls"], ["bench", "run"]):
        out = cli(*args, "--help")
        assert out.returncode == 0
        assert "<bool>" not in out.stdout, out.stdout


def test_validation_errors_name_the_cli_flags(srv: ServerProcess) -> None:
    out = cli("models", "load", "m", "--gpu-memory-limit", "-1", "--url", srv.url)
    assert out.returncode == 1
    assert "--gpu-memory-limit" in out.stderr
    assert "gpuMemoryLimit" not in out.stderr
    out = cli("models", "load", "m", "--arg", "bad\nline", "--url", srv.url)
    assert out.returncode == 1
    assert "--arg[0]" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1  # one line, even piped


def test_profile_ids_complete_and_removable_by_prefix(
    srv: ServerProcess, two: list[dict[str, Any]]
) -> None:
    saved = cli(
        "profiles", "save", "alpha-served", "--name", "p-compose", "--json", "--url", srv.url
    )
    assert saved.returncode == 0, saved.stderr
    profile_id = json.loads(saved.stdout)["id"]
    assert len(profile_id) == 36
    listed = cli("profiles", "ls", "--url", srv.url)
    assert listed.returncode == 0, listed.stderr
    assert profile_id in [row.split("\t")[0] for row in listed.stdout.splitlines()[1:]]
    code, out = cli_tty("profiles", "ls", "--url", srv.url)
    assert code == 0, out
    assert profile_id in out
    removed = cli("profiles", "rm", profile_id[:8], "--url", srv.url)
    assert removed.returncode == 0, removed.stderr
    assert profile_id in removed.stdout


def test_logs_hide_health_polls_unless_asked(srv: ServerProcess, two: list[dict[str, Any]]) -> None:
    shown = cli("models", "logs", "alpha-served", "--health", "--url", srv.url)
    assert shown.returncode == 0, shown.stderr
    assert '"GET /health HTTP/1.1"' in shown.stdout  # the polls are in the engine's log
    hidden = cli("models", "logs", "alpha-served", "--url", srv.url)
    assert hidden.returncode == 0, hidden.stderr
    assert '"GET /health' not in hidden.stdout
    assert "Route: /health" in hidden.stdout  # only the poll access lines go
    assert "Application startup complete." in hidden.stdout  # vLLM's own lines stay


def test_version_json() -> None:
    out = cli("version", "--json")
    assert json.loads(out.stdout)["version"]


def test_bench_ids_complete_and_results_fit_100_columns(
    srv: ServerProcess, two: list[dict[str, Any]]
) -> None:
    out = cli(
        "bench",
        "run",
        "--model",
        "alpha-served",
        "--name",
        "compose-run",
        "--requests",
        "6",
        "--concurrency",
        "2",
        "--input-tokens",
        "8",
        "--output-tokens",
        "4",
        "--json",
        "--url",
        srv.url,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    run_id = json.loads(out.stdout)["id"]
    listed = cli("bench", "ls", "--url", srv.url)
    assert run_id in [row.split("\t")[0] for row in listed.stdout.splitlines()[1:]]
    code, shown = cli_tty("bench", "show", run_id[:6], "--url", srv.url, columns=100)
    assert code == 0, shown
    assert run_id in shown
    assert max(len(line) for line in shown.splitlines()) <= 100, shown
    for label in ("TTFT ms", "E2E ms", "decode tok/s", "p90", "p95", "p99", "max"):
        assert label in shown, label
    by_name = cli("bench", "show", "compose-run", "--url", srv.url)
    assert by_name.returncode == 0, by_name.stderr
    assert f"# Benchmark {run_id}" in by_name.stdout
    assert "TTFT ms\t" in by_name.stdout


LONG_RUN_NAME = "nightly-llama-70b-throughput-sweep-with-a-rather-long-descriptive-name"
"""Too long to sit beside the record headers at 80 columns ("descriptive-n/ame")."""

TABLE_COMMANDS = (
    ("models", "ls"),
    ("profiles", "ls"),
    ("bench", "ls"),
    ("cluster", "status"),
)
"""Every command that prints a table (``bench show`` is checked with its run below)."""


def _cells(piped: str) -> list[str]:
    """Every cell of a piped table (header included): the text a terminal must keep whole.

    A column with nothing to say ("-" in every row) is left out on a terminal.
    """
    header, *rows = [line.split("\t") for line in piped.splitlines()]
    said = [i for i in range(len(header)) if any(row[i] != "-" for row in rows)]
    return [line[i] for line in (header, *rows) for i in said if line[i] != "-"]


def assert_words_whole(terminal: str, piped: str, columns: int = COLUMNS) -> None:
    """At ``columns``, no line is wider and no word of any cell is cut across lines."""
    lines = terminal.splitlines()
    assert max(len(line) for line in lines) <= columns, terminal
    on_a_line = {word for line in lines for word in line.replace(",", " ").split()}
    for cell in _cells(piped):
        for word in cell.replace(",", " ").split():
            assert word in on_a_line, f"{word!r} is cut across lines:\n{terminal}"


def test_every_table_keeps_words_whole_at_80_columns_and_ids_whole_piped(
    srv: ServerProcess, two: list[dict[str, Any]]
) -> None:
    """Issue 25: "NAM/E", "phi/-pr/ofi/le", a name folded beside an empty ERROR column."""
    saved = cli(
        "profiles", "save", "alpha-served", "--name", "phi-profile", "--json", "--url", srv.url
    )
    assert saved.returncode == 0, saved.stderr
    run = cli(
        "bench",
        "run",
        "--model",
        "alpha-served",
        "--name",
        LONG_RUN_NAME,
        "--requests",
        "2",
        "--concurrency",
        "1",
        "--input-tokens",
        "8",
        "--output-tokens",
        "2",
        "--json",
        "--url",
        srv.url,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    ids = {
        ("models", "ls"): {i["id"] for i in two},
        ("profiles", "ls"): {json.loads(saved.stdout)["id"]},
        ("bench", "ls"): {json.loads(run.stdout)["id"]},
        ("cluster", "status"): set(),
    }
    for command in TABLE_COMMANDS:
        piped = cli(*command, "--url", srv.url)
        assert piped.returncode == 0, piped.stderr
        table_piped = "\n".join(ln for ln in piped.stdout.splitlines() if "\t" in ln)
        first_column = {line.split("\t")[0] for line in table_piped.splitlines()[1:]}
        assert ids[command] <= first_column, (command, piped.stdout)
        code, shown = cli_tty(*command, "--url", srv.url)
        assert code == 0, shown
        table_part = shown if command != ("cluster", "status") else shown.split("\n", 1)[1]
        assert_words_whole(table_part, table_piped)
        for an_id in ids[command]:
            assert an_id in shown, (an_id, shown)
    assert "no GPU" in cli("cluster", "status", "--url", srv.url).stdout


def test_cluster_status_shows_gpu_memory_and_empty_columns_take_no_room(
    server_factory: Any,
) -> None:
    gpus = server_factory(args=["--sim-gpus", "NVIDIA L4:24GiB,Tesla T4:16GiB"]).start()
    with gpus.client() as api:
        load_active(api, "mem-model", "--memory-gib", "3", gpuIds=[1])
    # No instance failed: ERROR is "-" everywhere and takes no room (pipes keep it).
    code, shown = cli_tty("models", "ls", "--url", gpus.url)
    assert code == 0, shown
    assert "ERROR" not in shown
    assert "mem-model" in shown
    assert "ERROR" in cli("models", "ls", "--url", gpus.url).stdout
    piped = cli("cluster", "status", "--url", gpus.url).stdout
    assert "\tGPU0 0.0 of 24.0 GiB (sim), GPU1 3.0 of 16.0 GiB (sim)\t" in piped
    code, shown = cli_tty("cluster", "status", "--url", gpus.url)
    assert code == 0, shown
    assert_words_whole(shown.split("\n", 1)[1], piped.split("\n", 1)[1])


def test_bench_show_keeps_words_whole_at_80_columns(
    srv: ServerProcess, two: list[dict[str, Any]]
) -> None:
    runs = json.loads(cli("bench", "ls", "--json", "--url", srv.url).stdout)
    assert runs, "the test above ran one"
    piped = cli("bench", "show", runs[0]["id"], "--url", srv.url)
    code, shown = cli_tty("bench", "show", runs[0]["id"], "--url", srv.url)
    assert code == 0, shown
    table_lines = [ln for ln in piped.stdout.splitlines() if "\t" in ln]
    assert_words_whole(shown, "\n".join(table_lines))
