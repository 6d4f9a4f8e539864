"""Catalog entries with ``engine: external``: their checks, and the header swap."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sardeenz.catalog.keys import KeySources, KeyUnavailable, read_key
from sardeenz.catalog.validation import EntryInvalid, check_entry, parse_external_url
from sardeenz.domain import EngineKind
from sardeenz.proxy.routing import ExternalTarget
from sardeenz.proxy.wire import replace_authorization
from sardeenz.store.records import CatalogEntry


def test_url_parts() -> None:
    u = parse_external_url("http://10.0.0.5:8000/v1")
    assert (u.host, u.port, u.prefix, u.base) == ("10.0.0.5", 8000, "", "http://10.0.0.5:8000")
    u = parse_external_url("http://gw.local/openai/v1/")
    assert (u.host, u.port, u.prefix) == ("gw.local", 80, "/openai")
    assert parse_external_url("http://[::1]:9/").base == "http://[::1]:9"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://api.example.org/v1", "https:// is not supported"),
        ("ftp://x", "http://host"),
        ("http://user:pw@x:1", "no user"),
        ("http://x:99999", "invalid port"),
    ],
)
def test_bad_urls_say_why(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_external_url(url)


def entry(**fields: object) -> dict[str, object]:
    return {"engine": "external", "url": "http://127.0.0.1:8000", "modelPath": "m", **fields}


def test_an_external_entry_is_checked_as_one() -> None:
    got = check_entry("ext", entry(apiKeyEnv="KEY", aliases=["e"]), EngineKind.SIM)
    assert got.engine == "external"
    assert got.api_key_env == "KEY"
    for bad, field in [
        (entry(url=None), "url"),
        (entry(url="https://x"), "url: https"),
        (entry(apiKeyEnv="A", apiKeyFile="/f"), "apiKeyEnv"),
        (entry(extraArgs=["--x"]), "extraArgs"),
        (entry(sleepLevel=1), "sleepLevel"),
        (entry(preload=True), "preload"),
    ]:
        with pytest.raises(EntryInvalid, match=f"catalog entry 'ext': {field}"):
            check_entry("ext", bad, EngineKind.SIM)
    with pytest.raises(EntryInvalid, match="url: only for engine external"):
        check_entry("local", {"modelPath": "m", "url": "http://x"}, EngineKind.SIM)


def test_the_clients_key_is_replaced_by_the_servers() -> None:
    block = b"Authorization: Bearer client\r\ncontent-type: application/json\r\n"
    out = replace_authorization(block, b"authorization: Bearer server\r\n")
    assert out == b"content-type: application/json\r\nauthorization: Bearer server\r\n"
    assert replace_authorization(block, b"") == b"content-type: application/json\r\n"


def test_the_key_is_not_in_a_repr() -> None:
    target = ExternalTarget(auth=b"authorization: Bearer sk-secret\r\n")
    assert b"sk-secret".decode() not in repr(target)


def test_the_key_comes_from_the_variable_or_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXT_KEY_FOR_TEST", "sk-from-env")
    sources = KeySources(key_dir=tmp_path)
    env = CatalogEntry.model_validate(entry(apiKeyEnv="EXT_KEY_FOR_TEST"))
    assert asyncio.run(read_key(env, sources)) == "sk-from-env"
    key_file = tmp_path / "key"
    key_file.write_text("sk-from-file\n")
    from_file = CatalogEntry.model_validate(entry(apiKeyFile=str(key_file)))
    assert asyncio.run(read_key(from_file, sources)) == "sk-from-file"
    key_file.write_text("sk-rotated\n")  # read at every check: a rotated key is used
    assert asyncio.run(read_key(from_file, sources)) == "sk-rotated"
    assert asyncio.run(read_key(CatalogEntry.model_validate(entry()), sources)) is None
    monkeypatch.delenv("EXT_KEY_FOR_TEST")
    with pytest.raises(KeyUnavailable, match="EXT_KEY_FOR_TEST is not set"):
        asyncio.run(read_key(env, sources))
    key_file.write_text("sk-a\r\nx-injected: 1\n")
    with pytest.raises(KeyUnavailable, match="characters a header cannot carry") as caught:
        asyncio.run(read_key(from_file, sources))
    assert "sk-a" not in str(caught.value)
    key_file.unlink()
    with pytest.raises(KeyUnavailable, match="apiKeyFile: cannot read"):
        asyncio.run(read_key(from_file, sources))


@pytest.mark.parametrize(
    "name",
    ["SARDEENZ_JWT_SECRET", "SARDEENZ_API_KEYS", "CLUSTER_SECRET", "DATABASE_URL", "sardeenz_x"],
)
def test_an_entry_cannot_name_sardeenzs_own_variables(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, "the-node-secret")
    ext = CatalogEntry.model_validate(entry(apiKeyEnv=name))
    with pytest.raises(KeyUnavailable, match="Sardeenz's own variables") as caught:
        asyncio.run(read_key(ext, KeySources()))
    assert "the-node-secret" not in str(caught.value)


def test_the_allow_list_limits_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_KEY_A", "sk-a")
    monkeypatch.setenv("HOME_TOKEN", "sk-b")
    sources = KeySources(env_patterns=("OPENAI_*",))
    ok = CatalogEntry.model_validate(entry(apiKeyEnv="OPENAI_KEY_A"))
    assert asyncio.run(read_key(ok, sources)) == "sk-a"
    other = CatalogEntry.model_validate(entry(apiKeyEnv="HOME_TOKEN"))
    with pytest.raises(KeyUnavailable, match="SARDEENZ_EXTERNAL_KEY_ENVS"):
        asyncio.run(read_key(other, sources))


def test_a_key_file_must_be_inside_the_key_directory(tmp_path: Path) -> None:
    keys, outside = tmp_path / "keys", tmp_path / "outside"
    keys.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("node-secret\n")
    (keys / "link").symlink_to(outside / "secret")
    (keys / "good").write_text("sk-good\n")
    for path, allowed in (
        (keys / "good", True),
        (outside / "secret", False),
        (keys / "link", False),  # a symlink out of the directory
        (keys / ".." / "outside" / "secret", False),
    ):
        ext = CatalogEntry.model_validate(entry(apiKeyFile=str(path)))
        if allowed:
            assert asyncio.run(read_key(ext, KeySources(key_dir=keys))) == "sk-good"
            continue
        with pytest.raises(KeyUnavailable, match="inside SARDEENZ_EXTERNAL_KEY_DIR"):
            asyncio.run(read_key(ext, KeySources(key_dir=keys)))
    # No directory configured: no file at all.
    ext = CatalogEntry.model_validate(entry(apiKeyFile=str(keys / "good")))
    with pytest.raises(KeyUnavailable, match="set SARDEENZ_EXTERNAL_KEY_DIR"):
        asyncio.run(read_key(ext, KeySources()))
