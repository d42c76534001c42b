"""Write the HTTP API reference, docs/http-reference.md, from the app's OpenAPI schema.

The schema is the one ``tidings api`` serves at ``/openapi.json``: ``tidings.api.app``
builds the app over a throw-away SQLite runtime and ``openapi_schema`` reads it; the
scope each route needs is the app's own scope map. Run ``python docs/http_reference.py``
after changing a route; tests/unit/test_docs_reference.py fails while the page and the
schema differ.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "http-reference.md"
TITLE = "# HTTP API reference"
NOTE = ("<!-- Generated from the app's OpenAPI schema by `python docs/http_reference.py`; "
        "tests/unit/test_docs_reference.py fails while this page is not current. -->")
INTRO = """\
Every route `tidings api` serves, read from the OpenAPI schema it serves at
`/openapi.json` (and shows at `/docs`). How to use them: [Over HTTP](http-api.md) (the
trigger's signature, publishing, what is refused) and [the dashboard](dashboard.md).
Refusals answer [`ErrorBody`](#errorbody), naming the field."""
SCOPES = {
    "public": "none",
    "trigger": "`trigger`, or a trigger signature",
}


async def _schema() -> dict[str, Any]:
    from tidings.api.app import create_app, openapi_schema
    from tidings.config.settings import Settings
    from tidings.runtime import build_runtime

    with tempfile.TemporaryDirectory() as folder:
        runtime = await build_runtime(Settings(store=f"sqlite:///{folder}/schema.db"))
        try:
            return openapi_schema(create_app(runtime, env={}, resume_on_start=False))
        finally:
            await runtime.close()


def schema() -> dict[str, Any]:
    """The OpenAPI document of an app with the default settings."""
    return asyncio.run(_schema())


_CODE = re.compile(r"(``.+?``|`[^`]+`)", re.DOTALL)


def _outside_code(text: str, *pairs: tuple[str, str]) -> str:
    """``text`` with each (old, new) replaced outside its code spans only."""
    parts = _CODE.split(text)
    for i in range(0, len(parts), 2):
        for old, new in pairs:
            parts[i] = parts[i].replace(old, new)
    return "".join(parts)


def _text(text: str | None) -> str:
    """Prose from a docstring, as Markdown: ``code`` stays code, and a ``<`` outside it
    is text, not the start of HTML."""
    return _outside_code((text or "").strip(), ("<", "&lt;"))


def _cell(text: str | None) -> str:
    """One table cell: one line, a pipe outside code escaped (inside code, Python-Markdown
    keeps it as it is)."""
    return _outside_code(" ".join(_text(text).split()), ("|", "\\|"))


def _value(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json.dumps(value, ensure_ascii=False)


def _anchor(name: str) -> str:
    return name.lower()


def _type(node: dict[str, Any]) -> str:
    """A schema as a few words: ``string``, ``array of [Item](#item)``, ``a or b``."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{_anchor(name)})"
    if "anyOf" in node or "oneOf" in node:
        options = node.get("anyOf") or node["oneOf"]
        named = [_type(o) for o in options if o.get("type") != "null"]
        nullable = len(named) < len(options)
        return " or ".join(named) + (" or null" if nullable else "")
    if "enum" in node:
        return "one of " + ", ".join(f"`{_value(v)}`" for v in node["enum"])
    if "const" in node:
        return f"`{_value(node['const'])}`"
    kind = node.get("type", "any")
    if kind == "array":
        return f"array of {_type(node.get('items', {}))}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"object of {_type(node['additionalProperties'])}"
    return f"{kind} ({node['format']})" if "format" in node else str(kind)


def _limits(node: dict[str, Any]) -> str:
    """The constraints a schema puts on a value, and its default."""
    for option in node.get("anyOf", []):
        if option.get("type") != "null":
            node = {**option, **{k: v for k, v in node.items() if k != "anyOf"}}
    words = []
    shortest, longest = node.get("minLength"), node.get("maxLength")
    if shortest is not None and longest is not None:
        words.append(f"{shortest} to {longest} characters")
    elif longest is not None:
        words.append(f"at most {longest} characters")
    elif shortest is not None:
        words.append(f"at least {shortest} characters")
    for key, label in (("minimum", "at least {}"), ("exclusiveMinimum", "above {}"),
                       ("maximum", "at most {}"), ("exclusiveMaximum", "below {}"),
                       ("minItems", "at least {} items"), ("maxItems", "at most {} items")):
        if key in node:
            words.append(label.format(_value(node[key])))
    if "pattern" in node:
        words.append(f"matching `{node['pattern']}`")
    if "default" in node and node["default"] is not None:
        words.append(f"default `{_value(node['default'])}`")
    return "; ".join(words)


def _described(node: dict[str, Any]) -> str:
    parts = [_cell(node.get("description")) or _cell(next(
        (o.get("description") for o in node.get("anyOf", []) if o.get("description")), ""))]
    limits = _limits(node)
    if limits:
        parts.append(f"({_cell(limits)})")
    return " ".join(p for p in parts if p)


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, operation


def _operation(method: str, path: str, operation: dict[str, Any], scope: str) -> list[str]:
    summary = _text(operation.get("summary")).rstrip(".")
    out = [f"### `{method} {path}`", "", f"**{summary}.** "
           f"Scope: {SCOPES.get(scope, f'`{scope}`')}.", ""]
    if operation.get("description"):
        out += [_text(operation["description"]), ""]
    parameters = operation.get("parameters", [])
    if parameters:
        out += ["| parameter | in | required | type | meaning |", "|---|---|---|---|---|"]
        for p in parameters:
            schema = p.get("schema", {})
            meaning = _described({**schema, "description": p.get("description")
                                  or schema.get("description")})
            out.append(f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} "
                       f"| {_cell(_type(schema))} | {meaning} |")
        out.append("")
    body = operation.get("requestBody")
    if body:
        kinds = ", ".join(f"`{k}`" for k in body.get("content", {}))
        shapes = [_type(c["schema"]) for c in body.get("content", {}).values() if "schema" in c]
        shape = f": {' or '.join(shapes)}" if shapes else ""
        out += [f"Body ({kinds}{', required' if body.get('required') else ''}){shape}.", ""]
    out += ["| status | meaning | answer |", "|---|---|---|"]
    for status, answer in operation.get("responses", {}).items():
        shapes = [_type(c["schema"]) for c in answer.get("content", {}).values()
                  if c.get("schema")]
        shape = " or ".join(dict.fromkeys(shapes)) or "none"
        out.append(f"| {status} | {_cell(answer.get('description'))} | {_cell(shape)} |")
    return [*out, ""]


def _component(name: str, node: dict[str, Any]) -> list[str]:
    out = [f"### {name}", ""]
    if node.get("description"):
        out += [_text(node["description"]), ""]
    if node.get("enum"):
        out += [f"One of {', '.join(f'`{v}`' for v in node['enum'])}.", ""]
    properties = node.get("properties", {})
    if properties:
        required = set(node.get("required", ()))
        out += ["| field | type | required | meaning |", "|---|---|---|---|"]
        for field, child in properties.items():
            out.append(f"| `{field}` | {_cell(_type(child))} | "
                       f"{'yes' if field in required else 'no'} | {_described(child)} |")
        out.append("")
    return out


def render(document: dict[str, Any] | None = None) -> str:
    from tidings.api.auth import default_scope_map

    document = schema() if document is None else document
    scopes = default_scope_map()
    info = document["info"]
    out = [TITLE, "", NOTE, "", INTRO, "", _text(info.get("description")), ""]
    tags: dict[str, list[list[str]]] = {}
    for method, path, operation in _operations(document):
        scope = scopes.scope_for(method, path) or "unmapped"
        tag = (operation.get("tags") or ["other"])[0]
        tags.setdefault(tag, []).append(_operation(method, path, operation, scope))
    for tag, sections in tags.items():
        out += [f"## {tag.capitalize()}", ""]
        for section in sections:
            out += section
    components = document.get("components", {}).get("schemas", {})
    if components:
        out += ["## Schemas", ""]
        for name, node in components.items():
            out += _component(name, node)
    return "\n".join(out).rstrip("\n") + "\n"


def page() -> str:
    return render()


if __name__ == "__main__":
    PAGE.write_text(page())
    sys.stdout.write(f"wrote {PAGE.relative_to(ROOT)}\n")
