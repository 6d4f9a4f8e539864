"""The operator CLI against a real server, and the serve command's guards.

The CLI round trips share one server with one simulated GPU (``reused_server``, emptied
after each test; the GPU is what the --force test needs, and the others do not mind it);
the serve guards and the servers started with other flags are each their own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from testkit.ports import free_port
from testkit.servers import ServerPool, ServerProcess, wait_for_status

SIM_GPUS = ["--sim-gpus", "NVIDIA L4:24GiB"]


@pytest.fixture(scope="module")
def module_server(module_server_factory: ServerPool) -> ServerProcess:
    """The module's shared server (behind ``reused_server``), with one simulated GPU."""
    return module_server_factory(args=SIM_GPUS).start()


def cli(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "sardeenz.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_models_commands_round_trip(reused_server: ServerProcess) -> None:
    url = ["--url", reused_server.url]
    out = cli("models", "ls", *url)
    assert out.returncode == 0, out.stderr
    assert "No model instances" in out.stdout

    out = cli(
        "models",
        "load",
        "cli-model",
        "--engine",
        "sim",
        "--name",
        "cli-served",
        "--arg",
        "--load-seconds",
        "--arg",
        "0.2",
        *url,
    )
    assert out.returncode == 0, out.stderr
    assert "cli-served" in out.stdout
    assert "starting" in out.stdout

    listed = json.loads(cli("models", "ls", "--json", *url).stdout)
    assert len(listed) == 1
    inst_id = listed[0]["id"]
    with reused_server.client() as api:
        wait_for_status(api, inst_id, "active")

    shown = json.loads(cli("models", "show", inst_id, *url).stdout)
    assert shown["servedModelName"] == "cli-served"
    assert shown["status"] == "active"

    logs = cli("models", "logs", inst_id, *url)
    assert "Application startup complete." in logs.stdout

    follow = subprocess.Popen(
        [sys.executable, "-m", "sardeenz.cli", "models", "logs", "-f", inst_id, *url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Following once it has printed the replayed buffer (not after a guessed delay).
    assert follow.stdout is not None
    replayed: list[str] = []

    def read_follow() -> None:
        for line in follow.stdout or []:
            replayed.append(line)

    reader = threading.Thread(target=read_follow, daemon=True)
    reader.start()
    deadline = time.monotonic() + 30
    while not any("Application startup complete." in line for line in replayed):
        assert follow.poll() is None, f"logs -f exited early: {follow.stderr}"
        assert time.monotonic() < deadline, f"logs -f replayed no startup line in 30 s: {replayed}"
        time.sleep(0.05)
    out = cli("models", "unload", inst_id, *url)
    assert out.returncode == 0, out.stderr
    follow.wait(20)
    reader.join(5)
    assert follow.returncode == 0
    assert follow.stderr is not None
    assert "instance removed" in follow.stderr.read()
    assert "Application startup complete." in "".join(replayed)  # replayed buffer

    missing = cli("models", "show", "nope", *url)
    assert missing.returncode == 1
    assert "instance_not_found" in missing.stderr


def test_cli_reports_unreachable_server() -> None:
    out = cli("models", "ls", "--url", f"http://127.0.0.1:{free_port()}")
    assert out.returncode == 1
    assert "cannot reach" in out.stderr


def test_serve_refuses_non_loopback_without_auth(tmp_path: Path) -> None:
    out = cli(
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        str(free_port()),
        "--data-dir",
        str(tmp_path),
        timeout=30,
    )
    assert out.returncode == 2
    assert "refusing to bind 0.0.0.0" in out.stderr


def test_serve_rejects_bad_configuration(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "c.yaml"
    bad_yaml.write_text("no_such_setting: 1\n")
    out = cli("serve", "--config", str(bad_yaml), "--data-dir", str(tmp_path))
    assert out.returncode == 2
    assert "no_such_setting" in out.stderr
    # A bad --sim-gpus: tests/unit/test_startup_refusals.py (in-process) and
    # tests/security/test_startup_config.py (a real start).


def test_insecure_allows_non_loopback_bind(server_factory: Any) -> None:
    srv: ServerProcess = server_factory(args=["--host", "0.0.0.0", "--insecure"])
    srv.start()
    assert "NO authentication" in srv.log()


def test_demo_mode_loads_labelled_simulated_models(server_factory: Any) -> None:
    srv: ServerProcess = server_factory(args=["--demo"]).start()
    first = srv.log().strip().splitlines()[0]
    assert "DEMO MODE" in first
    assert "simulated" in first
    with srv.client() as api:
        deadline = time.monotonic() + 30
        insts: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            insts = api.get("/api/v1/models").json()
            if len(insts) >= 2 and all(i["status"] == "active" for i in insts):
                break
            time.sleep(0.2)
        assert len(insts) == 2, f"not two active demo instances within 30 s: {insts}"
        assert all(i["simulated"] and i["engine"] == "sim" for i in insts)
        assert all("simulated" in i["displayName"] for i in insts)
        assert api.get("/api/health").json()["mode"] == "demo"
    # The demo's data lives apart from the node's: nothing of it in data_dir itself.
    assert str(srv.data_dir / "demo") in first
    assert (srv.data_dir / "demo" / "sardeenz.db").exists()
    assert not (srv.data_dir / "sardeenz.db").exists()


def test_bench_run_follows_progress_and_prints_the_run(reused_server: ServerProcess) -> None:
    url = ["--url", reused_server.url]
    out = cli("models", "load", "bench-model", "--engine", "sim", "--name", "bench-served", *url)
    assert out.returncode == 0, out.stderr
    inst_id = json.loads(cli("models", "ls", "--json", *url).stdout)[0]["id"]
    with reused_server.client() as api:
        wait_for_status(api, inst_id, "active")
    try:
        out = cli(
            "bench",
            "run",
            "--model",
            "bench-served",
            "--requests",
            "12",
            "--concurrency",
            "3",
            "--input-tokens",
            "16",
            "--output-tokens",
            "8",
            "--routing",
            "proxy",
            "--json",
            *url,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        run = json.loads(out.stdout)
        assert run["status"] == "completed"
        (scenario,) = run["scenarios"]
        assert scenario["successfulRequests"] == 12
        assert scenario["failedRequests"] == 0
        assert scenario["metrics"]["ttftP50"] > 0
        assert scenario["metrics"]["requestsPerSecond"] > 0
    finally:
        cli("models", "unload", inst_id, *url)


def test_logs_n_counts_the_lines_it_prints(reused_server: ServerProcess) -> None:
    """``-n N`` prints the last N shown lines: hidden /health polls use none of the count."""
    from sardeenz.healthpolls import is_health_poll
    from testkit.servers import load_active

    url = ["--url", reused_server.url]
    with reused_server.client() as api:
        inst = load_active(api, "logs-n-model")
        everything: list[str] = []
        deadline = time.monotonic() + 30
        # The controller polls /health every 0.5 s here: wait for more polls than -n.
        while sum(map(is_health_poll, everything)) < 6:
            assert time.monotonic() < deadline, f"no 6 health polls in 30 s: {everything}"
            time.sleep(0.2)
            got = api.get(f"/api/v1/models/{inst['id']}/logs", params={"lines": 1000})
            everything = got.json()["lines"]
    others = [ln for ln in everything if not is_health_poll(ln)]
    assert len(others) >= 3

    out = cli("models", "logs", inst["id"], "-n", "2", *url)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == others[-2:]

    polls = cli("models", "logs", inst["id"], "--health", "-n", "5", *url)
    assert len(polls.stdout.splitlines()) == 5

    # -f -n 2 (JSON, one event a line): the last two shown lines of the buffer, then
    # the status event that follows the replay, then live events until removed.
    argv = ["models", "logs", "-f", "-n", "2", "--json", inst["id"], *url]
    follow = subprocess.Popen(
        [sys.executable, "-m", "sardeenz.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follow.stdout is not None
    before_status = []
    for line in follow.stdout:  # ends (EOF) if the command dies; checked below
        event = json.loads(line)
        if event["event"] == "status":
            break
        before_status.append(event)
    with reused_server.client() as api:
        assert api.post(f"/api/v1/models/{inst['id']}/unload").status_code in (200, 202)
    rest, stderr = follow.communicate(timeout=30)
    assert follow.returncode == 0, stderr
    assert [e["line"] for e in before_status] == others[-2:]
    live = [json.loads(ln) for ln in rest.splitlines()]
    assert live[-1]["event"] == "removed"
    assert not any(is_health_poll(e.get("line", "")) for e in before_status + live)


def test_force_says_what_it_overrides_in_the_flags_and_unit_typed(
    reused_server: ServerProcess,
) -> None:
    """A refusal offers --force only when forcing would start the engine (issue 25).

    100 GB per GPU is more than the simulated GPU has: no force helps, and the refusal
    says so, in GB (the unit of --gpu-memory-limit). (A refusal by the estimate, which
    --force does skip, is tests/unit/test_memory_ledger.py's.)
    """
    srv = reused_server
    with srv.client() as api:  # simulated GPUs say so; the default engine is named
        assert api.get("/api/health").json()["mode"] == "simulated"
        assert api.get("/api/v1/engines").json()["defaultEngine"] == "vllm"
    url = ["--url", srv.url]
    base = ["models", "load", "big-model", "--engine", "sim", *url]
    for force in ([], ["--force"]):
        out = cli(*base, "--gpu-memory-limit", "100", *force)
        assert out.returncode == 1
        assert "(insufficient_gpu_memory)" in out.stderr
        assert "--gpu-memory-limit 100 GB per GPU" in out.stderr
        assert "force cannot override this" in out.stderr
        assert "GiB" not in out.stderr  # one unit: the GB the limit was typed in
        assert "force: true" not in out.stderr

    # A sleep refusal names the CLI's flags too, not the API's fields.
    loaded = cli(*base, "--gpu-memory-limit", "4", "--json")
    assert loaded.returncode == 0, loaded.stderr
    inst_id = json.loads(loaded.stdout)["id"]
    with srv.client() as api:
        wait_for_status(api, inst_id, "active")
    refused = cli("models", "sleep", inst_id, *url)
    assert refused.returncode == 1
    assert "load it with --sleep-mode" in refused.stderr
    assert "enableSleepMode" not in refused.stderr
