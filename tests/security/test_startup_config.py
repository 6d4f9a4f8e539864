"""A misconfigured server refuses to start with one line that says what to change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _serve(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sardeenz.cli", "serve", "--data-dir", str(tmp_path / "data")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("secret", ["short-secret-Q7", "Z" * 31, "é" * 15])
def test_an_hs256_secret_under_32_bytes_is_refused(tmp_path: Path, secret: str) -> None:
    # It would be brute-forced offline from any token, and it would satisfy the check that
    # refuses a non-loopback bind without authentication.
    done = _serve(tmp_path, SARDEENZ_JWT_SECRET=secret, SARDEENZ_HOST="0.0.0.0")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "SARDEENZ_JWT_SECRET" in lines[0]
    assert f"{len(secret.encode())} bytes is too short" in lines[0]
    assert "at least 32 bytes" in lines[0]
    assert secret not in done.stderr  # never echo a secret, even a bad one
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
