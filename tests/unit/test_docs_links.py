"""The hand-written docs stay true too: their links resolve, and the ``SARDEENZ_*``
names they mention exist (a renamed setting must not live on in the prose)."""

from __future__ import annotations

import re
from pathlib import Path

from sardeenz.config import Settings
from sardeenz.tools.gendocs import _env_names

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
FENCE = re.compile(r"```.*?```", re.S)
NAME = re.compile(r"\bSARDEENZ_[A-Z0-9_]*[A-Z0-9]\b")


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to ``-``,
    ``-1``, ``-2`` ... for repeated headings."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#+ (.*)$", FENCE.sub("", text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        anchors.add(slug if count == 0 else f"{slug}-{count}")
        seen[slug] = count + 1
    return anchors


def test_relative_links_and_anchors_of_the_docs_resolve() -> None:
    anchors = {doc: _anchors(doc.read_text()) for doc in DOCS}
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", FENCE.sub("", doc.read_text())):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not checked offline
            path, _, fragment = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                broken.append(f"{doc.name}: {target} (no such file)")
            elif fragment and dest.suffix == ".md" and fragment not in anchors.get(dest, set()):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert broken == []


MENTIONED_DOC = re.compile(r"(?<![\w/.-])((?:\.{1,2}/|/|~/)?[\w./-]*\.md)\b")
"""A Markdown file named in the prose or in code spans (``../shared/DESIGN.md``)."""


def test_the_docs_never_point_outside_the_repository() -> None:
    """Every link, and every ``*.md`` a doc names, is a file of this repository.

    The links test above checks link syntax only; a design file named in a code span
    (```../shared/DESIGN.md```) or a link climbing out of the repository passed it.
    """
    outside = []
    for doc in DOCS:
        text = doc.read_text()
        targets = re.findall(r"\]\(([^)\s]+)\)", text)
        named = MENTIONED_DOC.findall(text)
        for target in [*targets, *named]:
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto:
            path = target.partition("#")[0]
            if not path:
                continue
            candidates = [(doc.parent / path).resolve(), (ROOT / path).resolve()]
            if not any(c.exists() and c.is_relative_to(ROOT) for c in candidates):
                outside.append(f"{doc.name}: {target}")
    assert outside == []


def test_every_sardeenz_name_in_the_docs_exists() -> None:
    settings = {
        env for name, info in Settings.model_fields.items() for env in _env_names(name, info)
    }
    # Names that are not settings (CLI, test tiers, engine markers) live in the code.
    code = (
        "\n".join(
            p.read_text(errors="replace")
            for folder in ("src", "testkit", "tests", "scripts", "deploy")
            for p in (ROOT / folder).rglob("*")
            if p.is_file()
            and p.suffix in {".py", ".sh", ".yaml", ".yml", ""}
            and p.stat().st_size < 10**6
        )
        + (ROOT / "Makefile").read_text()
    )
    known = settings | set(NAME.findall(code))
    unknown = {f"{doc.name}: {name}" for doc in DOCS for name in NAME.findall(doc.read_text())}
    unknown = {u for u in unknown if u.split(": ")[1] not in known}
    assert sorted(unknown) == []
