"""A misconfigured server refuses to start with one line that says what to change.

A real ``sardeenz serve`` for one setting of each kind; the other settings of a kind are
refused in-process by tests/unit/test_startup_refusals.py (a process start each was most
of this file's CPU).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.ports import free_port
from tests.unit.test_startup_refusals import (
    BAD_SETTINGS,
    HS256_SHORT_SECRETS,
    WHITESPACE_SECRETS,
    check_short_secret,
    whitespace_secret_env,
    with_files,
)


def _serve(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sardeenz.cli", "serve", "--data-dir", str(tmp_path / "data")],
        env={**os.environ, "SARDEENZ_PORT": str(free_port()), **env},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_an_hs256_secret_under_32_bytes_is_refused(tmp_path: Path) -> None:
    # It would be brute-forced offline from any token, and it would satisfy the check that
    # refuses a non-loopback bind without authentication. (The other short secrets:
    # tests/unit/test_startup_refusals.py, in-process.)
    secret = HS256_SHORT_SECRETS[0]
    done = _serve(tmp_path, SARDEENZ_JWT_SECRET=secret, SARDEENZ_HOST="0.0.0.0")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    check_short_secret(lines[0], secret, done.stderr)
    assert not (tmp_path / "data").exists()  # refused before touching the disk


def test_a_bad_setting_is_one_line_naming_it(tmp_path: Path) -> None:
    done = _serve(tmp_path, SARDEENZ_PORT="not-a-port")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("sardeenz: invalid configuration: SARDEENZ_PORT:")
    assert "Traceback" not in done.stderr


def test_a_simulated_gpu_without_unit_is_one_line_with_the_accepted_forms(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sardeenz.cli",
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--sim-gpus",
            "L4:24",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "simulated GPU 'L4:24': the size '24' needs a unit, e.g. 'L4:24GiB'" in lines[0]
    assert "24GiB, 24GB, 512MiB" in lines[0]
    for noise in ("Value error", "pydantic", "validation error", "Traceback", "input_value"):
        assert noise not in done.stderr
    assert not (tmp_path / "data").exists()


def _one_clean_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    """The refusal: exit ``code``, exactly one stderr line, no traceback, nothing on stdout."""
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert lines[0].startswith("sardeenz: ")
    return lines[0]


def test_a_setting_services_check_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """One of BAD_SETTINGS in a real start (the others: tests/unit/test_startup_refusals.py)."""
    env, setting, why = BAD_SETTINGS[0]
    line = _one_clean_line(_serve(tmp_path, **with_files(tmp_path, env)), 2)
    assert line.startswith("sardeenz: invalid configuration: ")
    assert setting in line
    assert why in line
    assert not (tmp_path / "data").exists()  # refused before touching the disk


def test_a_refusal_prints_text_as_it_is_not_rich_markup(tmp_path: Path) -> None:
    # ':b:' is a Rich emoji code and '[red]' markup: the operator's own text comes back.
    done = _serve(tmp_path, CLUSTER_PEERS="a:b:c,[red]x", CLUSTER_SECRET="s" * 32)
    line = _one_clean_line(done, 2)
    assert "'a:b:c'" in line
    assert "\U0001f171" not in line  # the emoji 🅱


def test_a_secret_of_spaces_is_refused(tmp_path: Path) -> None:
    name = WHITESPACE_SECRETS[0]  # the other: tests/unit/test_startup_refusals.py
    line = _one_clean_line(_serve(tmp_path, **whitespace_secret_env(name)), 2)
    assert name in line
    assert "only whitespace" in line
    assert not (tmp_path / "data").exists()


def test_a_port_in_use_is_its_own_exit_code_and_touches_nothing(tmp_path: Path) -> None:
    # It was exit 3 (the storage code) after the database had been migrated and the
    # engines of the data dir re-adopted, then stopped: now 5, before any of it.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve(tmp_path, SARDEENZ_PORT=str(port))
    line = _one_clean_line(done, 5)
    assert f"cannot listen on 127.0.0.1:{port}" in line
    assert f"pid {os.getpid()}" in line  # who holds it
    assert not (tmp_path / "data" / "sardeenz.db").exists()  # no migration, no re-adoption


# Sign-in settings checked when the services are built: the server has already logged how
# it authenticates and where it listens (INFO), then refuses with the one line.
SIGN_IN_SETTINGS = [
    ({"SARDEENZ_TOKEN_REVIEW": "true"}, "SARDEENZ_TOKEN_REVIEW", "needs the Kubernetes API"),
    ({"SARDEENZ_V1_BEARER_AUTH": "true"}, "SARDEENZ_V1_BEARER_AUTH", "needs a token source"),
    (
        {
            "SARDEENZ_OPENSHIFT_OAUTH_URL": "https://oauth.example",
            "SARDEENZ_TOKEN_REVIEW": "true",
            "SARDEENZ_KUBE_API_URL": "https://127.0.0.1:1",
        },
        "SARDEENZ_OPENSHIFT_OAUTH_CLIENT_ID",
        "OAuthClient",
    ),
]


@pytest.mark.parametrize(("env", "setting", "why"), SIGN_IN_SETTINGS, ids=lambda v: str(v)[:40])
def test_a_sign_in_setting_that_cannot_work_is_a_clear_exit_2(
    tmp_path: Path, env: dict[str, str], setting: str, why: str
) -> None:
    done = _serve(tmp_path, **env)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("sardeenz: invalid configuration: "), done.stderr
    assert setting in last
    assert why in last
