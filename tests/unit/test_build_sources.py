"""The image build and the deploy tier's base images name no package index or mirror of their own.

Without the build argument (``PIP_INDEX_URL``, ``NPM_REGISTRY``) or ``SARDEENZ_DEBIAN_MIRROR``,
the tools' own configuration applies: pip's and npm's inside the build, the machine's apt
sources for ``scripts/deploy-base.sh``. A public address written in as a default would
silently bypass a site's mirror.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "deploy" / "Containerfile"


def arg_defaults() -> dict[str, str | None]:
    """Every ``ARG NAME[=default]`` of the Containerfile (the last one of a name wins)."""
    found: dict[str, str | None] = {}
    for line in CONTAINERFILE.read_text().splitlines():
        match = re.match(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?\s*$", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def test_index_and_registry_arguments_have_no_default() -> None:
    defaults = arg_defaults()
    assert "PIP_INDEX_URL" in defaults
    assert "NPM_REGISTRY" in defaults
    assert defaults["PIP_INDEX_URL"] is None
    assert defaults["NPM_REGISTRY"] is None


def test_no_argument_defaults_to_an_index_address() -> None:
    # Base images are image references (a registry the operator can override with BASE);
    # package indexes and mirrors are URLs, and none may be a default.
    urls = {name: value for name, value in arg_defaults().items() if value and "://" in value}
    assert urls == {}


def test_build_steps_pass_the_index_only_when_given() -> None:
    text = CONTAINERFILE.read_text()
    assert "--index-url" not in text, "pip reads PIP_INDEX_URL itself when it is given"
    assert '${NPM_REGISTRY:+--registry "$NPM_REGISTRY"}' in text
    assert not re.search(r"https?://(pypi\.org|registry\.npmjs\.org|deb\.debian\.org)", text)


def test_deploy_base_has_no_fallback_mirror() -> None:
    script = (REPO / "scripts" / "deploy-base.sh").read_text()
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"https?://", code)
    assert "SARDEENZ_DEBIAN_MIRROR" in code
