"""The sandbox speaking real providers' dialects: Postmark, SendGrid, Resend and Twilio
shapes.

Each dialect serves its provider's send API, its read API and (for Postmark and
Twilio) its outbound webhooks, over the same ``SandboxCore``: the same quota, faults
(429, 5xx, timeouts, lost responses) and counts, keyed by the delivery key the adapter
carries where that provider keeps it. The real adapters are tested against these
routes, and the demo judges them by the core's counts.

=========  ===========================================  ================================
dialect    send (channel)                               read API
=========  ===========================================  ================================
postmark   ``POST /email`` (email), key in              ``GET /messages/outbound``
           ``Metadata.tidings_key`` (or the             ``?count&offset&metadata_…``
           ``X-Tidings-Key`` header); ``POST
           /email/batch``: up to 500, a result each
sendgrid   ``POST /v3/mail/send`` (email), key in       ``GET /v3/messages?query=``
           ``custom_args.tidings_key``                  ``unique_args['tidings_key']="…"``
resend     ``POST /emails`` (email), key in             none (Resend has no search by
           ``Idempotency-Key``; ``POST /emails/batch``: anything tidings sets)
           up to 100, the key in each email's
           ``X-Tidings-Key`` header; the quota counts
           requests, as Resend's does
twilio     ``POST /2010-04-01/Accounts/{sid}/           ``GET`` of the same path,
           Messages.json`` (sms, form), key in          ``?To&From&PageSize``, newest first
           ``I-Twilio-Idempotency-Token``
=========  ===========================================  ================================

Webhooks: after a message is accepted (its reply lost or not), Postmark's dialect posts
a ``Delivery`` record with its Metadata to ``postmark_webhook`` (basic auth from the
URL's credentials); Twilio's posts a ``delivered`` status callback to the send's
``StatusCallback`` URL, signed with ``twilio_auth_token`` as Twilio signs
(``X-Twilio-Signature``); SendGrid's posts a ``delivered`` event, with the custom args,
to ``sendgrid_webhook``, signed with ``sendgrid_signing_key`` (ECDSA P-256 over the
timestamp and the body, as SendGrid's signed event webhook is).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import formatdate
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

from aiohttp import web
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from tidings.sandbox.core import AnswerKind, SandboxAnswer, SandboxCore

# The settings, the state and the key's field are read from here by the server, the
# command line and the tests: the names the module had before it was split.
from tidings.sandbox.dialect_base import KEY_FIELD as KEY_FIELD
from tidings.sandbox.dialect_base import STATE_KEY as STATE_KEY
from tidings.sandbox.dialect_base import DialectSettings as DialectSettings
from tidings.sandbox.dialect_base import DialectState as DialectState
from tidings.sandbox.dialect_base import Sent as Sent
from tidings.sandbox.dialect_base import accepted, act, drop, json_response
from tidings.sandbox.dialect_resend import resend_batch, resend_send
from tidings.webhooks.verify import (
    SENDGRID_SIGNATURE_HEADER,
    SENDGRID_TIMESTAMP_HEADER,
    twilio_signature,
)

DIALECTS = ("postmark", "sendgrid", "resend", "twilio")
#: Postmark's batch endpoint takes at most this many messages per request.
BATCH_MAX = 500
KEY_SHA256_FIELD = "tidings_key_sha256"
_UNIQUE_ARG = re.compile(r"^unique_args\['tidings_key'\]=\"(.*)\"$", re.DOTALL)


# ---------------------------------------------------------------- postmark


async def _postmark_send(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    if not request.headers.get("X-Postmark-Server-Token"):
        return json_response(401, {"ErrorCode": 10, "Message": "No Account or Server API tokens"})
    try:
        body = json.loads(await request.read())
    except ValueError:
        body = None
    answer, to = _postmark_message(state, body)

    def reply(a: SandboxAnswer) -> web.Response:
        status = 200 if a.receipt is not None else 422 if a.status in (400, 422) else (
            a.status or 500)
        return json_response(status, _postmark_result(a, to, state.now()),
                     {"Retry-After": a.retry_after} if status == 429 and a.retry_after
                     else None)

    return await act(request, answer, reply)


async def _postmark_batch(request: web.Request) -> web.StreamResponse:
    """``POST /email/batch``: up to 500 messages, each decided by the core on its own
    (quota, faults, rejections, deduplication: the core counts messages, and stays the
    witness of every key it accepted). Postmark answers 200 with one result per message
    in request order, ErrorCode 0 for an accepted one; what is about the whole request
    is acted out for the whole request: if any message's decision is a hang or a lost
    answer, nobody gets one (the accepted stay accepted); if every message was refused
    for the rate, the request is answered 429. The request's latency is its first
    message's."""
    state = request.app[STATE_KEY]
    if not request.headers.get("X-Postmark-Server-Token"):
        return json_response(401, {"ErrorCode": 10, "Message": "No Account or Server API tokens"})
    try:
        body = json.loads(await request.read())
    except ValueError:
        body = None
    if not isinstance(body, list) or not body:
        return json_response(422, {"ErrorCode": 300, "Message": "Invalid request: a JSON array of "
                           "messages is required"})
    if len(body) > BATCH_MAX:
        return json_response(422, {"ErrorCode": 300, "Message": f"Invalid request: at most "
                           f"{BATCH_MAX} messages per batch"})
    state.batches.append(len(body))
    answers: list[tuple[SandboxAnswer, str | None]] = []
    for item in body:
        answers.append(_postmark_message(state, item))
    first = answers[0][0]
    if any(a.kind is AnswerKind.TIMEOUT for a, _ in answers):
        await asyncio.sleep(state.core.config.hang_s)
        return drop(request)
    if first.latency_s > 0:
        await asyncio.sleep(first.latency_s)
    if any(a.status is None for a, _ in answers):
        return drop(request)  # a lost answer: the accepted ones stay accepted
    if all(a.status == 429 for a, _ in answers):
        return json_response(429, {"ErrorCode": 429, "Message": "Rate limit exceeded"},
                     {"Retry-After": first.retry_after} if first.retry_after else None)
    return json_response(200, [_postmark_result(a, to, state.now()) for a, to in answers])


def _postmark_message(state: DialectState, message: Any) -> tuple[SandboxAnswer, str | None]:
    """One Postmark message (of ``/email`` or of a batch) decided by the core, and
    recorded if accepted; its answer and its recipient."""
    to = key = problem = None
    metadata: dict[str, str] = {}
    if not isinstance(message, dict) or not isinstance(message.get("To"), str):
        problem = "To: required"
    else:
        to = message["To"]
        raw = message.get("Metadata")
        metadata = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
        key = metadata.get(KEY_FIELD) or next(
            (str(h.get("Value")) for h in message.get("Headers") or []
             if isinstance(h, dict) and h.get("Name") == "X-Tidings-Key"), None)
    answer = state.core.handle("email", key, to, problem=problem)
    if accepted(answer) and key and to:
        sent = Sent(key=key, receipt=str(answer.receipt), channel="email", to=to,
                    at=state.now(), metadata=metadata)
        state.record(sent)
        if state.settings.postmark_webhook:
            state.later(partial(_postmark_delivery, state, sent))
    return answer, to


def _postmark_result(a: SandboxAnswer, to: str | None, now: float) -> dict[str, Any]:
    """One message's answer body: a single send's, or its item of a batch answer."""
    if a.receipt is not None:
        return {"To": to, "SubmittedAt": _iso(now), "MessageID": a.receipt, "ErrorCode": 0,
                "Message": "OK"}
    if a.status == 429:
        return {"ErrorCode": 429, "Message": "Rate limit exceeded"}
    if a.status == 422:
        return {"ErrorCode": 406, "Message": "You tried to send to an inactive recipient."}
    if a.status == 400:
        return {"ErrorCode": 300, "Message": f"Invalid request: {a.error}"}
    return {"ErrorCode": 100, "Message": "Maintenance"}


async def _postmark_delivery(state: DialectState, sent: Sent) -> None:
    url = state.settings.postmark_webhook
    assert url is not None
    record = {"RecordType": "Delivery", "ServerID": 1, "MessageStream": "outbound",
              "MessageID": sent.receipt, "Recipient": sent.to, "Tag": "",
              "DeliveredAt": _iso(state.now()), "Details": "sandbox delivery",
              "Metadata": sent.metadata}
    await state.post(url, data=json.dumps(record).encode(),
                     headers={"Content-Type": "application/json"})


async def _postmark_search(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    query = request.query
    if "count" not in query or "offset" not in query:
        return json_response(422, {"ErrorCode": 600, "Message": "count and offset are required"})
    key = query.get(f"metadata_{KEY_FIELD}")
    if key is None and f"metadata_{KEY_SHA256_FIELD}" in query:
        key = state.by_digest.get(query[f"metadata_{KEY_SHA256_FIELD}"])
    # The first acceptance of the key, as the core's lookup answers it.
    first = state.core.lookup(key, "email") if key is not None else None
    found = [s for s in state.sent
             if first is not None and s.channel == "email" and s.receipt == first[1]]
    messages = [{"MessageID": s.receipt, "Recipients": [s.to], "Status": "Sent",
                 "ReceivedAt": _iso(s.at), "Metadata": s.metadata, "MessageStream": "outbound"}
                for s in found[:1]]
    return json_response(200, {"TotalCount": len(messages), "Messages": messages})


# ---------------------------------------------------------------- sendgrid


async def _sendgrid_send(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    if not request.headers.get("Authorization", "").startswith("Bearer "):
        return json_response(401, {"errors": [{"message": "authorization required"}]})
    try:
        body = json.loads(await request.read())
    except ValueError:
        body = None
    key = to = problem = None
    try:
        assert isinstance(body, dict)
        to = str(body["personalizations"][0]["to"][0]["email"])
        args = body.get("custom_args") or {}
        key = str(args[KEY_FIELD]) if KEY_FIELD in args else None
    except (AssertionError, KeyError, IndexError, TypeError):
        problem = "personalizations.0.to.0.email: required"
    answer = state.core.handle("email", key, to, problem=problem)
    if accepted(answer) and key and to:
        sent = Sent(key=key, receipt=str(answer.receipt), channel="email", to=to,
                    at=state.now(), metadata={KEY_FIELD: key})
        state.record(sent)
        if state.settings.sendgrid_webhook and state.settings.sendgrid_signing_key:
            state.later(lambda: _sendgrid_event(state, sent))

    def reply(a: SandboxAnswer) -> web.Response:
        if a.receipt is not None:
            return web.Response(status=202, headers={"X-Message-Id": a.receipt})
        headers = {"Retry-After": a.retry_after} if a.status == 429 and a.retry_after else None
        return json_response(a.status or 500, {"errors": [{"message": a.error or "error",
                                                   "field": None}]}, headers)

    return await act(request, answer, reply)


async def _sendgrid_event(state: DialectState, sent: Sent) -> None:
    url, key = state.settings.sendgrid_webhook, state.settings.sendgrid_signing_key
    assert url is not None and key is not None
    timestamp = str(int(state.now()))
    body = json.dumps([{"email": sent.to, "timestamp": int(state.now()), "event": "delivered",
                        "sg_message_id": f"{sent.receipt}.filter0001.1.1.0",
                        "response": "250 OK", **sent.metadata}]).encode()
    signature = key.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    await state.post(url, data=body, headers={
        "Content-Type": "application/json", SENDGRID_TIMESTAMP_HEADER: timestamp,
        SENDGRID_SIGNATURE_HEADER: base64.b64encode(signature).decode()})


async def _sendgrid_activity(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    match = _UNIQUE_ARG.match(request.query.get("query", ""))
    if match is None:
        return json_response(400, {"errors": [{"message": "invalid query"}]})
    first = state.core.lookup(match.group(1), "email")
    messages = [] if first is None else [{
        "msg_id": f"{first[1]}.filter0001.1.1.0", "status": "delivered",
        "opens_count": 0, "clicks_count": 0}]
    return json_response(200, {"messages": messages})


# ---------------------------------------------------------------- twilio


async def _twilio_send(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    sid = request.match_info["sid"]
    if not request.headers.get("Authorization", "").startswith("Basic "):
        return json_response(401, {"code": 20003, "message": "Authenticate", "status": 401})
    form = dict(parse_qsl((await request.read()).decode("utf-8", "replace"),
                          keep_blank_values=True))
    raw_key = request.headers.get("I-Twilio-Idempotency-Token")
    key = unquote(raw_key) if raw_key else None
    to = form.get("To") or None
    answer = state.core.handle("sms", key, to,
                               problem=None if to else "To: a 'To' phone number is required")
    if accepted(answer) and key and to:
        sent = Sent(key=key, receipt=str(answer.receipt), channel="sms", to=to,
                    at=state.now(), sender=form.get("From"))
        state.record(sent)
        callback = form.get("StatusCallback")
        if callback and state.settings.twilio_auth_token:
            state.later(lambda: _twilio_callback(state, sent, sid, callback))

    def reply(a: SandboxAnswer) -> web.Response:
        if a.receipt is not None:
            return json_response(201, {"sid": a.receipt, "status": "queued", "to": to,
                               "date_created": formatdate(state.now(), usegmt=True),
                               "error_code": None})
        if a.stopped:  # Twilio's answer to a number that replied STOP
            return json_response(400, {"code": 21610, "message": "Attempt to send to unsubscribed "
                               "recipient", "status": 400})
        code = {429: 20429, 422: 21211, 400: 21604}.get(a.status or 0, 20500)
        headers = {"Retry-After": a.retry_after} if a.status == 429 and a.retry_after else None
        return json_response(a.status or 500, {"code": code, "message": a.error or "error",
                                       "status": a.status}, headers)

    return await act(request, answer, reply)


async def _twilio_callback(state: DialectState, sent: Sent, sid: str, url: str) -> None:
    token = state.settings.twilio_auth_token
    assert token is not None
    params = {"AccountSid": sid, "MessageSid": sent.receipt, "SmsSid": sent.receipt,
              "MessageStatus": "delivered", "SmsStatus": "delivered", "To": sent.to,
              "From": sent.sender or "", "ApiVersion": "2010-04-01"}
    await state.post(url, data=urlencode(params).encode(), headers={
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Twilio-Signature": twilio_signature(token, url, params.items())})


async def _twilio_list(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    to, sender = request.query.get("To"), request.query.get("From")
    size = int(request.query.get("PageSize", "50") or 50)
    found = [s for s in reversed(state.sent) if s.channel == "sms" and s.to == to
             and (sender is None or s.sender == sender)][:size]
    return json_response(200, {"messages": [{
        "sid": s.receipt, "to": s.to, "from": s.sender, "status": "delivered",
        "date_created": formatdate(s.at, usegmt=True), "error_code": None} for s in found],
        "page_size": size})


def signing_key_from(pem: str) -> ec.EllipticCurvePrivateKey:
    """An ECDSA P-256 private key from PEM text; ValueError saying what is wrong."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a PEM private key ({type(exc).__name__})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ValueError("not an ECDSA P-256 private key")
    return key


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def install(app: web.Application, core: SandboxCore, settings: DialectSettings,
            now: Callable[[], float]) -> DialectState:
    """Add the routes of ``settings.dialects`` to a sandbox app over ``core``."""
    unknown = sorted(set(settings.dialects) - set(DIALECTS))
    if unknown:
        raise ValueError(f"unknown dialect {unknown[0]!r}; one of: {', '.join(DIALECTS)}")
    state = DialectState(core, settings, now)
    app[STATE_KEY] = state
    if "postmark" in settings.dialects:
        app.router.add_post("/email", _postmark_send)
        app.router.add_post("/email/batch", _postmark_batch)
        app.router.add_get("/messages/outbound", _postmark_search)
    if "sendgrid" in settings.dialects:
        app.router.add_post("/v3/mail/send", _sendgrid_send)
        app.router.add_get("/v3/messages", _sendgrid_activity)
    if "resend" in settings.dialects:
        app.router.add_post("/emails", resend_send)
        app.router.add_post("/emails/batch", resend_batch)
    if "twilio" in settings.dialects:
        path = "/2010-04-01/Accounts/{sid}/Messages.json"
        app.router.add_post(path, _twilio_send)
        app.router.add_get(path, _twilio_list)

    async def stop(app: web.Application) -> None:
        await state.close()

    app.on_cleanup.append(stop)
    return state
