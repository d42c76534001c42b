"""Who is looking, and forms they may post: the login form's double-submit nonce,
the session's CSRF token on every form that changes something, where a login may go
next (never off the dashboard), and which cookies are ``Secure``.

A browser logs in once with an API token; the session cookie holds the token id and
an expiry only (``tidings.api.auth.Sessions``), and the token is re-checked on every
request. A bearer caller is a script holding the token, not a browser riding a
cookie, so it needs no CSRF token.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fastapi import Request
from fastapi.responses import HTMLResponse

from tidings.api.auth import SESSION_COOKIE, Authenticator, Principal
from tidings.api.context import ctx
from tidings.api.errors import ApiError
from tidings.api.tokens import Scope, grants
from tidings.api.ui.pages import render

LOGIN_COOKIE = "tidings_login"
FRAGMENT_HEADER = "X-Tidings-Fragment"
#: How often ``static/app.js`` refreshes a page's live sections.
REFRESH_MS = 4000


def is_ui(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


def browser(request: Request) -> bool:
    """A browser asking for a page (not the dashboard's own fragment requests)."""
    return ("text/html" in request.headers.get("accept", "")
            and FRAGMENT_HEADER.lower() not in request.headers)


def authenticator(request: Request) -> Authenticator:
    auth: Authenticator = request.app.state.authenticator
    return auth


def frame(request: Request, who: Principal, page: str) -> dict[str, Any]:
    """What every framed page needs: who is looking, whether they may act, the CSRF
    token of their session, the clock."""
    c = ctx(request)
    cookie = request.cookies.get(SESSION_COOKIE)
    csrf = (authenticator(request).sessions.csrf(cookie)
            if who.kind == "session" and cookie else "")
    return {"who": who, "can_act": grants(who.scopes, Scope.OPERATOR), "csrf": csrf,
            "page": page, "now": c.runtime.clock.now(), "refresh_ms": REFRESH_MS}


#: Fields a dashboard form may post (the largest, bulk selection, has about a dozen).
MAX_FORM_FIELDS = 200


async def read_form(request: Request) -> dict[str, list[str]]:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise ApiError(415, "header.Content-Type",
                       "must be application/x-www-form-urlencoded (a form post)")
    text = (await request.body()).decode("utf-8", errors="replace")
    try:
        return parse_qs(text, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except ValueError:  # more fields than max_num_fields: no form of ours has that many
        raise ApiError(422, "body", f"has more than {MAX_FORM_FIELDS} fields") from None


def one(form: Mapping[str, list[str]], name: str) -> str:
    """A form field's last value, stripped ("" when absent)."""
    values = form.get(name) or [""]
    return values[-1].strip()


def check_csrf(request: Request, who: Principal, form: Mapping[str, list[str]]) -> None:
    # A bearer caller is a script holding the token, not a browser riding a cookie.
    if who.kind != "session":
        return
    if not authenticator(request).sessions.csrf_ok(request.cookies.get(SESSION_COOKIE),
                                                   one(form, "csrf")):
        raise ApiError(403, "form.csrf", "is missing or not this session's; reload the page "
                       "and try again")


async def checked_form(request: Request, who: Principal) -> dict[str, list[str]]:
    """A posted form whose CSRF token is this session's."""
    form = await read_form(request)
    check_csrf(request, who, form)
    return form


def safe_next(target: str | None) -> str:
    """Only a dashboard path on this server: never an open redirect."""
    if not target:
        return "/ui"
    parts = urlsplit(target)
    if (parts.scheme or parts.netloc or "\\" in target or not is_ui(parts.path)
            or parts.path.startswith("/ui/login")):
        return "/ui"
    return target


def secure(request: Request) -> bool:
    """Whether cookies carry ``Secure``: always, unless ``api.insecure_cookies`` allows
    plain http. Not from the request's scheme: behind a TLS proxy that reads http."""
    return not ctx(request).settings.insecure_cookies


def login_page(request: Request, next_url: str, *, error: str | None = None,
               notice: str | None = None, status: int = 200) -> HTMLResponse:
    nonce = secrets.token_urlsafe(16)
    response = render("login.html", {"who": None, "next": next_url, "nonce": nonce,
                                     "error": error, "notice": notice}, status=status)
    # Double-submit: a cross-site page cannot read this cookie nor make the browser
    # send it (SameSite=Strict), so it cannot log a victim in to its own token.
    response.set_cookie(LOGIN_COOKIE, nonce, max_age=3600, path="/ui/login", httponly=True,
                        samesite="strict", secure=secure(request))
    return response
