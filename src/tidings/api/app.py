"""The app factory: ``create_app(runtime)`` builds a FastAPI app from the composition
root's runtime. No globals: everything a route needs hangs off ``app.state``."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tidings.api import (
    holds,
    observe,
    operator,
    preferences,
    publish,
    suppression,
    trigger,
    ui,
    uncertain,
)
from tidings.api.access import AccessLog
from tidings.api.admission import AdmissionRunner
from tidings.api.asgi import replay_body
from tidings.api.auth import (
    Authenticator,
    ScopeMap,
    authorize,
    default_scope_map,
    secrets_from,
    sessions_from,
)
from tidings.api.context import ApiContext
from tidings.api.errors import error_response, install
from tidings.api.metrics import ApiMetrics
from tidings.api.ratelimit import Bucket
from tidings.api.unsubscribe import unsubscribe_router
from tidings.api.webhooks import webhook_router
from tidings.core.errors import ConfigurationError, unknown_name
from tidings.core.pacing import parse_quota
from tidings.core.version import __version__
from tidings.runtime import Runtime
from tidings.webhooks.metrics import WebhookMetrics

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class BodyLimit:
    """Refuses a request body over ``max_bytes`` with a 413 naming ``body``, before any
    route (or credential check) runs; the body is buffered once and handed on. Paths
    under an ``exempt`` prefix apply a limit of their own (webhooks)."""

    def __init__(self, app: ASGIApp, max_bytes: int, exempt: tuple[str, ...] = ()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] not in _BODY_METHODS
                or scope["path"].startswith(self.exempt)):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send, f"is {int(declared)} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send, f"is over {self.max_bytes} bytes")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, replay_body(b"".join(chunks), receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, what: str) -> None:
        app = scope.get("app")
        context = getattr(getattr(app, "state", None), "ctx", None)
        if isinstance(context, ApiContext):
            _count_refusal(context, scope.get("path", ""), 413, "payload_too_large")
        response = error_response(413, "body", f"{what}; the limit is {self.max_bytes} bytes "
                                  "(api.max_body_bytes)")
        await response(scope, receive, send)


def _count_refusal(context: ApiContext, path: str, status: int, reason: str) -> None:
    if path == "/v1/queue/publish":
        context.metrics.publish_rejections.labels(reason).inc()
    elif path.startswith("/v1/trigger/"):
        context.metrics.trigger_rejections.labels(reason).inc()


def _check_queues(runtime: Runtime) -> None:
    campaigns = {c.name for c in runtime.campaigns}
    for name, queue in runtime.settings.api.queues.items():
        if queue.campaign is not None and queue.campaign not in campaigns:
            raise ConfigurationError(f"api.queues.{name}.campaign",
                                     unknown_name("campaign", queue.campaign, sorted(campaigns)))
        if queue.channel is not None and queue.channel not in runtime.limits:
            raise ConfigurationError(f"api.queues.{name}.channel",
                                     unknown_name("channel", queue.channel, runtime.channels))


def route_methods(routes: Sequence[BaseRoute]) -> list[tuple[str, set[str]]]:
    """``(path template, methods)`` of every route of an app, through included routers.

    A mounted sub-application is listed with the method ``MOUNT``: the scope map must
    cover it too, though it must check credentials itself (the app-wide dependency
    runs for routes, not for mounts).
    """
    found: list[tuple[str, set[str]]] = []
    for route in routes:
        contexts = getattr(route, "effective_route_contexts", None)
        if callable(contexts):  # an included router, expanded lazily by newer FastAPI
            found += [(c.path, set(c.methods or ())) for c in contexts()]
        elif isinstance(route, Mount):
            found.append((route.path, {"MOUNT"}))
        elif isinstance(route, Route):
            found.append((route.path, set(route.methods or ())))
    return found


def create_app(runtime: Runtime, *, env: Mapping[str, str] | None = None,
               scope_map: ScopeMap | None = None, resume_on_start: bool = True) -> FastAPI:
    """The HTTP API over ``runtime`` (whose lifetime stays the caller's).

    ``env`` is where the trigger and unsubscribe secrets are read (the process
    environment by default);
    ``scope_map`` extends or replaces the route scopes (every route must be mapped).
    With ``resume_on_start`` the app's start-up continues occurrences left admitting.
    """
    settings = runtime.settings.api
    _check_queues(runtime)
    environ = os.environ if env is None else env
    bucket = None
    if settings.publish_rate:
        rate = parse_quota(settings.publish_rate, "api.publish_rate")
        bucket = Bucket(rate_per_s=rate, burst=float(settings.publish_burst or max(1.0, rate)))
    context = ApiContext(
        runtime=runtime, settings=settings,
        admission=AdmissionRunner(runtime=runtime, early_s=settings.trigger_early_s),
        metrics=ApiMetrics(runtime, cache_s=settings.metrics_cache_s,
                           window_s=settings.rate_window_s),
        bucket=bucket, queues=dict(settings.queues))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if resume_on_start:
            await context.admission.resume_unfinished()
        try:
            yield
        finally:
            await context.admission.close()

    app = FastAPI(
        title="tidings", version=__version__, lifespan=lifespan,
        description="Scheduled, multi-channel notifications with exactly one business "
                    "delivery per intent: cron trigger, queue-compatible publish, operator "
                    "endpoints and metrics. Send 'Authorization: Bearer tid_…' (or, for the "
                    "trigger, an HMAC signature).",
        dependencies=[Depends(authorize)])
    app.state.ctx = context
    app.state.scope_map = scope_map or default_scope_map()
    app.state.authenticator = Authenticator(
        store=runtime.store, clock=runtime.clock,
        trigger_secrets=secrets_from(environ.get(settings.trigger_secrets_env)),
        tolerance_s=settings.trigger_tolerance_s, secrets_env=settings.trigger_secrets_env,
        sessions=sessions_from(environ))
    for module in (observe, trigger, publish, operator, uncertain, holds, preferences,
                   suppression, ui):
        app.include_router(module.router)
    app.include_router(webhook_router(runtime, env=environ,
                                      metrics=WebhookMetrics(context.metrics.registry)))
    app.include_router(unsubscribe_router(runtime, env=environ))

    def refused(path: str, status: int, reason: str) -> None:
        _count_refusal(context, path, status, reason)

    install(app, refused)
    ui.install(app)
    publish.install(app)
    # Webhook batches (SendGrid's) outgrow the API's limit: the route applies
    # webhooks.max_body_bytes itself.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, exempt=("/v1/webhooks/",))
    app.add_middleware(AccessLog)  # outermost: sees BodyLimit's refusals too
    missing = app.state.scope_map.unmapped(route_methods(app.routes))
    if missing:
        raise ConfigurationError("api", f"routes without a scope: {', '.join(missing)}")
    return app


def openapi_schema(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document the app serves at ``/openapi.json``."""
    return app.openapi()
