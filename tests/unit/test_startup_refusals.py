"""Each setting ``serve`` refuses, refused with the one line that names it.

``serve`` runs in-process (typer's ``CliRunner``): these refusals all happen while the
settings are read and checked, before logging is set up or the data dir is touched, so
nothing of the test process changes. tests/security/test_startup_config.py starts the
real ``sardeenz serve`` for one setting of each kind (exit code, stderr, nothing written);
here every other setting, at the cost of a call instead of a process start (about 0.4 s
of CPU each).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from sardeenz.cli import app
from testkit.ports import free_port


def serve_in_process(tmp_path: Path, **env: str) -> Result:
    return CliRunner().invoke(
        app,
        ["serve", "--data-dir", str(tmp_path / "data")],
        env={"SARDEENZ_PORT": str(free_port()), **env},
    )


def one_clean_line(result: Result, code: int) -> str:
    """The refusal: exit ``code``, exactly one stderr line, no traceback, nothing on stdout."""
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""
    assert lines[0].startswith("sardeenz: ")
    return lines[0]


HS256_SHORT_SECRETS = ["short-secret-Q7", "Z" * 31, "é" * 15]

# (environment, the setting the line names, a phrase that says what is wrong). Each was a
# traceback of 58-85 lines with exit 1, or (the JWKS URL) a traceback with exit 3.
BAD_SETTINGS = [
    ({"SARDEENZ_CATALOG": "{nope"}, "SARDEENZ_CATALOG", "is not valid JSON"),
    ({"SARDEENZ_API_KEYS_FILE": "/nonexistent/keys"}, "SARDEENZ_API_KEYS_FILE", "cannot read"),
    ({"SARDEENZ_API_KEYS_FILE": "{malformed}"}, "SARDEENZ_API_KEYS_FILE", "SHA-256"),
    ({"SARDEENZ_API_KEYS_FILE": "{empty}"}, "SARDEENZ_API_KEYS_FILE", "holds no key"),
    ({"SARDEENZ_RUNTIME_DIR": "/proc/nope"}, "SARDEENZ_RUNTIME_DIR", "cannot create"),
    ({"DATABASE_URL": "nope://x"}, "DATABASE_URL", "unknown database kind 'nope'"),
    ({"DATABASE_URL": "not a url"}, "DATABASE_URL", "not a database URL"),
    ({"DATABASE_URL": "sqlite:///x.db"}, "DATABASE_URL", "not an asyncio driver"),
    ({"SARDEENZ_JWT_JWKS_URL": "not a url"}, "SARDEENZ_JWT_JWKS_URL", "http(s) URL"),
    ({"SARDEENZ_OIDC_ISSUER": "ftp://sso"}, "SARDEENZ_OIDC_ISSUER", "http(s) URL"),
    ({"SARDEENZ_API_KEYS": " , "}, "SARDEENZ_API_KEYS", "holds no key"),
    (
        {"SARDEENZ_TOKEN_REVIEW_ROLE_ACCESS": '{"admin": {"verbs": "get", "resource": "x"}}'},
        "SARDEENZ_TOKEN_REVIEW_ROLE_ACCESS",
        "unknown resourceAttributes",
    ),
]

WHITESPACE_SECRETS = ["SARDEENZ_JWT_SECRET", "CLUSTER_SECRET"]


def check_short_secret(line: str, secret: str, output: str) -> None:
    assert "SARDEENZ_JWT_SECRET" in line
    assert f"{len(secret.encode())} bytes is too short" in line
    assert "at least 32 bytes" in line
    assert secret not in output  # never echo a secret, even a bad one


def with_files(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the ``{malformed}``/``{empty}`` placeholders made into key files."""
    files = {"{malformed}": "zz not-a-digest\n", "{empty}": "# no keys yet\n"}
    out = dict(env)
    for name, value in env.items():
        if value in files:
            path = tmp_path / "keys.txt"
            path.write_text(files[value])
            out[name] = str(path)
    return out


def whitespace_secret_env(name: str) -> dict[str, str]:
    # 32 spaces passed the length check and turned authentication on with no secret.
    env = {name: " " * 32}
    if name == "CLUSTER_SECRET":
        env["CLUSTER_PEERS"] = "127.0.0.1:1"
    return env


@pytest.mark.parametrize("secret", HS256_SHORT_SECRETS[1:])
def test_an_hs256_secret_under_32_bytes_is_refused(tmp_path: Path, secret: str) -> None:
    result = serve_in_process(tmp_path, SARDEENZ_JWT_SECRET=secret, SARDEENZ_HOST="0.0.0.0")
    line = one_clean_line(result, 2)
    check_short_secret(line, secret, result.output)
    assert not (tmp_path / "data").exists()  # refused before touching the disk


@pytest.mark.parametrize(("env", "setting", "why"), BAD_SETTINGS[1:], ids=lambda v: str(v)[:40])
def test_a_setting_services_check_is_one_line_and_exit_2(
    tmp_path: Path, env: dict[str, str], setting: str, why: str
) -> None:
    line = one_clean_line(serve_in_process(tmp_path, **with_files(tmp_path, env)), 2)
    assert line.startswith("sardeenz: invalid configuration: ")
    assert setting in line
    assert why in line
    assert not (tmp_path / "data").exists()  # refused before touching the disk


@pytest.mark.parametrize("name", WHITESPACE_SECRETS[1:])
def test_a_secret_of_spaces_is_refused(tmp_path: Path, name: str) -> None:
    line = one_clean_line(serve_in_process(tmp_path, **whitespace_secret_env(name)), 2)
    assert name in line
    assert "only whitespace" in line
    assert not (tmp_path / "data").exists()


def test_a_sim_gpu_that_is_not_name_colon_size_is_refused(tmp_path: Path) -> None:
    """From tests/e2e/test_cli.py: the flag's own refusal, without a process of its own."""
    result = CliRunner().invoke(
        app, ["serve", "--sim-gpus", "L4=24", "--data-dir", str(tmp_path / "data")]
    )
    line = one_clean_line(result, 2)
    assert "NAME:SIZE" in line
    assert not (tmp_path / "data").exists()
