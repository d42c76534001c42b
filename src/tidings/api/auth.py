"""Who may call what: bearer tokens with scopes, HMAC-signed cron triggers, and the map
from every route to the scope it needs.

Every route is in ``ScopeMap``; ``create_app`` refuses to build an app with a route the
map does not cover, and a request to such a route is refused (fail closed). A new group
of routes (the dashboard under ``/ui``) joins with one ``prefix`` line.

A signed trigger carries ``X-Tidings-Timestamp`` (Unix seconds) and
``X-Tidings-Signature: sha256=<hex>``, the HMAC-SHA256, under one of the configured
secrets (two during a rotation), of the string to sign (``string_to_sign``)::

    <timestamp> LF <METHOD> LF <path[?query]> LF <body>

the method in capitals, the request target as it reaches tidings (its path exactly as
sent, percent-encoding kept, then ``?`` and the query string if there is one; no
scheme, no host, and without a prefix a reverse proxy strips before forwarding), then
the body's bytes. So a signature authorises one method on one campaign with one body,
within the tolerance: a request signed for campaign A and sent to campaign B fails. A
line feed cannot occur in the first three parts, so no two requests share a string.
The timestamp must be within the tolerance of the server's clock; a signature is
accepted once (a replay is a 409), remembered in the store for as long as its
timestamp stays acceptable.

The dashboard (``/ui``) also accepts a browser session: an HttpOnly cookie holding a
token id and an expiry, signed with the ``TIDINGS_UI_SECRET`` environment variable (or
a secret made per process). The token row is re-read on every request, so revoking the
token ends its sessions at once; the CSRF token of a session derives from its cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

from fastapi import Request

from tidings.api.errors import ApiError
from tidings.api.tokens import Scope, grants, matches, split_token, unusable
from tidings.core.clock import Clock, skew_s
from tidings.delivery.group_commit import Coalescer, GroupCommitConfig
from tidings.stores.base import ApiRecords, ApiToken

PUBLIC: Final = "public"
TIMESTAMP_HEADER = "X-Tidings-Timestamp"
SIGNATURE_HEADER = "X-Tidings-Signature"
_BEARER = {"WWW-Authenticate": 'Bearer realm="tidings"'}
SESSION_COOKIE = "tidings_session"
SESSION_SECRET_ENV = "TIDINGS_UI_SECRET"


@dataclass
class ScopeMap:
    """The scope each route needs: exact ``(METHOD, path template)`` entries first,
    then the longest matching path prefix. ``PUBLIC`` routes need no credentials."""

    exact: dict[tuple[str, str], str] = field(default_factory=dict)
    prefixes: dict[str, str] = field(default_factory=dict)

    def route(self, method: str, path: str, scope: Scope | str) -> ScopeMap:
        self.exact[(method.upper(), path)] = str(scope)
        return self

    def prefix(self, path_prefix: str, scope: Scope | str) -> ScopeMap:
        """Map every route under ``path_prefix`` (e.g. ``/ui``) to ``scope``."""
        self.prefixes[path_prefix.rstrip("/")] = str(scope)
        return self

    def scope_for(self, method: str, path: str) -> str | None:
        found = self.exact.get((method.upper(), path))
        if found is not None:
            return found
        best: tuple[int, str] | None = None
        for prefix, scope in self.prefixes.items():
            if (path == prefix or path.startswith(prefix + "/")) and (
                    best is None or len(prefix) > best[0]):
                best = (len(prefix), scope)
        return None if best is None else best[1]

    def unmapped(self, routes: Iterable[tuple[str, Iterable[str]]]) -> list[str]:
        """``METHOD path`` of every route (path, methods) the map does not cover."""
        return [f"{m} {path}" for path, methods in routes for m in sorted(methods)
                if m != "HEAD" and self.scope_for("GET" if m == "MOUNT" else m, path) is None]


def default_scope_map() -> ScopeMap:
    """The scopes of the routes ``create_app`` serves."""
    return (
        ScopeMap()
        .route("GET", "/healthz", PUBLIC)
        .route("GET", "/openapi.json", PUBLIC)
        .route("GET", "/docs", PUBLIC)
        .route("GET", "/docs/oauth2-redirect", PUBLIC)
        .route("GET", "/redoc", PUBLIC)
        .route("GET", "/metrics", Scope.VIEWER)
        .route("POST", "/v1/trigger/{campaign}", Scope.TRIGGER)
        .route("POST", "/v1/queue/publish", Scope.PUBLISH)
        .route("GET", "/v1/status", Scope.VIEWER)
        .route("GET", "/v1/plan", Scope.VIEWER)
        .route("GET", "/v1/timeline", Scope.VIEWER)
        .route("GET", "/v1/dead-letters/{channel}", Scope.VIEWER)
        .route("POST", "/v1/dead-letters/{channel}/redrive", Scope.OPERATOR)
        .route("POST", "/v1/admission/pause", Scope.OPERATOR)
        .route("POST", "/v1/admission/resume", Scope.OPERATOR)
        .route("POST", "/v1/replay/{campaign}/{date}", Scope.OPERATOR)
        .route("POST", "/v1/cancel", Scope.OPERATOR)
        .route("GET", "/v1/uncertain", Scope.VIEWER)
        .route("POST", "/v1/uncertain/resolve", Scope.OPERATOR)
        .route("GET", "/v1/holds", Scope.VIEWER)
        .route("POST", "/v1/holds", Scope.OPERATOR)
        .route("POST", "/v1/holds/release", Scope.OPERATOR)
        .route("POST", "/v1/bulk/{action}", Scope.OPERATOR)
        # The application that publishes owns its recipients' wishes.
        .route("PUT", "/v1/preferences/{recipient_id}/{channel}", Scope.PUBLISH)
        .route("DELETE", "/v1/preferences/{recipient_id}/{channel}", Scope.PUBLISH)
        .route("GET", "/v1/preferences/{recipient_id}", Scope.VIEWER)
        # The list holds addresses: an operator's to read and change.
        .route("GET", "/v1/suppressions", Scope.OPERATOR)
        .route("POST", "/v1/suppressions", Scope.OPERATOR)
        .route("POST", "/v1/suppressions/remove", Scope.OPERATOR)
        .route("POST", "/v1/suppressions/import", Scope.OPERATOR)
        .route("GET", "/v1/suppressions/export", Scope.OPERATOR)
        .route("GET", "/v1/suppressions/history", Scope.OPERATOR)
        # No token: the route verifies the provider's own signature (tidings.webhooks).
        .route("POST", "/v1/webhooks/{provider}", PUBLIC)
        # No token: the signed link is the credential (tidings.core.unsubscribe).
        .route("GET", "/v1/unsubscribe/{token}", PUBLIC)
        .route("POST", "/v1/unsubscribe/{token}", PUBLIC)
        .prefix("/ui", Scope.VIEWER)
        .route("GET", "/ui/login", PUBLIC)
        .route("POST", "/ui/login", PUBLIC)
        .route("GET", "/ui/static/{name}", PUBLIC)
        .route("POST", "/ui/dead-letters/{channel}/redrive", Scope.OPERATOR)
        .route("POST", "/ui/admission/pause", Scope.OPERATOR)
        .route("POST", "/ui/admission/resume", Scope.OPERATOR)
        .route("POST", "/ui/holds/hold", Scope.OPERATOR)
        .route("POST", "/ui/holds/release", Scope.OPERATOR)
        .route("POST", "/ui/bulk", Scope.OPERATOR)
        # As /v1/suppressions: the list holds addresses.
        .route("GET", "/ui/suppressions", Scope.OPERATOR)
        .route("POST", "/ui/suppressions", Scope.OPERATOR)
        .route("POST", "/ui/suppressions/add", Scope.OPERATOR)
        .route("POST", "/ui/suppressions/remove", Scope.OPERATOR)
        .route("GET", "/ui/suppressions/export", Scope.OPERATOR)
    )


@dataclass(frozen=True, kw_only=True)
class Principal:
    """Who is calling: a token (``token_id``) or a signature; PUBLIC routes: nobody."""

    kind: str
    token_id: str | None = None
    scopes: tuple[str, ...] = ()


def secrets_from(value: str | None) -> tuple[bytes, ...]:
    """Comma-separated secrets (whitespace trimmed, empties dropped)."""
    if not value:
        return ()
    return tuple(s.strip().encode() for s in value.split(",") if s.strip())


def string_to_sign(*, timestamp: int | str, method: str, target: str, body: bytes) -> bytes:
    """What a trigger's HMAC covers: ``timestamp LF METHOD LF target LF body``, where
    ``target`` is the path (and ``?query``, if any) as it reaches tidings."""
    return f"{timestamp}\n{method.upper()}\n{target}\n".encode() + body


def sign(secret: bytes | str, *, timestamp: int | str, method: str, target: str,
         body: bytes) -> str:
    """The ``X-Tidings-Signature`` value a cron sends: ``sha256=<hex>``, e.g.
    ``sign(secret, timestamp=ts, method="POST", target="/v1/trigger/weekly-digest",
    body=b"")``."""
    key = secret.encode() if isinstance(secret, str) else secret
    message = string_to_sign(timestamp=timestamp, method=method, target=target, body=body)
    return "sha256=" + hmac.new(key, message, hashlib.sha256).hexdigest()


def request_target(scope: Mapping[str, Any]) -> str:
    """The path as the client sent it (percent-encoding kept) and ``?query`` if any:
    the target a trigger's signature covers. ASGI servers give the raw path alone in
    ``raw_path``; some test transports put the query in it too, hence the split."""
    raw = scope.get("raw_path") or str(scope.get("path", "")).encode()
    path = bytes(raw).split(b"?", 1)[0].decode("latin-1")
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    return f"{path}?{query}" if query else path


@dataclass(frozen=True)
class Sessions:
    """Signs and reads dashboard session cookies: ``<token id>.<expiry>.<hmac>``."""

    secret: bytes
    lifetime_s: float = 12 * 3600.0

    def _mac(self, text: str) -> str:
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()

    def issue(self, token_id: str, *, now: float) -> str:
        body = f"{token_id}.{int(now + self.lifetime_s)}"
        return f"{body}.{self._mac('session|' + body)}"

    def token_id(self, cookie: str | None, *, now: float) -> str | None:
        """The token id of a well-signed, unexpired cookie, else None."""
        token_id, _, rest = (cookie or "").partition(".")
        expiry, _, mac = rest.partition(".")
        if not (token_id and expiry.isdigit() and mac):
            return None
        if not hmac.compare_digest(self._mac(f"session|{token_id}.{expiry}"), mac):
            return None
        return token_id if now < int(expiry) else None

    def csrf(self, cookie: str) -> str:
        """The CSRF token the forms of this session carry."""
        return self._mac("csrf|" + cookie)

    def csrf_ok(self, cookie: str | None, presented: str | None) -> bool:
        return bool(cookie and presented) and hmac.compare_digest(
            self.csrf(cookie or ""), presented or "")


def sessions_from(env: Mapping[str, str]) -> Sessions:
    """Sessions signed with ``TIDINGS_UI_SECRET``; without it, a secret of this process
    (its sessions end when it restarts and do not work on other API processes)."""
    value = env.get(SESSION_SECRET_ENV, "").strip()
    return Sessions(value.encode() if value else secrets.token_bytes(32))


@dataclass(kw_only=True)
class Authenticator:
    """Checks credentials against the store (tokens are read per request, so a
    revocation counts at once on every API process, and an expiry at its moment by
    ``clock``)."""

    store: ApiRecords
    clock: Clock
    trigger_secrets: Sequence[bytes]
    tolerance_s: float
    secrets_env: str = "TIDINGS_TRIGGER_SECRETS"
    sessions: Sessions = field(default_factory=lambda: sessions_from({}))

    @cached_property
    def _token_reads(self) -> Coalescer[str, ApiToken | None]:
        """Concurrent requests' token rows, one read per distinct token for all of them
        (a read that started after each request arrived: a revocation counts at once)."""
        store = self.store

        async def read(ids: Sequence[str], _now: float) -> list[ApiToken | None]:
            rows = {token_id: await store.api_token_get(token_id) for token_id in set(ids)}
            return [rows[token_id] for token_id in ids]

        return Coalescer(read, clock=self.clock, config=GroupCommitConfig(max_drafts=10_000))

    async def bearer(self, header: str | None, wanted: Scope) -> Principal:
        """A valid, unrevoked token holding ``wanted``: else 401 (who?) or 403 (not this)."""
        if not header:
            raise ApiError(401, "header.Authorization", "is missing; send "
                           "'Authorization: Bearer tid_…'", headers=_BEARER)
        scheme, _, credentials = header.partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            raise ApiError(401, "header.Authorization", "must be 'Bearer <token>'",
                           headers=_BEARER)
        parts = split_token(credentials.strip())
        if parts is None:
            raise ApiError(401, "header.Authorization", "is not a tidings token",
                           headers=_BEARER)
        token_id, secret = parts
        row = await self._token_reads.submit(token_id)
        if row is None or not matches(row, secret):
            raise ApiError(401, "header.Authorization", "token is not valid", headers=_BEARER)
        refusal = unusable(row, self.clock.now())
        if refusal is not None:
            raise ApiError(401, "header.Authorization", refusal, headers=_BEARER)
        if not grants(row.scopes, wanted):
            raise ApiError(403, "header.Authorization",
                           f"token tid_{token_id} lacks the {wanted.value!r} scope "
                           f"(it has: {', '.join(row.scopes)})")
        return Principal(kind="token", token_id=token_id, scopes=row.scopes)

    async def session(self, cookie: str | None, wanted: Scope) -> Principal:
        """A dashboard session whose token is still valid and holds ``wanted``."""
        token_id = self.sessions.token_id(cookie, now=self.clock.now())
        if token_id is None:
            raise ApiError(401, "header.Authorization", "is missing; send 'Authorization: "
                           "Bearer tid_…', or log in at /ui/login", headers=_BEARER)
        row = await self.store.api_token_get(token_id)
        refusal = (f"token tid_{token_id} is not known here" if row is None
                   else unusable(row, self.clock.now()))
        if row is None or refusal is not None:
            raise ApiError(401, "cookie.session", f"{refusal}; log in again with another "
                           "token", headers=_BEARER)
        if not grants(row.scopes, wanted):
            raise ApiError(403, "cookie.session",
                           f"token tid_{token_id} lacks the {wanted.value!r} scope "
                           f"(it has: {', '.join(row.scopes)})")
        return Principal(kind="session", token_id=token_id, scopes=row.scopes)

    async def signature(self, headers: Mapping[str, str], body: bytes, *, method: str,
                        target: str) -> Principal:
        """A fresh, valid, first-seen HMAC signature of this method, target and body:
        else 401, or 409 for a replay."""
        if not self.trigger_secrets:
            raise ApiError(401, f"header.{SIGNATURE_HEADER}",
                           f"signed triggers are not configured (set {self.secrets_env})")
        raw_ts = headers.get(TIMESTAMP_HEADER)
        if raw_ts is None:
            raise ApiError(401, f"header.{TIMESTAMP_HEADER}", "is missing")
        try:
            timestamp = int(raw_ts.strip())
        except ValueError:
            raise ApiError(401, f"header.{TIMESTAMP_HEADER}",
                           "must be Unix seconds (an integer)") from None
        now = self.clock.now()
        skew = skew_s(timestamp, now)
        if skew > self.tolerance_s:
            raise ApiError(401, f"header.{TIMESTAMP_HEADER}",
                           f"is {skew:.0f} s from the server's clock; the tolerance is "
                           f"{self.tolerance_s:.0f} s")
        presented = (headers.get(SIGNATURE_HEADER) or "").strip()
        hex_digest = presented.removeprefix("sha256=").strip().lower()
        valid = False
        for secret in self.trigger_secrets:
            expected = sign(secret, timestamp=timestamp, method=method, target=target,
                            body=body).removeprefix("sha256=")
            # No early exit: the time taken does not say which secret matched.
            valid |= hmac.compare_digest(expected.encode(), hex_digest.encode())
        if not valid:
            # The target as received: a proxy that rewrites the path shows up here.
            raise ApiError(401, f"header.{SIGNATURE_HEADER}",
                           f"does not match the timestamp, method ({method.upper()}), path "
                           f"({target[:300]!r}) and body under any trigger secret; sign "
                           "'<timestamp>\\n<METHOD>\\n<path>\\n<body>'")
        first = await self.store.api_signature_claim(
            hex_digest, now=now, expires_at=timestamp + self.tolerance_s + 1)
        if not first:
            raise ApiError(409, f"header.{SIGNATURE_HEADER}",
                           "this signed request was already received (a replay); sign "
                           "a new one")
        return Principal(kind="signature")


async def authorize(request: Request) -> Principal:
    """The app-wide dependency: look up the matched route's scope and check it."""
    state = request.app.state
    scope_map: ScopeMap = state.scope_map
    route = request.scope.get("route")
    # The matched route's template; request.url (built afresh) only when none matched.
    template = getattr(route, "path", None)
    path = template if isinstance(template, str) else request.url.path
    wanted = scope_map.scope_for(request.method, path)
    if wanted is None:
        raise ApiError(403, "path", f"{request.method} {path} is not mapped to a scope")
    if wanted == PUBLIC:
        return Principal(kind="public")
    auth: Authenticator = state.authenticator
    scope = Scope(wanted)
    if scope is Scope.TRIGGER and SIGNATURE_HEADER.lower() in request.headers:
        return await auth.signature(request.headers, await request.body(),
                                    method=request.method, target=request_target(request.scope))
    if (path == "/ui" or path.startswith("/ui/")) and "authorization" not in request.headers:
        return await auth.session(request.cookies.get(SESSION_COOKIE), scope)
    return await auth.bearer(request.headers.get("authorization"), scope)
