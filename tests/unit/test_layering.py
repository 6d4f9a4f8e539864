"""The package layering holds: dependencies point one way (DESIGN.md, "Layout").

Parses every module under ``src/sardeenz`` (no imports are executed, so a
cycle cannot hide behind import order) and checks two rules:

* ``sardeenz.store`` (the persisted schemas and repositories) imports no
  service package: the services import their records from the store, never
  the other way round;
* the routers in ``sardeenz.api`` reach a service through one narrow method
  (``services.<service>.<method>``), never through its parts
  (``services.supervisor.vllm_probe.get()``), also not via an alias
  (``sup = services.supervisor; sup.vllm_probe.get()``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import sardeenz

PACKAGE_DIR = Path(sardeenz.__file__).resolve().parent

STORE_MUST_NOT_IMPORT = (
    "memory",
    "bench",
    "runtime",
    "proxy",
    "api",
    "catalog",
    "cluster",
    "services",
    "app",
    "gateway",
    "cli",
)


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(prefix: str = "sardeenz") -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        name = module_name(path)
        if name == prefix or name.startswith(prefix + "."):
            yield name, ast.parse(path.read_text(), filename=str(path))


def imported_modules(name: str, tree: ast.Module, is_package: bool) -> Iterator[tuple[int, str]]:
    """Every module ``tree`` imports (also under TYPE_CHECKING: a type is a dependency too)."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # ``from sardeenz import memory`` names a module
                yield node.lineno, f"{target}.{alias.name}"


def forbidden_store_imports() -> list[str]:
    banned = tuple(f"sardeenz.{p}" for p in STORE_MUST_NOT_IMPORT)
    found = []
    for name, tree in modules("sardeenz.store"):
        is_package = (PACKAGE_DIR.parent / name.replace(".", "/") / "__init__.py").exists()
        for line, target in imported_modules(name, tree, is_package):
            if any(target == b or target.startswith(b + ".") for b in banned):
                found.append(f"{name}:{line} imports {target}")
    return sorted(set(found))


def chain(node: ast.expr) -> tuple[str, list[str]] | None:
    """``a.b.c`` as ("a", ["b", "c"]); None when the chain does not start at a name."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return node.id, attrs[::-1]


def deep_service_chains(tree: ast.Module) -> list[tuple[int, str]]:
    """Where a router reaches past a service into its parts.

    ``services.<a>.<b>.<c>...`` chains (``services.supervisor.vllm_probe.get()``),
    the same through an alias (``sup = services.supervisor; sup.vllm_probe.get()``),
    and a part pulled out into a name (``probe = services.supervisor.vllm_probe``).
    ``services.<a>.<b>`` used in place (a method call, a value read) is the narrow
    way in and passes; so does anything under ``services.settings`` (plain values).
    """
    aliases = {"services": 0}  # name -> how many attributes below ``services`` it already is
    assigned: list[tuple[int, str, int]] = []  # (line, chain, depth) of values bound to names
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            found = chain(node.value)
            if found and found[1][:1] == ["settings"]:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if found and found[0] == "services" and len(found[1]) == 1:
                aliases.update({t.id: 1 for t in targets if isinstance(t, ast.Name)})
            if found and found[1]:
                assigned.append((node.lineno, ".".join([found[0], *found[1]]), len(found[1])))
    hits = [
        (line, text)
        for line, text, depth in assigned
        if text.split(".")[0] in aliases and aliases[text.split(".")[0]] + depth >= 2
    ]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        found = chain(node)
        if found is None or found[0] not in aliases:
            continue
        root, attrs = found
        if root == "services" and attrs[:1] == ["settings"]:
            continue
        if aliases[root] + len(attrs) >= 3:
            hits.append((node.lineno, ".".join([root, *attrs])))
    # keep only the longest chain per line: ``a.b.c.d`` also contains ``a.b.c``
    longest: dict[int, str] = {}
    for line, text in hits:
        if len(text) > len(longest.get(line, "")):
            longest[line] = text
    return sorted(longest.items())


def test_the_package_is_found() -> None:
    names = [name for name, _ in modules()]
    assert "sardeenz.store.db" in names
    assert "sardeenz.api.models" in names


def test_store_imports_no_service_package() -> None:
    assert forbidden_store_imports() == []


def test_api_reaches_services_through_narrow_methods() -> None:
    found = [
        f"{name}:{line} {text}"
        for name, tree in modules("sardeenz.api")
        for line, text in deep_service_chains(tree)
    ]
    assert found == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("services.supervisor.get(i)", []),
        ("services.settings.demo", []),
        ("services.supervisor.vllm_probe.get()", [(1, "services.supervisor.vllm_probe.get")]),
        ("sup = services.supervisor\nsup.vllm_probe.get()", [(2, "sup.vllm_probe.get")]),
        ("sup = services.supervisor\nsup.list_instances()", []),
        ("other.a.b.c", []),
        ("probe = services.supervisor.vllm_probe", [(1, "services.supervisor.vllm_probe")]),
        ("sup = services.supervisor\nprobe = sup.vllm_probe", [(2, "sup.vllm_probe")]),
        ("s = services.settings\nx = s.demo", []),
        ("x = services.settings.cluster.peers", []),
        ("reply = Reply(enabled=services.auth.enabled)", []),
    ],
)
def test_the_chain_check_itself(source: str, expected: list[tuple[int, str]]) -> None:
    assert deep_service_chains(ast.parse(source)) == expected


def test_the_store_check_itself() -> None:
    tree = ast.parse(
        "from sardeenz.memory.models import X\n"
        "from ..bench import models\n"
        "from sardeenz import cluster\n"
        "import sardeenz.proxy.routing\n"
        "from sardeenz.store.db import Database\n"
        "from sardeenz.domain import utcnow\n"
    )
    targets = [t for _, t in imported_modules("sardeenz.store.x", tree, is_package=False)]
    banned = tuple(f"sardeenz.{p}" for p in STORE_MUST_NOT_IMPORT)
    bad = {t for t in targets if any(t == b or t.startswith(b + ".") for b in banned)}
    assert bad >= {
        "sardeenz.memory.models",
        "sardeenz.bench",
        "sardeenz.cluster",
        "sardeenz.proxy.routing",
    }
    assert not any(t.startswith(("sardeenz.store", "sardeenz.domain")) for t in bad)


CLUSTER_LAYERS = {
    # layer: what of sardeenz.cluster it may import (besides itself)
    "sardeenz.cluster.transport": ("sardeenz.cluster.identity",),
    "sardeenz.cluster.membership": ("sardeenz.cluster.identity", "sardeenz.cluster.transport"),
}
"""cluster/ in three layers (DESIGN.md): transport at the bottom, membership on it, the
features on both; the two lower layers never import a feature (nor the manager)."""


def cluster_layer_violations() -> list[str]:
    found = []
    for layer, allowed in CLUSTER_LAYERS.items():
        for name, tree in modules(layer):
            is_package = (PACKAGE_DIR.parent / name.replace(".", "/") / "__init__.py").exists()
            for line, target in imported_modules(name, tree, is_package):
                if not target.startswith("sardeenz.cluster.") or target == "sardeenz.cluster":
                    continue
                ok = (layer, *allowed)
                if not any(target == a or target.startswith(a + ".") for a in ok):
                    found.append(f"{name}:{line} imports {target}")
    return sorted(set(found))


def test_cluster_transport_and_membership_import_no_feature() -> None:
    assert [name for name, _ in modules("sardeenz.cluster.transport")]
    assert [name for name, _ in modules("sardeenz.cluster.membership")]
    assert cluster_layer_violations() == []


NO_UPWARD_IMPORTS = {
    # package: packages above it that it must not import
    "sardeenz.memory": ("sardeenz.runtime", "sardeenz.api", "sardeenz.cluster"),
    "sardeenz.proxy": (
        "sardeenz.gateway",
        "sardeenz.app",
        "sardeenz.api",
        "sardeenz.cluster",
        "sardeenz.catalog",
        "sardeenz.services",
    ),
    "sardeenz.security": ("sardeenz.proxy", "sardeenz.gateway", "sardeenz.api", "sardeenz.app"),
}
"""The supervisor (runtime) imports the memory ledger, so memory never imports runtime; the
gateway puts the proxy in front of the app, so the proxy never imports the gateway; the
proxy's wire helpers are above security, which shares only sardeenz.asgi with them."""


def upward_imports() -> list[str]:
    found = []
    for package, banned in NO_UPWARD_IMPORTS.items():
        for name, tree in modules(package):
            is_package = (PACKAGE_DIR.parent / name.replace(".", "/") / "__init__.py").exists()
            for line, target in imported_modules(name, tree, is_package):
                if any(target == b or target.startswith(b + ".") for b in banned):
                    found.append(f"{name}:{line} imports {target}")
    return sorted(set(found))


def test_no_upward_imports() -> None:
    assert upward_imports() == []
