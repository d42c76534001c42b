"""One-click unsubscribe over HTTP (RFC 8058): the link in an email's ``List-Unsubscribe``.

``POST /v1/unsubscribe/{token}`` with the body ``List-Unsubscribe=One-Click`` (form
encoded or multipart, as mail clients send it) records what the token names
(``tidings.operate.unsubscribe``: the recipient opted out of the channel, the address
suppressed with reason ``unsubscribe``) and answers 200; the same POST again answers
the same and changes nothing. ``GET`` shows a small page whose button sends that POST:
a GET never unsubscribes, since mail scanners fetch links before anyone reads the mail.

No bearer token: the signed link is the credential (``tidings.core.unsubscribe``). A
token that does not verify, or names a channel the deployment no longer has, is a 404
that does not say which part failed; a body that is not the one-click form is a 400
(a page for a client that accepts HTML, the API's JSON refusal naming ``path.token``
or ``body`` for any other). With ``[unsubscribe]`` off, every token is a 404. The
pages carry no address, fetch nothing, and ask not to be cached, indexed or named in
a Referer.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final
from urllib.parse import parse_qsl

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse

from tidings.api.errors import ApiError, ErrorBody
from tidings.delivery.unsubscribe import UnsubscribeLinks, links_from
from tidings.operate.unsubscribe import one_click
from tidings.runtime import Runtime

PATH: Final = "/v1/unsubscribe/{token}"
# No length limit here: a token too long (``tidings.core.unsubscribe.MAX_TOKEN_CHARS``)
# is refused by ``verify`` as every other bad token is, with the same 404.
_TOKEN = Annotated[str, Path(description="The signed token of the email's link")]
_HEADERS: Final = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                   "X-Robots-Tag": "noindex", "Content-Security-Policy":
                   "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'"}
_ANSWERS: Final[dict[int | str, dict[str, Any]]] = {
    404: {"model": ErrorBody, "description": "The link is not valid (nor says why): "
          "a page for a browser, else JSON naming path.token."},
    400: {"model": ErrorBody, "description": "The body is not "
          "List-Unsubscribe=One-Click: a page for a browser, else JSON naming body."}}
_MULTIPART = re.compile(
    rb'name="?List-Unsubscribe"?[^\r\n]*\r\n(?:[^\r\n]+\r\n)*\r\nOne-Click\r\n')

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;
padding:0 1rem;line-height:1.5}}button{{font-size:1rem;padding:.5rem 1rem}}</style>
</head><body><h1>{title}</h1>{body}</body></html>
"""
_CONFIRM = _PAGE.format(title="Unsubscribe", body=(
    "<p>Stop receiving these messages at this address?</p>"
    '<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click">'
    '<button type="submit">Unsubscribe</button></form>'))
_DONE = _PAGE.format(title="Unsubscribed", body=(
    "<p>You are unsubscribed: no more of these messages will be sent to this "
    "address.</p>"))
_INVALID = _PAGE.format(title="Link not valid", body=(
    "<p>This unsubscribe link is not valid. Use the link from the most recent "
    "message, or contact the sender.</p>"))
_BAD_BODY = _PAGE.format(title="Unsubscribe", body=(
    "<p>This request is not a one-click unsubscribe (its body must be "
    "<code>List-Unsubscribe=One-Click</code>).</p>"))


def _page(html: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(html, status_code=status, headers=_HEADERS)


def _refuse(request: Request, status: int) -> HTMLResponse:
    """A refusal: the page for a browser (one that accepts HTML), the API's JSON
    refusal naming the field (``path.token`` or ``body``) for anything else."""
    if "text/html" in request.headers.get("accept", ""):
        return _page(_INVALID if status == 404 else _BAD_BODY, status)
    if status == 404:
        raise ApiError(404, "path.token", "is not a valid unsubscribe link",
                       headers=_HEADERS)
    raise ApiError(400, "body", "must be List-Unsubscribe=One-Click", headers=_HEADERS)


def is_one_click(content_type: str, body: bytes) -> bool:
    """Whether ``body`` is RFC 8058's ``List-Unsubscribe=One-Click``, form encoded or
    multipart."""
    if content_type.lower().startswith("multipart/form-data"):
        return _MULTIPART.search(body) is not None
    fields = parse_qsl(body.decode("utf-8", "replace").strip(), keep_blank_values=True)
    return ("List-Unsubscribe", "One-Click") in fields


def unsubscribe_router(runtime: Runtime, *, env: Mapping[str, str] | None = None
                       ) -> APIRouter:
    """The unsubscribe routes over ``runtime``'s store; the secret is read from ``env``
    (the process environment by default) now, once."""
    links: UnsubscribeLinks | None = links_from(runtime.settings.unsubscribe,
                                                os.environ if env is None else env)
    router = APIRouter(tags=["unsubscribe"])
    kinds = runtime.channel_kinds

    @router.get(PATH, response_class=HTMLResponse, responses={404: _ANSWERS[404]},
                summary="The confirmation page of a one-click unsubscribe link")
    async def confirm_page(request: Request, token: _TOKEN) -> HTMLResponse:
        """A page with a button that POSTs the one-click form; changes nothing."""
        if links is None or (subject := links.verify(token)) is None or (
                subject.channel not in kinds):
            return _refuse(request, 404)
        return _page(_CONFIRM)

    @router.post(PATH, response_class=HTMLResponse, responses=_ANSWERS,
                 summary="Unsubscribe (RFC 8058 one-click): opt out and suppress")
    async def one_click_post(request: Request, token: _TOKEN) -> HTMLResponse:
        """Records the opt-out of the token's channel and the suppression of its
        address (reason ``unsubscribe``); a replay changes nothing. 404 for a token
        that is not valid, 400 for a body that is not ``List-Unsubscribe=One-Click``."""
        if links is None or links.verify(token) is None:
            return _refuse(request, 404)
        if not is_one_click(request.headers.get("content-type", ""), await request.body()):
            return _refuse(request, 400)
        done = await one_click(runtime.store, links, token, channels=kinds,
                               kind_of=kinds.__getitem__, now=runtime.clock.now())
        return _page(_DONE) if done is not None else _refuse(request, 404)

    return router
