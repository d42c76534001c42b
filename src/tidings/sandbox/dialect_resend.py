"""The sandbox speaking Resend: ``POST /emails`` and ``POST /emails/batch``, the batch
counted once against the quota, as Resend's rate limit counts requests
(``SandboxCore.handle_request``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from tidings.sandbox.core import AnswerKind, SandboxAnswer
from tidings.sandbox.dialect_base import (
    KEY_FIELD,
    STATE_KEY,
    DialectState,
    Sent,
    accepted,
    act,
    drop,
    json_response,
)

#: Resend's batch endpoint takes at most this many emails per request.
RESEND_BATCH_MAX = 100


def _resend_error(status: int, name: str, message: str,
                  headers: dict[str, str] | None = None) -> web.Response:
    return json_response(status, {"statusCode": status, "name": name, "message": message}, headers)


def _resend_refusal(a: SandboxAnswer) -> web.Response:
    """A refused request's answer, as Resend words it."""
    if a.status == 429:
        return _resend_error(429, "rate_limit_exceeded", "Too many requests.",
                             {"retry-after": a.retry_after} if a.retry_after else None)
    if a.status in (400, 422):
        return _resend_error(422, "validation_error", a.error or "Invalid request.")
    return _resend_error(a.status or 500, "application_error",
                         a.error or "An unexpected error occurred.")


def _resend_problem(email: Any) -> tuple[str | None, str | None]:
    """``(to, problem)`` of one email as Resend validates it."""
    if not isinstance(email, dict):
        return None, "An email must be an object."
    to = email.get("to")
    first = to[0] if isinstance(to, list) and to else to
    if not isinstance(first, str) or not first:
        return None, "The `to` field is missing."
    if not email.get("subject"):
        return first, "The `subject` field is missing."
    return first, None


def _resend_record(state: DialectState, answer: SandboxAnswer, key: str | None,
                   to: str | None) -> None:
    if accepted(answer) and key and to:
        state.record(Sent(key=key, receipt=str(answer.receipt), channel="email", to=to,
                          at=state.now(), metadata={KEY_FIELD: key}))


def _resend_key(email: Any) -> str | None:
    headers = email.get("headers") if isinstance(email, dict) else None
    raw = headers.get("X-Tidings-Key") if isinstance(headers, dict) else None
    return unquote(raw) if isinstance(raw, str) else None


#: What ``_body`` answers for a request without a bearer key.
_UNAUTHORIZED = object()


async def _body(request: web.Request) -> Any:
    """The request's JSON (None when it is not JSON), or ``_UNAUTHORIZED``."""
    if not request.headers.get("Authorization", "").startswith("Bearer "):
        return _UNAUTHORIZED
    try:
        return json.loads(await request.read())
    except ValueError:
        return None


async def resend_send(request: web.Request) -> web.StreamResponse:
    """``POST /emails``: one email under its ``Idempotency-Key`` (the core's ``dedupe``
    plays Resend's day-long memory of the key)."""
    state = request.app[STATE_KEY]
    body = await _body(request)
    if body is _UNAUTHORIZED:
        return _resend_error(401, "missing_api_key", "Missing API key in the authorization "
                             "header.")
    raw = request.headers.get("Idempotency-Key")
    key = unquote(raw) if raw else None
    to, problem = _resend_problem(body)
    answer = state.core.handle("email", key, to, problem=problem)
    _resend_record(state, answer, key, to)

    def reply(a: SandboxAnswer) -> web.Response:
        if a.receipt is not None:
            return json_response(200, {"id": a.receipt})
        return _resend_refusal(a)

    return await act(request, answer, reply)


async def resend_batch(request: web.Request) -> web.StreamResponse:
    """``POST /emails/batch``: up to 100 emails in one request, which the quota counts
    once (``SandboxCore.handle_request``). Strict validation (the default) refuses the
    whole request for one invalid email and sends none; with ``x-batch-validation:
    permissive`` the valid ones are decided and the others listed in ``errors`` by
    index. A message the core refuses on its own (a rejected or failing address)
    is listed in ``errors`` too; ``data`` holds the accepted ones' ids, in request
    order. A 429, a 5xx or a hang is the whole request's; a lost answer loses the reply
    to all of them (the accepted stay accepted)."""
    state = request.app[STATE_KEY]
    body = await _body(request)
    if body is _UNAUTHORIZED:
        return _resend_error(401, "missing_api_key", "Missing API key in the authorization "
                             "header.")
    if not isinstance(body, list) or not body:
        return _resend_error(422, "validation_error", "The body must be an array of emails.")
    if len(body) > RESEND_BATCH_MAX:
        return _resend_error(422, "validation_error",
                             f"Too many emails: at most {RESEND_BATCH_MAX} per batch.")
    checked = [_resend_problem(email) for email in body]
    permissive = request.headers.get("x-batch-validation") == "permissive"
    if not permissive and any(problem for _, problem in checked):
        index, (_, problem) = next((i, c) for i, c in enumerate(checked) if c[1])
        return _resend_error(422, "validation_error", f"emails[{index}]: {problem}")
    state.batches.append(len(body))
    keys = [_resend_key(email) for email in body]
    answers = state.core.handle_request(
        "email", [(key, to, problem) for key, (to, problem) in zip(keys, checked, strict=True)])
    for answer, key, (to, _) in zip(answers, keys, checked, strict=True):
        _resend_record(state, answer, key, to)
    first = answers[0]
    if first.kind is AnswerKind.TIMEOUT:
        await asyncio.sleep(state.core.config.hang_s)
        return drop(request)
    if first.latency_s > 0:
        await asyncio.sleep(first.latency_s)
    if first.kind in (AnswerKind.REFUSED_QUOTA, AnswerKind.REFUSED_INJECTED) or (
            first.kind is AnswerKind.SERVER_ERROR and all(a is first for a in answers)):
        return _resend_refusal(first)
    if any(a.kind is AnswerKind.LOST_RESPONSE for a in answers):
        return drop(request)
    data = [{"id": a.receipt} for a in answers if a.receipt is not None]
    errors = [{"index": i, "message": a.error or "refused"}
              for i, a in enumerate(answers) if a.receipt is None]
    return json_response(200, {"data": data, "errors": errors})
