"""The documentation site's generated references are current, and its Python reference
covers the public surface.

- docs/cli.md, below its hand-written head, is what docs/cli_reference.py writes from
  the Typer app, so a command, argument or option added, renamed or re-described is on
  the page in the same commit; every command the app has is there;
- docs/http-reference.md is what docs/http_reference.py writes from the app's OpenAPI
  schema, with every route and the scope it needs;
- docs/python-api.md renders each public module that docs/compatibility.md lists (each
  module shows its ``__all__``, which tests/unit/test_public_surface.py holds to the
  list);
- every page of the site is in mkdocs.yml's nav, and the nav names no missing page.

`mkdocs build --strict` (run by .ci/run) checks links, anchors and the Python
reference's objects.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import typer

from tidings.api.auth import default_scope_map
from tidings.cli import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def generator(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_is_the_one_the_app_draws() -> None:
    page = (DOCS / "cli.md").read_text()
    assert generator("cli_reference").page() == page, (
        "docs/cli.md is stale: run python docs/cli_reference.py")


def command_paths(command: Any, prefix: str) -> list[str]:
    found = [prefix]
    if hasattr(command, "list_commands"):  # typer's groups are duck-typed
        ctx = command.context_class(command, info_name=prefix)
        for name in command.list_commands(ctx):
            found += command_paths(command.get_command(ctx, name), f"{prefix} {name}")
    return found


def test_the_cli_reference_has_every_command() -> None:
    page = (DOCS / "cli.md").read_text()
    paths = command_paths(typer.main.get_command(app), "tidings")
    assert len(paths) > 30
    missing = [p for p in paths if f"# `{p}`\n" not in page]
    assert not missing, missing


def test_the_http_reference_is_the_one_the_schema_draws() -> None:
    page = (DOCS / "http-reference.md").read_text()
    assert generator("http_reference").page() == page, (
        "docs/http-reference.md is stale: run python docs/http_reference.py")


def test_the_http_reference_has_every_route_with_its_scope() -> None:
    reference = generator("http_reference")
    document = reference.schema()
    page = (DOCS / "http-reference.md").read_text()
    scopes = default_scope_map()
    routes = [(method.upper(), path) for path, item in document["paths"].items()
              for method in item]
    assert ("POST", "/v1/trigger/{campaign}") in routes and len(routes) > 20
    for method, path in routes:
        section = page.partition(f"### `{method} {path}`\n")[2].partition("\n### ")[0]
        assert section, f"{method} {path} has no section"
        scope = scopes.scope_for(method, path)
        assert scope is not None, f"{method} {path} has no scope"
        assert f"Scope: {reference.SCOPES.get(scope, f'`{scope}`')}." in section


def public_modules() -> list[str]:
    text = (DOCS / "compatibility.md").read_text().split("## The public modules", 1)[1]
    return re.findall(r"^### (\S+)$", text, flags=re.M)


def test_the_python_reference_renders_every_public_module() -> None:
    page = (DOCS / "python-api.md").read_text()
    rendered = re.findall(r"^::: (\S+)$", page, flags=re.M)
    assert {"tidings", "tidings.providers", "tidings.testing"} <= set(public_modules())
    assert rendered == public_modules()


def nav_pages(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [p for value in node.values() for p in nav_pages(value)]
    return [p for item in node for p in nav_pages(item)]


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    import yaml  # mkdocs' own dependency (the docs extra, in dev)

    named = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert len(named) == len(set(named)), "a page is in mkdocs.yml's nav twice"
    assert not set(pages) - set(named), (
        f"pages missing from mkdocs.yml's nav: {sorted(set(pages) - set(named))}")
    assert not set(named) - set(pages), (
        f"mkdocs.yml's nav names pages that do not exist: {sorted(set(named) - set(pages))}")
