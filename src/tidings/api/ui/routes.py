"""The dashboard's routes under ``/ui``: login and logout, static files, the overview,
admission switches, holds and bulk actions, the timeline search, dead letters and
the suppression list (``suppressions``);
``install`` gives an app the dashboard's state and its browser-facing error pages.

Each route reads through ``tidings.operate.operations`` (as the JSON API and the CLI do),
hands the read model to ``views`` and renders a template (``pages``). Forms that
change something are CSRF-checked (``session``) and answer with a redirect
(post/redirect/get).
"""

from __future__ import annotations

import dataclasses
import hmac
import inspect
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import Response

from tidings.api.auth import SESSION_COOKIE, Principal, authorize
from tidings.api.context import ApiContext, ctx
from tidings.api.errors import ApiError
from tidings.api.tokens import Scope, split_token
from tidings.api.ui import suppressions, views
from tidings.api.ui.formatting import scrub
from tidings.api.ui.history import History
from tidings.api.ui.pages import ASSETS, redirect, render
from tidings.api.ui.session import (
    LOGIN_COOKIE,
    authenticator,
    browser,
    checked_form,
    frame,
    is_ui,
    login_page,
    one,
    read_form,
    safe_next,
    secure,
)
from tidings.core.durations import parse_duration, parse_until
from tidings.core.errors import InvalidInput, unknown_name
from tidings.core.keys import check_text
from tidings.operate import bulk, holds, operations
from tidings.operate.readmodel import Delivery

router = APIRouter(prefix="/ui", include_in_schema=False)

Who = Annotated[Principal, Depends(authorize)]


# ---------------------------------------------------------------- per-app state


@dataclass
class UiState:
    history: History = field(default_factory=History)


def install(app: FastAPI) -> None:
    """Give ``app`` the dashboard's state, and answer browsers refused under ``/ui``
    with a page (or the login form) instead of JSON. API clients, and the dashboard's
    own fragment requests, keep the JSON error shape."""
    app.state.ui = UiState()
    json_answer = app.exception_handlers[ApiError]

    async def on_api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        if is_ui(request.url.path) and browser(request):
            if exc.status == 401:
                back = request.url.path if request.method == "GET" else "/ui"
                if request.url.query and request.method == "GET":
                    back += "?" + request.url.query
                return redirect("/ui/login?" + urlencode({"next": back}))
            return render("error.html", {"who": None, "status": exc.status,
                                         "message": exc.message, "field": exc.field},
                          status=exc.status)
        answer = json_answer(request, exc)
        return await answer if inspect.isawaitable(answer) else answer

    app.add_exception_handler(ApiError, on_api_error)


def _ui(request: Request) -> UiState:
    state: UiState = request.app.state.ui
    return state


def _notice(request: Request, c: ApiContext) -> str | None:
    return views.notice(request.query_params, campaigns={x.name for x in c.runtime.campaigns},
                        channels=set(c.runtime.channels))


# ---------------------------------------------------------------- login and logout


@router.get("/login")
async def login_form(request: Request, next: str = "/ui", bye: int = 0,
                     again: int = 0) -> Response:
    """The login form; a valid session goes straight on (unless ``again``: switching
    to another token)."""
    auth = authenticator(request)
    cookie = request.cookies.get(SESSION_COOKIE)
    if not again and auth.sessions.token_id(cookie, now=auth.clock.now()) is not None:
        try:
            await auth.session(cookie, Scope.VIEWER)
            return redirect(safe_next(next))
        except ApiError:
            pass
    return login_page(request, safe_next(next), notice="You are logged out." if bye else None)


@router.post("/login")
async def login(request: Request) -> Response:
    form = await read_form(request)
    next_url = safe_next(one(form, "next"))
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not nonce or not hmac.compare_digest(nonce, one(form, "nonce")):
        return login_page(request, next_url, status=403, error="This login form had expired. "
                          "It is fresh now: paste the token again.")
    token = one(form, "token")
    if not token:
        return login_page(request, next_url, status=401, error="Paste an API token first.")
    if split_token(token) is None:
        return login_page(request, next_url, status=401, error="That is not a tidings token: "
                          "they look like tid_<12 hex digits>_<43 characters>.")
    auth = authenticator(request)
    try:
        who = await auth.bearer(f"Bearer {token}", Scope.VIEWER)
    except ApiError as exc:
        message = exc.message[0].upper() + exc.message[1:]
        return login_page(request, next_url, status=exc.status, error=f"{message}.")
    assert who.token_id is not None
    response = redirect(next_url)
    response.set_cookie(SESSION_COOKIE, auth.sessions.issue(who.token_id, now=auth.clock.now()),
                        max_age=int(auth.sessions.lifetime_s), path="/ui", httponly=True,
                        samesite="strict", secure=secure(request))
    response.delete_cookie(LOGIN_COOKIE, path="/ui/login", httponly=True, samesite="strict",
                           secure=secure(request))
    return response


@router.post("/logout")
async def logout(request: Request, who: Who) -> Response:
    await checked_form(request, who)
    response = redirect("/ui/login?bye=1")
    response.delete_cookie(SESSION_COOKIE, path="/ui", httponly=True, samesite="strict",
                           secure=secure(request))
    return response


@router.get("/static/{name}")
async def static(name: str) -> Response:
    asset = ASSETS.get(name)
    if asset is None:
        raise ApiError(404, "path.name", f"no static file {name!r}")
    return Response(asset.body, media_type=asset.media_type, headers={
        "Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff",
        "ETag": f'"{asset.version}"'})


# ---------------------------------------------------------------- overview


async def _overview(request: Request) -> dict[str, Any]:
    c = ctx(request)
    rt = c.runtime
    # The same numbers as GET /v1/status, from one snapshot that also holds the
    # switches and occurrences this page lists.
    snap = await operations.snapshot(rt.store, rt.transport, channels=rt.channels,
                                     now=rt.clock.now(), window_s=c.settings.rate_window_s)
    status = operations.status(snap, campaigns={x.name: x.channels for x in rt.campaigns},
                               channels=rt.channels, limits=rt.limits,
                               freshness={x.name: x.expires_after_s for x in rt.campaigns},
                               uncertain=await operations.uncertain_counts(
                                   rt.store, rt.uncertain_policies(), now=snap.now),
                               retention=rt.retention(), lanes=rt.channel_lanes)
    history = _ui(request).history
    history.record(status.now, {name: row.counts for name, row in status.channels.items()})
    return views.overview(status, snap, campaigns=[x.name for x in rt.campaigns],
                          channels=rt.channels, history=history)


@router.get("")
async def overview(request: Request, who: Who) -> Response:
    values = {**frame(request, who, "overview"), **await _overview(request),
              "notice": _notice(request, ctx(request))}
    return render("overview.html", values)


@router.get("/live/overview")
async def overview_live(request: Request, who: Who) -> Response:
    return render("_overview_live.html", {**frame(request, who, "overview"),
                                          **await _overview(request)})


# ---------------------------------------------------------------- admission switches


async def _switch(request: Request, who: Principal, paused: bool) -> Response:
    form = await checked_form(request, who)
    c = ctx(request)
    scope, name = one(form, "scope"), one(form, "name")
    declared = {"campaign": [x.name for x in c.runtime.campaigns],
                "channel": list(c.runtime.channels)}
    if scope not in declared:
        raise ApiError(422, "form.scope", "must be campaign or channel")
    if name not in declared[scope]:
        raise ApiError(404, "form.name", unknown_name(scope, name, declared[scope]))
    reason = one(form, "reason")[:500] or None
    await c.runtime.store.switch_set(scope=scope, name=name, paused=paused,
                                     now=c.runtime.clock.now(), reason=reason)
    done = "paused" if paused else "resumed"
    return redirect("/ui?" + urlencode({"done": done, "scope": scope, "name": name})
                    + "#admission")


@router.post("/admission/pause")
async def pause(request: Request, who: Who) -> Response:
    return await _switch(request, who, True)


@router.post("/admission/resume")
async def resume(request: Request, who: Who) -> Response:
    return await _switch(request, who, False)


# ---------------------------------------------------------------- holds and bulk actions


async def _by(request: Request, who: Principal) -> str:
    from tidings.api.holds import actor

    return await actor(ctx(request), who)


async def _hold_form(request: Request, who: Principal) -> tuple[str, str, dict[str, list[str]]]:
    form = await checked_form(request, who)
    c = ctx(request)
    scope, name = one(form, "scope"), one(form, "name")
    try:
        await holds.check_target(c.runtime.store, scope, name, channels=c.runtime.channels,
                                 campaigns=[x.name for x in c.runtime.campaigns])
    except InvalidInput as exc:
        raise _form_error(exc) from None
    return scope, name, form


def _form_error(exc: InvalidInput) -> ApiError:
    """An unknown name is a 404 on the form's name; any other refusal a 422 on its field."""
    if exc.field in holds.SCOPES:
        return ApiError(404, "form.name", exc.message)
    return ApiError(422, f"form.{exc.field}", exc.message)


@router.post("/holds/hold")
async def hold(request: Request, who: Who) -> Response:
    scope, name, form = await _hold_form(request, who)
    c = ctx(request)
    try:
        reason = check_text(one(form, "reason")[:500], "reason") or None
    except InvalidInput as exc:
        raise _form_error(exc) from None
    await holds.hold(c.runtime.store, scope=scope, name=name, by=await _by(request, who),
                     now=c.runtime.clock.now(), reason=reason)
    return redirect("/ui?" + urlencode({"done": "held", "scope": scope, "name": name})
                    + "#holds")


@router.post("/holds/release")
async def release(request: Request, who: Who) -> Response:
    scope, name, _ = await _hold_form(request, who)
    c = ctx(request)
    done = await holds.release(c.runtime.store, c.runtime.transport, scope=scope, name=name,
                               by=await _by(request, who), now=c.runtime.clock.now())
    return redirect("/ui?" + urlencode({"done": "released", "scope": scope, "name": name,
                                        "republished": done.republished}) + "#holds")


@router.post("/bulk")
async def bulk_action(request: Request, who: Who) -> Response:
    form = await checked_form(request, who)
    c = ctx(request)
    now = c.runtime.clock.now()
    scope, name = one(form, "scope"), one(form, "name")
    older, until = one(form, "older_than"), one(form, "until")
    try:
        await holds.check_target(c.runtime.store, scope, name, channels=c.runtime.channels,
                                 campaigns=[x.name for x in c.runtime.campaigns])
        states = tuple(x.strip() for x in one(form, "states").split(",") if x.strip())
        result = await bulk.run(c.runtime.store, bulk.BulkRequest(
            action=one(form, "action"), by=await _by(request, who),
            campaign=name if scope == "campaign" else None,
            channel=name if scope == "channel" else None,
            occurrence=name if scope == "occurrence" else None, states=states,
            older_than_s=parse_duration(older, "older_than") if older else None,
            until=parse_until(until, now, "until") if until else None,
            reason=check_text(one(form, "reason")[:500], "reason") or None),
            now=now, dry_run=one(form, "dry_run") == "1", transport=c.runtime.transport)
    except InvalidInput as exc:
        raise _form_error(exc) from None
    return redirect("/ui?" + urlencode({
        "bulk": result.action, "selected": sum(result.selected.values()),
        "changed": result.changed, "dry": "1" if result.dry_run else "0"}) + "#holds")


# ---------------------------------------------------------------- timeline search


async def _timeline(request: Request, q: str, by: str) -> dict[str, Any]:
    c = ctx(request)
    now = c.runtime.clock.now()
    q = q.strip()
    values: dict[str, Any] = {"q": q, "by": by, "deliveries": None, "searched_as": None}
    if not q:
        return values
    store, channels = c.runtime.store, c.runtime.channels
    found: list[Delivery] = []
    tries = {"key": ["key"], "recipient": ["recipient"],
             "auto": ["recipient"] if operations.SURROGATE.match(q) else ["key", "recipient"]}
    for kind in tries.get(by, tries["auto"]):
        if (kind == "key" and len(q) > 512) or (kind == "recipient" and len(q) > 200):
            continue
        try:
            found = await operations.timeline(store, channels=channels, limit=50,
                                              **{kind: q})
        except InvalidInput:
            found = []
        if found:
            values["searched_as"] = kind
            break
    values["deliveries"] = [views.delivery_view(d, now) for d in found]
    return values


SEARCH_MAX = 600


async def _search(request: Request, who: Principal) -> dict[str, Any]:
    """The page values for a search posted as a form (CSRF-checked like any form)."""
    form = await checked_form(request, who)
    q, by = one(form, "q"), one(form, "by") or "auto"
    if len(q) > SEARCH_MAX:
        raise ApiError(422, "form.q", f"must be at most {SEARCH_MAX} characters")
    return {**frame(request, who, "timeline"), **await _timeline(request, q, by)}


# A search is a POST: what was typed (an id, a key, an address) stays out of the page
# URL, so out of the browser's history, bookmarks, Referer headers and access logs.
@router.get("/timeline")
async def timeline_form(request: Request, who: Who) -> Response:
    values = {**frame(request, who, "timeline"), **await _timeline(request, "", "auto")}
    return render("timeline.html", values)


@router.post("/timeline")
async def timeline(request: Request, who: Who) -> Response:
    return render("timeline.html", await _search(request, who))


@router.post("/live/timeline")
async def timeline_live(request: Request, who: Who) -> Response:
    return render("_timeline_live.html", await _search(request, who))


# ---------------------------------------------------------------- dead letters


async def _dead_letters(request: Request, channel: str) -> dict[str, Any]:
    c = ctx(request)
    rt = c.runtime
    now = rt.clock.now()
    counts = {ch: (await rt.transport.depth(ch, now=now)).dead for ch in rt.channels}
    rows = await operations.dead_letters(rt.store, rt.transport, c.channel(channel),
                                         limit=200)
    return {"channel": channel, "counts": counts,
            "letters": [dataclasses.replace(row, reason=scrub(row.reason)) for row in rows]}


@router.get("/dead-letters")
async def dead_letters_any(request: Request, who: Who) -> Response:
    rt = ctx(request).runtime
    now = rt.clock.now()
    for channel in rt.channels:
        if (await rt.transport.depth(channel, now=now)).dead:
            return redirect(f"/ui/dead-letters/{quote(channel)}")
    if not rt.channels:
        raise ApiError(404, "path.channel", "no channel is declared")
    return redirect(f"/ui/dead-letters/{quote(rt.channels[0])}")


@router.get("/dead-letters/{channel}")
async def dead_letters(request: Request, who: Who, channel: str) -> Response:
    values = {**frame(request, who, "dead-letters"), **await _dead_letters(request, channel),
              "notice": _notice(request, ctx(request))}
    return render("dead_letters.html", values)


@router.get("/live/dead-letters/{channel}")
async def dead_letters_live(request: Request, who: Who, channel: str) -> Response:
    values = {**frame(request, who, "dead-letters"), **await _dead_letters(request, channel)}
    return render("_dead_letters_live.html", values)


@router.post("/dead-letters/{channel}/redrive")
async def redrive(request: Request, who: Who, channel: str) -> Response:
    form = await checked_form(request, who)
    c = ctx(request)
    ids = [i.strip() for i in form.get("id", []) if i.strip()] or None
    try:
        result = await operations.redrive(
            c.runtime.store, c.runtime.transport, c.channel(channel),
            now=c.runtime.clock.now(), ids=ids, limit=100, reason="operator redrive (dashboard)")
    except InvalidInput as exc:
        if exc.field != "ids":
            raise ApiError(422, f"form.{exc.field}", exc.message) from None
        # Someone redrove it a moment ago (two tabs, two operators): not an error.
        return redirect(f"/ui/dead-letters/{quote(channel)}?gone=1")
    kept = len([k for k in result.kept if k["id"] is not None])
    return redirect(f"/ui/dead-letters/{quote(channel)}?"
                    + urlencode({"redriven": len(result.redriven), "kept": kept}))


# ---------------------------------------------------------------- the suppression list

for path, methods, endpoint in suppressions.ROUTES:
    router.add_api_route(path, endpoint, methods=methods)
