"""Rendering the dashboard's pages: the Jinja2 environment over ``api/templates``
with the formatters as filters, the static files of ``api/static`` versioned by their
content, and the security headers every page and redirect carries."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from tidings.api.ui.formatting import (
    fmt_ago,
    fmt_count,
    fmt_duration,
    fmt_iso,
    fmt_percent,
    fmt_rate,
    fmt_time,
    scrub,
)

#: Templates and static files stay where the package data has them: ``tidings/api``.
_PACKAGE = "tidings.api"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin", "Cache-Control": "no-store",
}

_templates = Environment(loader=PackageLoader(_PACKAGE, "templates"),
                         autoescape=select_autoescape(("html",), default=True),
                         undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
_templates.filters.update(count=fmt_count, duration=fmt_duration, rate=fmt_rate,
                          percent=fmt_percent, time=fmt_time, iso=fmt_iso, ago=fmt_ago,
                          scrub=scrub)


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    version: str


def _load_assets() -> dict[str, Asset]:
    types = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
    found = {}
    for entry in (resources.files(_PACKAGE) / "static").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in types:
            body = entry.read_bytes()
            found[entry.name] = Asset(body, f"{types[suffix]}; charset=utf-8",
                                      hashlib.sha256(body).hexdigest()[:12])
    return found


ASSETS = _load_assets()


def static_url(name: str) -> str:
    """The URL of a static file, versioned by its content (so it can be cached long)."""
    return f"/ui/static/{name}?v={ASSETS[name].version}"


_templates.globals["static"] = static_url


def render(template: str, values: Mapping[str, Any], *, status: int = 200) -> HTMLResponse:
    html = _templates.get_template(template).render(**values)
    return HTMLResponse(html, status_code=status, headers=HEADERS)


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers=HEADERS)
