"""The dashboard under ``/ui``, for on-call engineers and support agents.

Pages are rendered on the server (Jinja2, ``templates/``). Each page has live sections
that ``static/app.js`` refreshes in place every few seconds by fetching the same
sections from ``/ui/live/…`` (HTML, no frame): no build step, nothing from a CDN, and
every page still works with scripts off (minus the refresh).

A browser logs in once with an API token (``viewer`` to look, ``operator`` to act);
the session cookie holds the token id and an expiry only (``auth.Sessions``), and the
token is re-checked on every request. Forms that change something carry the
session's CSRF token and answer with a redirect (post/redirect/get). The timeline
search is a form too, posted with the CSRF token and answered in place (its live
refresh posts it again), so what was typed never goes into a URL.

Nothing here computes a number of its own: status, timelines, dead letters and redrive
come from ``tidings.operations``, as for the JSON API and the CLI. A recipient is shown
by its surrogate, never by address.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import itertools
import secrets
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import Annotated, Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from tidings import bulk, holds, operations
from tidings.api.auth import SESSION_COOKIE, Authenticator, Principal, authorize
from tidings.api.context import ApiContext, ctx
from tidings.api.errors import ApiError
from tidings.api.tokens import Scope, grants, split_token
from tidings.durations import parse_duration
from tidings.errors import InvalidInput, unknown_name
from tidings.keys import check_text
from tidings.providers import redaction
from tidings.stores.base import Occurrence, Switch

router = APIRouter(prefix="/ui", include_in_schema=False)

LOGIN_COOKIE = "tidings_login"
FRAGMENT_HEADER = "X-Tidings-Fragment"
REFRESH_MS = 4000
#: Sparkline readings: at most one per ``SAMPLE_EVERY_S``, the last ``HISTORY`` kept.
SAMPLE_EVERY_S = 2.0
HISTORY = 180
_FAILED = frozenset({"rejected", "dead", "cancelled", "expired"})
_AFTER_ACCEPTED = frozenset({"delivered", "bounced", "complained"})
_REDACTED = "‹redacted›"
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin", "Cache-Control": "no-store",
}

Who = Annotated[Principal, Depends(authorize)]


# ---------------------------------------------------------------- formatting


def fmt_count(value: int | float | None) -> str:
    return "—" if value is None else f"{int(value):,}"


def fmt_duration(seconds: float | None) -> str:
    """``42 s``, ``3 min 20 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if seconds is None:
        return "—"
    if 0 < seconds < 0.5:
        return "< 1 s"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    if s < 86400:
        return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")
    return f"{s // 86400} d" + (f" {s % 86400 // 3600} h" if s % 86400 // 3600 else "")


def fmt_rate(per_s: float | None) -> str:
    """Per second, or per minute when under one every ten seconds."""
    if per_s is None:
        return "—"
    if per_s == 0:
        return "0 /s"
    if per_s < 0.1:
        return f"{per_s * 60:.1f} /min"
    return f"{per_s:,.1f} /s"


def fmt_percent(share: float | None) -> str:
    """Rounded down, so 99.96 % never reads as a perfect 100.0 %."""
    if share is None:
        return "—"
    return f"{int(share * 1000) / 10:.1f} %"


def fmt_time(at: float | None) -> str:
    if at is None:
        return "—"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_iso(at: float | None) -> str:
    return "" if at is None else datetime.fromtimestamp(at, UTC).isoformat()


def fmt_ago(at: float | None, now: float) -> str:
    if at is None:
        return "—"
    delta = now - at
    if abs(delta) < 1:
        return "just now"
    return f"{fmt_duration(delta)} ago" if delta > 0 else f"in {fmt_duration(-delta)}"


def scrub(text: str | None) -> str:
    """Reasons never carry addresses by design; a provider's free text might, so
    pages scrub what looks like one (the same shapes as logs and API errors)."""
    return "" if text is None else redaction.scrub(text, address=_REDACTED, number=_REDACTED)


# ---------------------------------------------------------------- templates and assets


_templates = Environment(loader=PackageLoader("tidings.api", "templates"),
                         autoescape=select_autoescape(("html",), default=True),
                         undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
_templates.filters.update(count=fmt_count, duration=fmt_duration, rate=fmt_rate,
                          percent=fmt_percent, time=fmt_time, iso=fmt_iso, ago=fmt_ago,
                          scrub=scrub)


@dataclass(frozen=True)
class _Asset:
    body: bytes
    media_type: str
    version: str


def _load_assets() -> dict[str, _Asset]:
    types = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
    found = {}
    for entry in (resources.files("tidings.api") / "static").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in types:
            body = entry.read_bytes()
            found[entry.name] = _Asset(body, f"{types[suffix]}; charset=utf-8",
                                       hashlib.sha256(body).hexdigest()[:12])
    return found


_ASSETS = _load_assets()


def static_url(name: str) -> str:
    """The URL of a static file, versioned by its content (so it can be cached long)."""
    return f"/ui/static/{name}?v={_ASSETS[name].version}"


_templates.globals["static"] = static_url


# ---------------------------------------------------------------- per-app state


@dataclass(frozen=True)
class Sample:
    at: float
    backlog: int
    accepted: int


class History:
    """Recent readings per channel, kept by this process while someone watches the
    overview: at most one per ``every_s`` and the last ``size`` (bounded memory)."""

    def __init__(self, size: int = HISTORY, every_s: float = SAMPLE_EVERY_S) -> None:
        self.size = size
        self.every_s = every_s
        self._series: dict[str, deque[Sample]] = {}
        self._last: float | None = None

    def record(self, now: float, channels: Mapping[str, Mapping[str, Any]]) -> None:
        if self._last is not None and now - self._last < self.every_s:
            return
        self._last = now
        for name, row in channels.items():
            series = self._series.setdefault(name, deque(maxlen=self.size))
            series.append(Sample(at=now, backlog=int(row["backlog"]),
                                 accepted=int(row["accepted"])))

    def series(self, channel: str) -> list[Sample]:
        return list(self._series.get(channel, ()))


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
        if _is_ui(request.url.path) and _browser(request):
            if exc.status == 401:
                back = request.url.path if request.method == "GET" else "/ui"
                if request.url.query and request.method == "GET":
                    back += "?" + request.url.query
                return _redirect("/ui/login?" + urlencode({"next": back}))
            return _render("error.html", {"who": None, "status": exc.status,
                                          "message": exc.message, "field": exc.field},
                           status=exc.status)
        answer = json_answer(request, exc)
        return await answer if inspect.isawaitable(answer) else answer

    app.add_exception_handler(ApiError, on_api_error)


def _is_ui(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


def _browser(request: Request) -> bool:
    return ("text/html" in request.headers.get("accept", "")
            and FRAGMENT_HEADER.lower() not in request.headers)


def _auth(request: Request) -> Authenticator:
    auth: Authenticator = request.app.state.authenticator
    return auth


def _ui(request: Request) -> UiState:
    state: UiState = request.app.state.ui
    return state


# ---------------------------------------------------------------- responses


def _render(template: str, values: Mapping[str, Any], *, status: int = 200) -> HTMLResponse:
    html = _templates.get_template(template).render(**values)
    return HTMLResponse(html, status_code=status, headers=_HEADERS)


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers=_HEADERS)


def _frame(request: Request, who: Principal, page: str) -> dict[str, Any]:
    """What every framed page needs: who is looking, whether they may act, the CSRF
    token of their session, the clock."""
    c = ctx(request)
    cookie = request.cookies.get(SESSION_COOKIE)
    csrf = _auth(request).sessions.csrf(cookie) if who.kind == "session" and cookie else ""
    return {"who": who, "can_act": grants(who.scopes, Scope.OPERATOR), "csrf": csrf,
            "page": page, "now": c.runtime.clock.now(), "refresh_ms": REFRESH_MS}


async def _form(request: Request) -> dict[str, list[str]]:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise ApiError(415, "header.Content-Type",
                       "must be application/x-www-form-urlencoded (a form post)")
    text = (await request.body()).decode("utf-8", errors="replace")
    return parse_qs(text, keep_blank_values=True, max_num_fields=200)


def _one(form: Mapping[str, list[str]], name: str) -> str:
    values = form.get(name) or [""]
    return values[-1].strip()


def _check_csrf(request: Request, who: Principal, form: Mapping[str, list[str]]) -> None:
    # A bearer caller is a script holding the token, not a browser riding a cookie.
    if who.kind != "session":
        return
    if not _auth(request).sessions.csrf_ok(request.cookies.get(SESSION_COOKIE),
                                           _one(form, "csrf")):
        raise ApiError(403, "form.csrf", "is missing or not this session's; reload the page "
                       "and try again")


# ---------------------------------------------------------------- login and logout


def _safe_next(target: str | None) -> str:
    """Only a dashboard path on this server: never an open redirect."""
    if not target:
        return "/ui"
    parts = urlsplit(target)
    if (parts.scheme or parts.netloc or "\\" in target or not _is_ui(parts.path)
            or parts.path.startswith("/ui/login")):
        return "/ui"
    return target


def _secure(request: Request) -> bool:
    """Whether cookies carry ``Secure``: always, unless ``api.insecure_cookies`` allows
    plain http. Not from the request's scheme: behind a TLS proxy that reads http."""
    return not ctx(request).settings.insecure_cookies


def _login_page(request: Request, next_url: str, *, error: str | None = None,
                notice: str | None = None, status: int = 200) -> HTMLResponse:
    nonce = secrets.token_urlsafe(16)
    response = _render("login.html", {"who": None, "next": next_url, "nonce": nonce,
                                      "error": error, "notice": notice}, status=status)
    # Double-submit: a cross-site page cannot read this cookie nor make the browser
    # send it (SameSite=Strict), so it cannot log a victim in to its own token.
    response.set_cookie(LOGIN_COOKIE, nonce, max_age=3600, path="/ui/login", httponly=True,
                        samesite="strict", secure=_secure(request))
    return response


@router.get("/login")
async def login_page(request: Request, next: str = "/ui", bye: int = 0,
                     again: int = 0) -> Response:
    """The login form; a valid session goes straight on (unless ``again``: switching
    to another token)."""
    auth = _auth(request)
    cookie = request.cookies.get(SESSION_COOKIE)
    if not again and auth.sessions.token_id(cookie, now=auth.clock.now()) is not None:
        try:
            await auth.session(cookie, Scope.VIEWER)
            return _redirect(_safe_next(next))
        except ApiError:
            pass
    return _login_page(request, _safe_next(next), notice="You are logged out." if bye else None)


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    next_url = _safe_next(_one(form, "next"))
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not nonce or not hmac.compare_digest(nonce, _one(form, "nonce")):
        return _login_page(request, next_url, status=403, error="This login form had expired. "
                           "It is fresh now: paste the token again.")
    token = _one(form, "token")
    if not token:
        return _login_page(request, next_url, status=401, error="Paste an API token first.")
    if split_token(token) is None:
        return _login_page(request, next_url, status=401, error="That is not a tidings token: they "
                           "look like tid_<12 hex digits>_<43 characters>.")
    auth = _auth(request)
    try:
        who = await auth.bearer(f"Bearer {token}", Scope.VIEWER)
    except ApiError as exc:
        message = exc.message[0].upper() + exc.message[1:]
        return _login_page(request, next_url, status=exc.status, error=f"{message}.")
    assert who.token_id is not None
    response = _redirect(next_url)
    response.set_cookie(SESSION_COOKIE, auth.sessions.issue(who.token_id, now=auth.clock.now()),
                        max_age=int(auth.sessions.lifetime_s), path="/ui", httponly=True,
                        samesite="strict", secure=_secure(request))
    response.delete_cookie(LOGIN_COOKIE, path="/ui/login", httponly=True, samesite="strict",
                           secure=_secure(request))
    return response


@router.post("/logout")
async def logout(request: Request, who: Who) -> Response:
    _check_csrf(request, who, await _form(request))
    response = _redirect("/ui/login?bye=1")
    response.delete_cookie(SESSION_COOKIE, path="/ui", httponly=True, samesite="strict",
                           secure=_secure(request))
    return response


@router.get("/static/{name}")
async def static(name: str) -> Response:
    asset = _ASSETS.get(name)
    if asset is None:
        raise ApiError(404, "path.name", f"no static file {name!r}")
    return Response(asset.body, media_type=asset.media_type, headers={
        "Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff",
        "ETag": f'"{asset.version}"'})


# ---------------------------------------------------------------- overview


def sparkline(values: Sequence[float], *, width: float = 120.0,
              height: float = 28.0) -> str:
    """SVG ``points`` for ``values`` across ``width``, the largest at the top; a lone
    value is a flat line."""
    if not values:
        return ""
    top = max(values) or 1.0
    if len(values) == 1:
        y = height - values[0] / top * (height - 2) - 1
        return f"0,{y:.1f} {width:.1f},{y:.1f}"
    step = width / (len(values) - 1)
    return " ".join(f"{i * step:.1f},{height - v / top * (height - 2) - 1:.1f}"
                    for i, v in enumerate(values))


def _spark(series: Sequence[Sample]) -> dict[str, Any]:
    backlog = [float(s.backlog) for s in series]
    rates = [max(0, b.accepted - a.accepted) / max(b.at - a.at, 1e-9)
             for a, b in itertools.pairwise(series)]
    rates = rates[:1] + rates  # one per reading, so both lines share the x axis
    line = sparkline(backlog)
    return {
        "samples": len(series),
        "span_s": series[-1].at - series[0].at if series else 0.0,
        "backlog": line, "backlog_area": f"0,28 {line} 120,28" if line else "",
        "backlog_max": max(backlog, default=0.0),
        "rate": sparkline(rates), "rate_max": max(rates, default=0.0),
    }


def _health(row: Mapping[str, Any]) -> tuple[str, str]:
    """A status word for a channel, and its tone (ok, warn, bad, paused, idle)."""
    drain = row.get("drain") or {}
    verdict = drain.get("verdict")
    if row["paused"]:
        return "paused", "Admission paused"
    if verdict == "stalled":
        return "bad", "Stalled"
    if verdict == "at_risk":
        return "warn", f"At risk: {fmt_count(drain.get('expected_late'))} may expire"
    if row["backlog"] == 0:
        return "idle", "Idle" if row["scheduled"] == 0 else "Waiting for due work"
    return "ok", "Draining"


def _channel_view(name: str, row: Mapping[str, Any], history: History) -> dict[str, Any]:
    tone, label = _health(row)
    drain = row.get("drain") or {}
    return {
        "name": name, "tone": tone, "label": label, "paused": row["paused"],
        "backlog": row["backlog"], "scheduled": row["scheduled"],
        "oldest_age_s": row["oldest_age_s"], "in_flight": row["in_flight"],
        "rate": row["send_rate_per_s"], "rate_limited": row["rate_limited"],
        "retries": row["retries"], "dead_letters": row["dead_letters"],
        "accepted": row["accepted"], "sli": row["sli"],
        "drain_s": drain.get("drain_s") if row["backlog"] else None,
        "spark": _spark(history.series(name)),
        # Sends whose answer was lost and that no lookup settled: an operator's to decide.
        "held": (row.get("uncertain_sends") or {}).get("held", 0),
    }


def _bar(row: Mapping[str, Any]) -> dict[str, Any]:
    """A campaign's intents split into accepted, failed, cancelled and still to go,
    with each part's share of the width (0..100)."""
    total = row["total"]
    parts = {"accepted": row["accepted"],
             "failed": row["dead"] + row["rejected"] + row["expired"],
             "cancelled": row["cancelled"]}
    parts["waiting"] = max(0, total - sum(parts.values()))
    x = 0.0
    segments = []
    for name, n in parts.items():
        width = 100.0 * n / total if total else 0.0
        segments.append({"name": name, "count": n, "x": round(x, 3), "width": round(width, 3)})
        x += width
    return {"total": total, "segments": segments, "parts": parts}


def _campaign_view(name: str, row: Mapping[str, Any]) -> dict[str, Any]:
    occ = row["latest_occurrence"]
    return {
        "name": name, "paused": row["paused"], "declared": row["declared"],
        "occurrence": occ, "total": row["total"], "backlog": row["backlog"],
        "scheduled": row["scheduled"], "sli": row["sli"], "bar": _bar(row),
        "channels": sorted(row["channels"]),
    }


def _occurrence_view(occ: Occurrence) -> dict[str, Any]:
    """``members``: audience members read so far; ``admitted``: intents written (one
    per member and channel, less the skipped). The audience's size is not known
    before it has been read, so there is no share to show while admitting."""
    return {"campaign": occ.campaign, "logical_date": occ.logical_date, "kind": occ.kind,
            "status": occ.status, "members": occ.members, "admitted": occ.admitted,
            "skipped": occ.skipped, "reason": occ.reason,
            "created_at": occ.created_at, "finished_at": occ.finished_at}


def _switch_view(scope: str, name: str, switch: Switch | None) -> dict[str, Any]:
    return {"scope": scope, "name": name, "paused": bool(switch and switch.paused),
            "changed_at": None if switch is None else switch.changed_at,
            "reason": None if switch is None else switch.reason}


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
                               retention=rt.retention())
    history = _ui(request).history
    history.record(status["now"], status["channels"])
    switches = {(s.scope, s.name): s for s in snap.switches}
    occurrences = sorted(snap.occurrences, key=lambda o: (o.logical_at, o.created_at),
                         reverse=True)
    admission = ([_switch_view("campaign", x.name, switches.get(("campaign", x.name)))
                  for x in rt.campaigns]
                 + [_switch_view("channel", ch, switches.get(("channel", ch)))
                    for ch in rt.channels])
    return {
        "channels": [_channel_view(n, r, history) for n, r in status["channels"].items()],
        "campaigns": [_campaign_view(n, r) for n, r in status["campaigns"].items()],
        "occurrences": [_occurrence_view(o) for o in occurrences[:8]],
        "admission": admission, "window_s": status["window_s"],
        "guardrails": status["guardrails_tripped"],
        "holds": _holds_view(status["holds"], rt),
        "expired_while_held": status["holds"]["expired_while_held"],
    }


def _holds_view(report: Mapping[str, Any], rt: Any) -> list[dict[str, Any]]:
    """Every declared campaign and channel, held or not, and any occurrence held."""
    held = {(h["scope"], h["name"]): h for h in report["active"]}
    names = ([("campaign", x.name) for x in rt.campaigns]
             + [("channel", ch) for ch in rt.channels]
             + sorted(k for k in held if k[0] == "occurrence"))
    return [{"scope": scope, "name": name, "hold": held.get((scope, name))}
            for scope, name in names]


def _notice(request: Request, c: ApiContext) -> str | None:
    """The one-line result of the action that redirected here, from known names only
    (nothing the query string says is echoed)."""
    q = request.query_params
    done, scope, name = q.get("done"), q.get("scope"), q.get("name")
    names = {"campaign": {x.name for x in c.runtime.campaigns},
             "channel": set(c.runtime.channels)}
    if done in ("paused", "resumed") and scope in names and name in names[scope]:
        return f"Admission {done} for {scope} {name}."
    if done in ("held", "released") and scope in names and name in names[scope]:
        text = f"Delivery {done} for {scope} {name}."
        if done == "released" and q.get("republished", "").isdigit():
            text += f" {int(q['republished'])} republished."
        return text
    action, selected, changed = q.get("bulk"), q.get("selected", ""), q.get("changed", "")
    if action in bulk.ACTIONS and selected.isdigit() and changed.isdigit():
        if q.get("dry") == "1":
            return f"Dry run of {action}: {int(selected)} intents selected; nothing changed."
        return f"{action}: {int(selected)} intents selected, {int(changed)} changed."
    redriven, kept = q.get("redriven", ""), q.get("kept", "")
    if redriven.isdigit():
        text = f"{int(redriven)} dead letter{'s' if int(redriven) != 1 else ''} redriven."
        if kept.isdigit() and int(kept):
            text += f" {int(kept)} kept (see the list)."
        return text
    if q.get("gone"):
        return "That dead letter had already left the list (redriven by someone else)."
    return None


@router.get("")
async def overview(request: Request, who: Who) -> Response:
    values = {**_frame(request, who, "overview"), **await _overview(request),
              "notice": _notice(request, ctx(request))}
    return _render("overview.html", values)


@router.get("/live/overview")
async def overview_live(request: Request, who: Who) -> Response:
    return _render("_overview_live.html", {**_frame(request, who, "overview"),
                                           **await _overview(request)})


# ---------------------------------------------------------------- admission switches


async def _switch(request: Request, who: Principal, paused: bool) -> Response:
    form = await _form(request)
    _check_csrf(request, who, form)
    c = ctx(request)
    scope, name = _one(form, "scope"), _one(form, "name")
    declared = {"campaign": [x.name for x in c.runtime.campaigns],
                "channel": list(c.runtime.channels)}
    if scope not in declared:
        raise ApiError(422, "form.scope", "must be campaign or channel")
    if name not in declared[scope]:
        raise ApiError(404, "form.name", unknown_name(scope, name, declared[scope]))
    reason = _one(form, "reason")[:500] or None
    await c.runtime.store.switch_set(scope=scope, name=name, paused=paused,
                                     now=c.runtime.clock.now(), reason=reason)
    done = "paused" if paused else "resumed"
    return _redirect("/ui?" + urlencode({"done": done, "scope": scope, "name": name})
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
    form = await _form(request)
    _check_csrf(request, who, form)
    c = ctx(request)
    scope, name = _one(form, "scope"), _one(form, "name")
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
        reason = check_text(_one(form, "reason")[:500], "reason") or None
    except InvalidInput as exc:
        raise _form_error(exc) from None
    await holds.hold(c.runtime.store, scope=scope, name=name, by=await _by(request, who),
                     now=c.runtime.clock.now(), reason=reason)
    return _redirect("/ui?" + urlencode({"done": "held", "scope": scope, "name": name})
                     + "#holds")


@router.post("/holds/release")
async def release(request: Request, who: Who) -> Response:
    scope, name, _ = await _hold_form(request, who)
    c = ctx(request)
    done = await holds.release(c.runtime.store, c.runtime.transport, scope=scope, name=name,
                               by=await _by(request, who), now=c.runtime.clock.now())
    return _redirect("/ui?" + urlencode({"done": "released", "scope": scope, "name": name,
                                         "republished": done.republished}) + "#holds")


@router.post("/bulk")
async def bulk_action(request: Request, who: Who) -> Response:
    form = await _form(request)
    _check_csrf(request, who, form)
    c = ctx(request)
    now = c.runtime.clock.now()
    scope, name = _one(form, "scope"), _one(form, "name")
    older, until = _one(form, "older_than"), _one(form, "until")
    try:
        await holds.check_target(c.runtime.store, scope, name, channels=c.runtime.channels,
                                 campaigns=[x.name for x in c.runtime.campaigns])
        states = tuple(x.strip() for x in _one(form, "states").split(",") if x.strip())
        result = await bulk.run(c.runtime.store, bulk.BulkRequest(
            action=_one(form, "action"), by=await _by(request, who),
            campaign=name if scope == "campaign" else None,
            channel=name if scope == "channel" else None,
            occurrence=name if scope == "occurrence" else None, states=states,
            older_than_s=parse_duration(older, "older_than") if older else None,
            until=now + parse_duration(until, "until") if until else None,
            reason=check_text(_one(form, "reason")[:500], "reason") or None),
            now=now, dry_run=_one(form, "dry_run") == "1")
    except InvalidInput as exc:
        raise _form_error(exc) from None
    return _redirect("/ui?" + urlencode({
        "bulk": result.action, "selected": sum(result.selected.values()),
        "changed": result.changed, "dry": "1" if result.dry_run else "0"}) + "#holds")


# ---------------------------------------------------------------- timeline search


def _answers(intent: Mapping[str, Any], now: float) -> list[dict[str, Any]]:
    """Selected? Enqueued? Accepted? Each as yes, no (never will be) or pending."""
    state, reason = intent["state"], scrub(intent.get("reason"))
    failed = state in _FAILED
    why = f"{state}" + (f": {reason}" if reason else "")

    def answer(label: str, at: float | None, *, pending: str, yes: str = "") -> dict[str, Any]:
        if at is not None:
            detail = f"{fmt_time(at)} ({fmt_ago(at, now)})" + (f" · {yes}" if yes else "")
            return {"label": label, "tone": "yes", "headline": "Yes", "detail": detail}
        if failed:
            return {"label": label, "tone": "no", "headline": "No", "detail": why}
        return {"label": label, "tone": "pending", "headline": "Not yet", "detail": pending}

    due = intent["due_at"]
    attempts = intent["attempts"]
    after = f"then {state}" if state in _AFTER_ACCEPTED else ""
    receipt = f"receipt {intent['receipt']}" if intent.get("receipt") else ""
    nxt = intent.get("next_attempt_at")
    waiting = f"{state}, {attempts} attempt{'s' if attempts != 1 else ''} so far"
    if nxt is not None and state == "retryable":
        waiting += f"; next {fmt_ago(nxt, now)}"
    return [
        answer("Selected", intent.get("selected_at"), pending="not admitted yet"),
        answer("Enqueued", intent.get("enqueued_at"),
               pending=f"due {fmt_ago(due, now)}" if due > now else "waiting for a publish"),
        answer("Accepted", intent.get("accepted_at"), pending=waiting,
               yes=", ".join(x for x in (receipt, after) if x)),
    ]


def _delivery_view(found: Mapping[str, Any], now: float) -> dict[str, Any]:
    intent = found["intent"]
    return {
        "key": found["key"], "channel": intent["channel"], "campaign": intent["campaign"],
        "recipient": intent["recipient_surrogate"], "state": intent["state"],
        "reason": scrub(intent.get("reason")), "attempts": intent["attempts"],
        "due_at": intent["due_at"], "expires_at": intent["expires_at"],
        "answers": _answers(intent, now),
        "events": [{**e, "detail": scrub(e.get("detail"))} for e in found["events"]],
    }


async def _timeline(request: Request, q: str, by: str) -> dict[str, Any]:
    c = ctx(request)
    now = c.runtime.clock.now()
    q = q.strip()
    values: dict[str, Any] = {"q": q, "by": by, "deliveries": None, "searched_as": None}
    if not q:
        return values
    store, channels = c.runtime.store, c.runtime.channels
    found: list[dict[str, Any]] = []
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
    values["deliveries"] = [_delivery_view(d, now) for d in found]
    return values


SEARCH_MAX = 600


async def _search(request: Request, who: Principal) -> dict[str, Any]:
    """The page values for a search posted as a form (CSRF-checked like any form)."""
    form = await _form(request)
    _check_csrf(request, who, form)
    q, by = _one(form, "q"), _one(form, "by") or "auto"
    if len(q) > SEARCH_MAX:
        raise ApiError(422, "form.q", f"must be at most {SEARCH_MAX} characters")
    return {**_frame(request, who, "timeline"), **await _timeline(request, q, by)}


# A search is a POST: what was typed (an id, a key, an address) stays out of the page
# URL, so out of the browser's history, bookmarks, Referer headers and access logs.
@router.get("/timeline")
async def timeline_form(request: Request, who: Who) -> Response:
    values = {**_frame(request, who, "timeline"), **await _timeline(request, "", "auto")}
    return _render("timeline.html", values)


@router.post("/timeline")
async def timeline(request: Request, who: Who) -> Response:
    return _render("timeline.html", await _search(request, who))


@router.post("/live/timeline")
async def timeline_live(request: Request, who: Who) -> Response:
    return _render("_timeline_live.html", await _search(request, who))


# ---------------------------------------------------------------- dead letters


async def _dead_letters(request: Request, channel: str) -> dict[str, Any]:
    c = ctx(request)
    rt = c.runtime
    now = rt.clock.now()
    counts = {ch: (await rt.transport.depth(ch, now=now)).dead for ch in rt.channels}
    rows = await operations.dead_letters(rt.store, rt.transport, c.channel(channel),
                                         limit=200)
    for row in rows:
        row["reason"] = scrub(row["reason"])
    return {"channel": channel, "counts": counts, "letters": rows}


@router.get("/dead-letters")
async def dead_letters_any(request: Request, who: Who) -> Response:
    rt = ctx(request).runtime
    now = rt.clock.now()
    for channel in rt.channels:
        if (await rt.transport.depth(channel, now=now)).dead:
            return _redirect(f"/ui/dead-letters/{quote(channel)}")
    if not rt.channels:
        raise ApiError(404, "path.channel", "no channel is declared")
    return _redirect(f"/ui/dead-letters/{quote(rt.channels[0])}")


@router.get("/dead-letters/{channel}")
async def dead_letters(request: Request, who: Who, channel: str) -> Response:
    values = {**_frame(request, who, "dead-letters"), **await _dead_letters(request, channel),
              "notice": _notice(request, ctx(request))}
    return _render("dead_letters.html", values)


@router.get("/live/dead-letters/{channel}")
async def dead_letters_live(request: Request, who: Who, channel: str) -> Response:
    values = {**_frame(request, who, "dead-letters"), **await _dead_letters(request, channel)}
    return _render("_dead_letters_live.html", values)


@router.post("/dead-letters/{channel}/redrive")
async def redrive(request: Request, who: Who, channel: str) -> Response:
    form = await _form(request)
    _check_csrf(request, who, form)
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
        return _redirect(f"/ui/dead-letters/{quote(channel)}?gone=1")
    kept = len([k for k in result.kept if k["id"] is not None])
    return _redirect(f"/ui/dead-letters/{quote(channel)}?"
                     + urlencode({"redriven": len(result.redriven), "kept": kept}))
