"""``POST /v1/webhooks/{provider}``: delivery reports from providers.

Authenticated by the provider's own signature (or basic auth for Postmark), never by
an API token: the scope map lists the route as public, and the route verifies the
request before it parses or records anything. A bad or missing signature is a 401
naming the header that failed, and nothing is recorded; a malformed payload is a 422
naming the field; a report for a message id no intent has is kept as orphaned and
answered 200 like any other (a provider retries non-2xx answers, and retrying will
not make it known). Repeats are answered 200 and counted as duplicates. Secrets come
from the environment variables ``webhooks.*_env`` name, read once when the router is
built, and are never logged.

``webhook_router(runtime, metrics=WebhookMetrics(registry))`` builds the router (see
``tidings.webhooks.metrics`` for the counters and the store-derived families).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel

from tidings.api.errors import ApiError, ErrorBody
from tidings.core.errors import InvalidInput
from tidings.recovery.provider_reports import receive
from tidings.runtime import Runtime
from tidings.webhooks.metrics import WebhookMetrics
from tidings.webhooks.verify import SignatureError, WebhookRequest, verifiers_from

log = logging.getLogger("tidings.api.webhooks")

WEBHOOK_PATH = "/v1/webhooks/{provider}"
PROVIDERS = ("twilio", "sendgrid", "postmark", "resend", "generic")


class WebhookAnswer(BaseModel):
    """What one webhook did: ``recorded`` joined a delivery's timeline, ``orphaned``
    were kept without a delivery (unknown message id), ``duplicates`` were received
    before, ``ignored`` are reports tidings does not record (opens, clicks, "sent")."""

    provider: str
    recorded: int
    duplicates: int
    orphaned: int
    ignored: int
    settled: int = 0
    """Uncertain or held sends these reports settled (they named the delivery key)."""
    moved: int = 0
    """Recorded reports that moved their delivery's state on (accepted -> delivered ->
    bounced or complained)."""
    suppressed: int = 0
    """Addresses these reports put on the suppression list."""


_REFUSED: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text} for code, text in (
        (401, "Bad or missing signature (or basic auth), a stale timestamp, or the "
              "provider's secrets are not configured; nothing was recorded."),
        (404, "No such provider."),
        (413, "The body is over webhooks.max_body_bytes."),
        (422, "The payload is malformed; 'field' names what."),
        (503, "The store is unavailable; the provider should retry."))}

_BODY_SCHEMA = {"requestBody": {"required": True, "content": {
    "application/x-www-form-urlencoded": {"schema": {"type": "object"}},
    "application/json": {"schema": {}}}}}


async def _body(request: Request, limit: int) -> bytes:
    """The raw body, refused with 413 past ``limit`` bytes before reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "body", f"is {int(declared)} bytes; the limit is {limit} bytes "
                                    "(webhooks.max_body_bytes)")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body", f"is over {limit} bytes (webhooks.max_body_bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


def _called_url(request: Request, public_url: str | None) -> str:
    """The URL the provider called: ``public_url`` in front of the path and query when
    a proxy rewrites the address (Twilio signs the full URL), else the URL received."""
    if public_url is None:
        return str(request.url)
    query = request.url.query
    return public_url.rstrip("/") + request.url.path + (f"?{query}" if query else "")


def webhook_router(runtime: Runtime, *, env: Mapping[str, str] | None = None,
                   metrics: WebhookMetrics | None = None) -> APIRouter:
    """The webhook route over ``runtime``'s store and clock; secrets are read from
    ``env`` (the process environment by default) now, once. Refusals are raised as
    ``ApiError`` (the app's error handlers shape them)."""
    settings = runtime.settings.webhooks
    verifiers = verifiers_from(settings, os.environ if env is None else env, runtime.clock)
    rules = runtime.suppression_rules()
    router = APIRouter(tags=["webhooks"])

    def count(provider: str, outcome: str) -> None:
        if metrics is not None:
            metrics.requests.labels(provider, outcome).inc()

    @router.post(WEBHOOK_PATH, response_model=WebhookAnswer, responses=_REFUSED,
                 openapi_extra=_BODY_SCHEMA,
                 summary="Record a provider's delivery reports (signed by the provider)")
    async def provider_webhook(
        request: Request,
        provider: Annotated[str, Path(description="One of: " + ", ".join(PROVIDERS))],
    ) -> WebhookAnswer:
        """Verify the provider's signature, then record each delivered / bounced /
        complained / failed report once on its delivery's timeline."""
        verifier = verifiers.get(provider)
        if verifier is None:
            count("unknown", "not_found")  # not the path: no label per made-up name
            raise ApiError(404, "path.provider", f"unknown provider; one of: "
                                                 f"{', '.join(PROVIDERS)}")
        try:
            body = await _body(request, settings.max_body_bytes)
        except ApiError:
            count(provider, "too_large")
            raise
        signed = WebhookRequest(url=_called_url(request, settings.public_url),
                                headers=request.headers, body=body)
        try:
            outcome = await receive(signed, verifier=verifier, store=runtime.store,
                                    now=runtime.clock.now(), rules=rules)
        except SignatureError as exc:
            count(provider, "unauthorized")
            log.warning("webhook refused: provider=%s %s: %s", provider, exc.field,
                        exc.message)
            challenge = {"WWW-Authenticate": exc.challenge} if exc.challenge else None
            raise ApiError(401, exc.field, exc.message, headers=challenge) from None
        except InvalidInput as exc:
            count(provider, "invalid")
            raise ApiError(422, exc.field, exc.message) from None
        count(provider, "ok")
        if metrics is not None:
            for result, n in (("recorded", outcome.recorded), ("duplicate", outcome.duplicates),
                              ("orphaned", outcome.orphaned), ("ignored", outcome.ignored)):
                if n:
                    metrics.events.labels(provider, result).inc(n)
        log.info("webhook: provider=%s recorded=%d duplicates=%d orphaned=%d ignored=%d "
                 "settled=%d moved=%d suppressed=%d%s", provider, outcome.recorded,
                 outcome.duplicates, outcome.orphaned, outcome.ignored, outcome.settled,
                 outcome.moved, outcome.suppressed,
                 f" ({', '.join(k[:40] for k in outcome.ignored_kinds[:5])})"
                 if outcome.ignored_kinds else "")
        return WebhookAnswer(provider=provider, recorded=outcome.recorded,
                             duplicates=outcome.duplicates, orphaned=outcome.orphaned,
                             ignored=outcome.ignored, settled=outcome.settled,
                             moved=outcome.moved, suppressed=outcome.suppressed)

    return router
