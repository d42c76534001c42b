"""docs/architecture.md matches the package tree: every module is named on it (a module
added, moved or renamed changes the page in the same commit), and the README links it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "architecture.md").read_text()
TREE = PAGE.partition("## The package tree")[2]


def modules() -> list[Path]:
    package = ROOT / "src" / "tidings"
    return sorted(p.relative_to(package) for p in package.rglob("*.py")
                  if p.name not in ("__init__.py", "__main__.py"))


def test_every_module_is_on_the_page() -> None:
    named = set(re.findall(r"[a-z0-9_]+", TREE))  # a Django migration starts with digits
    missing = [str(m) for m in modules() if m.stem not in named]
    assert not missing, f"docs/architecture.md does not name: {missing}"


def test_every_package_has_its_line() -> None:
    packages = {m.parts[0] for m in modules() if len(m.parts) > 1}
    missing = [p for p in sorted(packages) if f"{p}/" not in TREE]
    assert not missing, f"docs/architecture.md has no line for: {missing}"


def test_the_readme_links_the_page() -> None:
    assert "docs/architecture.md" in (ROOT / "README.md").read_text()


def test_the_tree_is_the_one_the_code_draws() -> None:
    spec = importlib.util.spec_from_file_location("package_tree", ROOT / "docs" / "package_tree.py")
    assert spec is not None and spec.loader is not None
    tree = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tree)
    assert tree.page() == PAGE, "the package tree is stale: run python docs/package_tree.py"
