"""docs/configuration.md's settings table is the code's: generated, and checked for drift."""

from __future__ import annotations

import copy
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from sardeenz.app import create_app
from sardeenz.config import Settings, load_settings
from sardeenz.security.policy import ADMIN, iter_api_routes, policy_of
from sardeenz.tools import gendocs, gendocs_api


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


# docs/api.md: one route table per OpenAPI tag, generated from the app itself.

NEW_PATH = "/api/v1/models/{instance_id}/pin"


@pytest.fixture(scope="module")
def grown_app() -> gendocs_api.Routes:
    """The app with one route more than the committed doc knows, as a new router would add."""

    async def pin(instance_id: str) -> dict[str, str]:
        """Keep an instance from idle sleeps."""
        return {}

    with tempfile.TemporaryDirectory() as tmp:
        api = create_app(load_settings(data_dir=Path(tmp))).api
        api.add_api_route(NEW_PATH, pin, methods=["POST"], tags=["models"], dependencies=[ADMIN])
        return api.openapi(), gendocs_api.route_roles(api.routes)


def test_committed_api_doc_matches_the_app() -> None:
    diff = gendocs.check_api()
    assert diff == [], (
        "docs/api.md's route tables drifted from the app; run `python -m sardeenz.tools.gendocs`\n"
        + "\n".join(diff)
    )


def test_every_api_route_is_in_the_doc_with_its_role() -> None:
    doc = gendocs_api.DOC.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        routes = list(iter_api_routes(create_app(load_settings(data_dir=Path(tmp))).api.routes))
    documented = [r for r in routes if r.include_in_schema]
    assert len(documented) >= 50
    for route in documented:
        role = gendocs_api.ROLE_NAMES[policy_of(route.dependencies[0]) or ""]
        for method in route.methods or ():
            assert f"| {method} | `{route.path_format}" in doc, (method, route.path)
            row = doc.split(f"| {method} | `{route.path_format}")[1].split("\n")[0]
            assert row.split(" | ")[1] == role, (method, route.path, row)


def test_a_route_added_without_regenerating_fails_the_check(
    grown_app: gendocs_api.Routes,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gendocs_api, "app_routes", lambda: grown_app)
    doc = tmp_path / "api.md"
    original = gendocs_api.DOC.read_text()
    doc.write_text(original)
    assert gendocs.main(["--check", "--api-path", str(doc)]) == 1
    assert doc.read_text() == original  # --check writes nothing
    assert gendocs.main(["--api-path", str(doc)]) == 0
    fresh = doc.read_text()
    row = f"| POST | `{NEW_PATH}` | admin | 200 | Keep an instance from idle sleeps. |"
    assert row in fresh
    # Only the models table changed: the prose and the other tables are as committed.
    assert fresh.replace(row + "\n", "") == original
    assert gendocs.main(["--check", "--api-path", str(doc)]) == 0


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (lambda op: op.pop("description"), "no docstring"),
        (lambda op: op.update(tags=["pins"]), "no markers for tags ['pins']"),
    ],
)
def test_an_undocumentable_route_fails_the_generation(
    grown_app: gendocs_api.Routes,
    change: Any,
    complaint: str,
) -> None:
    document, roles = copy.deepcopy(grown_app)
    change(document["paths"][NEW_PATH]["post"])
    committed = gendocs_api.DOC.read_text()
    with pytest.raises(SystemExit, match=re.escape(complaint)):
        gendocs_api.render(committed, gendocs_api.tables((document, roles)))


def test_a_route_without_a_policy_fails_the_generation(
    grown_app: gendocs_api.Routes,
) -> None:
    document, roles = copy.deepcopy(grown_app)
    del roles[("POST", NEW_PATH)]
    with pytest.raises(SystemExit, match="no policy"):
        gendocs_api.routes_by_tag(document, roles)
