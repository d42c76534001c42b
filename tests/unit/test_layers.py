"""The package tree's rules, read from the source: every import points down the layers,
no import circle, no module past ~600 lines without a reason stated at its top.

Every import counts: top-level, inside a function, and under ``TYPE_CHECKING`` (a
type-only circle still ties two modules together for a reader and for mypy).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "tidings"

#: Bottom to top. A module may import its own package and any package below it.
#: One entry per layer; packages in one tuple are siblings and may not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("config",),
    ("stores",),
    ("transports", "webhooks"),
    ("sandbox",),
    ("providers",),
    ("admission",),
    ("delivery",),
    ("recovery",),
    ("operate",),
    ("runtime",),
    ("processes",),
    ("api",),
    ("demo",),
    ("client", "embedded"),
    ("cli", "contrib", "testing"),
)
#: Modules above every layer: the package's lazy facade and ``python -m tidings``;
ABOVE_ALL = frozenset({"", "__main__"})
MAX_LINES = 600
#: What a module past MAX_LINES says at its top (in its docstring) to explain why.
SIZE_REASON = "one module because"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """The tidings modules ``path`` imports, with the line of each import."""

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tidings" and (found := resolve(alias.name)):
                    yield found, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".")[0] != "tidings":
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found = full if full in known else resolve(node.module)
                if found:
                    yield found, node.lineno


def graph() -> dict[str, dict[str, int]]:
    mods = modules()
    known = set(mods)
    return {name: {dep: line for dep, line in imports(path, known) if dep != name}
            for name, path in mods.items()}


def top(module: str) -> str:
    """The layer's package of a module: ``tidings.delivery.worker`` -> ``delivery``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}


def upward(graph: dict[str, dict[str, int]]) -> list[str]:
    wrong = []
    for module, deps in sorted(graph.items()):
        own = top(module)
        if own in ABOVE_ALL:
            continue
        for dep, line in sorted(deps.items()):
            theirs = top(dep)
            if theirs == own:
                continue
            if theirs in ABOVE_ALL or RANK[theirs] >= RANK[own]:
                wrong.append(f"{module}:{line} imports {dep} ({own} may import only "
                             f"layers below it)")
    return wrong


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_every_package_has_a_layer() -> None:
    packages = {top(m) for m in modules()} - ABOVE_ALL
    assert packages <= set(RANK), f"give these packages a layer: {sorted(packages - set(RANK))}"


def test_imports_point_down() -> None:
    wrong = upward(graph())
    assert not wrong, "\n".join(wrong)


def test_no_import_circle() -> None:
    found = cycles(graph())
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_big_modules_say_why() -> None:
    unexplained = []
    for name, path in modules().items():
        text = path.read_text()
        lines = text.count("\n")
        if lines <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if SIZE_REASON not in " ".join(doc.split()).lower():
            unexplained.append(f"{name}: {lines} lines")
    assert not unexplained, (f"split these, or say at the top why each is '{SIZE_REASON}' "
                             f"...: {unexplained}")


def test_every_package_says_what_it_owns() -> None:
    silent = [name for name, path in modules().items()
              if path.name == "__init__.py" and not ast.get_docstring(ast.parse(path.read_text()))]
    assert not silent, f"a package's __init__ says what it owns and may import: {silent}"


# The checks themselves must be able to fail: each is shown a tree that breaks it.

def test_the_layer_check_finds_an_upward_import() -> None:
    bad = {"tidings.core.model": {"tidings.delivery.worker": 3}, "tidings.delivery.worker": {}}
    assert upward(bad) == ["tidings.core.model:3 imports tidings.delivery.worker "
                           "(core may import only layers below it)"]


def test_the_layer_check_refuses_siblings() -> None:
    bad = {"tidings.webhooks.parse": {"tidings.transports.base": 1}}
    assert upward(bad)


@pytest.mark.parametrize("ring", [2, 3])
def test_the_circle_check_finds_a_ring(ring: int) -> None:
    names = [f"tidings.core.m{i}" for i in range(ring)]
    bad = {n: {names[(i + 1) % ring]: 1} for i, n in enumerate(names)}
    bad["tidings.core.alone"] = {names[0]: 1}
    assert cycles(bad) == [sorted(names)]
