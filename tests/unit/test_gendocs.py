"""docs/configuration.md's settings table is the code's: generated, and checked for drift."""

from __future__ import annotations

from pathlib import Path

from sardeenz.config import Settings
from sardeenz.tools import gendocs


def test_committed_configuration_doc_matches_the_code() -> None:
    diff = gendocs.check()
    assert diff == [], (
        "docs/configuration.md drifted from Settings; run `python -m sardeenz.tools.gendocs`\n"
        + "\n".join(diff)
    )


def test_every_setting_and_env_name_is_in_the_doc() -> None:
    doc = gendocs.DOC.read_text()
    table = doc.split(gendocs.BEGIN)[1].split(gendocs.END)[0]
    for name, info in Settings.model_fields.items():
        assert f"\n| {name} |" in table, name
        for env in gendocs._env_names(name, info):
            assert f"`{env}`" in table, env
    for auth in ("SARDEENZ_JWT_SECRET", "SARDEENZ_OIDC_ISSUER", "SARDEENZ_API_KEYS_FILE"):
        assert auth in table


def test_check_fails_on_a_drifted_doc_and_keeps_the_prose(tmp_path: Path) -> None:
    doc = tmp_path / "configuration.md"
    original = gendocs.DOC.read_text()
    doc.write_text(original.replace("| port | `SARDEENZ_PORT`", "| port | `SARDEENZ_PORTX`"))
    assert gendocs.main(["--check", "--path", str(doc)]) == 1
    assert gendocs.main(["--path", str(doc)]) == 0
    assert doc.read_text() == original
    assert gendocs.main(["--check", "--path", str(doc)]) == 0
    assert original.startswith("# Configuration")  # hand-written prose outside the markers
