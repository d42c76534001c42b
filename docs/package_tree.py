"""Write the package tree of docs/architecture.md from the code.

Each module with the first sentence of its docstring, packages in layer order. Run
``python docs/package_tree.py`` after adding, moving or renaming a module;
tests/unit/test_architecture_doc.py fails while the page and the tree differ.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "tidings"
PAGE = ROOT / "docs" / "architecture.md"
HEADING = "## The package tree"
#: Packages in layer order (tests/unit/test_layers.py holds the rule itself).
ORDER = ("core", "config", "stores", "transports", "webhooks", "sandbox", "providers",
         "admission", "delivery", "recovery", "operate", "processes", "api", "demo",
         "cli", "contrib", "testing")
ROOT_MODULES = ("__init__.py", "runtime.py", "client.py", "embedded.py")
WIDTH = 100
FOOTER = """\
tests/  unit/ conformance/ integration/ scenarios/ acceptance/ support/
bench/  run.py and one script per measure (README.md lists them), peers/
docs/   the documentation site's pages (mkdocs.yml at the root: tutorials, how-to guides,
        reference, explanation), among them architecture.md (this page), compatibility.md
        (the public surface), capacity.md (measured figures, sizing); settings.md, cli.md
        and http-reference.md are generated (by tidings.config.reference, cli_reference.py
        and http_reference.py, each tested current); alerts.yml (Prometheus rules)"""


def first_sentence(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    text = " ".join(doc.split("\n\n")[0].split()).replace("``", "")
    cuts = [i for i in (text.find(". "), text.find(": ")) if i >= 0]
    return (text[:min(cuts)] if cuts else text).removesuffix(".")


def line(indent: int, name: str, text: str) -> list[str]:
    column = 2 + indent + 25
    head = f"{' ' * (2 + indent)}{name}".ljust(column - 1) + " "
    body = textwrap.wrap(text, WIDTH - column) or [""]
    return [head + body[0]] + [" " * column + rest for rest in body[1:]]


def package(path: Path, indent: int, label: str) -> list[str]:
    out = line(indent, label, first_sentence(path / "__init__.py"))
    data = []
    for child in sorted(path.iterdir()):
        if child.suffix == ".py" and child.name != "__init__.py" and child.name != "__main__.py":
            out += line(indent + 2, child.name, first_sentence(child))
    for child in sorted(path.iterdir()):
        if not child.is_dir() or child.name == "__pycache__":
            continue
        if (child / "__init__.py").exists():
            out += package(child, indent + 2, f"{path.name}/{child.name}/")
        else:
            data.append(f"{child.name}/")
    if data:
        out.append(f"{' ' * (4 + indent)}{', '.join(data)}  (data files)")
    return out


def render() -> str:
    out = ["src/tidings/"]
    for name in ROOT_MODULES:
        out += line(0, name, first_sentence(PACKAGE / name))
    for name in ORDER:
        out += package(PACKAGE / name, 0, f"{name}/")
    unplaced = sorted(p.name for p in PACKAGE.iterdir()
                      if (p / "__init__.py").exists() and p.name not in ORDER)
    if unplaced:
        raise SystemExit(f"package_tree.py: place {unplaced} in ORDER")
    return "\n".join([*out, FOOTER])


def page() -> str:
    head = PAGE.read_text().partition(HEADING)[0]
    return (f"{head}{HEADING}\n\nEach module with the first sentence of its docstring "
            f"(packages in layer order):\n\n```\n{render()}\n```\n")


if __name__ == "__main__":
    PAGE.write_text(page())
    sys.stdout.write(f"wrote {PAGE.relative_to(ROOT)}\n")
