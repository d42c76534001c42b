"""``POST /v1/queue/publish``: a managed-queue-style endpoint for existing publishers.

A publisher sends ``Authorization: Bearer``, ``Idempotency-Key`` and
``{"queue": …, "payload": {"customer_id", "schedule_day", "template", …}}``; it treats
any 2xx as done, retries a 429 after ``Retry-After`` with the same key, and treats
anything else as a rejection. tidings maps the queue to a campaign (its channels) or a
channel, and the payload to intents keyed by campaign, day, customer, channel and
template version — for a campaign, the very keys its scheduler would write, so a
publish and a scheduled run of the same day never deliver twice. That mapping is the
admission stage's (``tidings.admission.publish_intake``); this module is the HTTP side:
the request's shape, its Idempotency-Key, the refusals' status codes and the answer.

Idempotency: the key is kept with the request's hash and its answer, in the transaction
that writes its intents; the same key with the same request gets the first answer again
(one set of intents), with another request a 409. A refusal (422, 429) is made before
anything is written, so the retry starts afresh.

Group commit: concurrent publishes of one process are written together
(``ApiContext.publishes``, ``group_commit.Coalescer``): one transaction holds every
request's reservation, intents and answer, each request is answered once that has
committed, and a group that fails is written again request by request, so a request
the store refuses fails alone.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send

from tidings.admission import publish_intake
from tidings.admission.digests import add_item, draft_item, queue_digest, shaped_draft
from tidings.admission.intake import admit_drafts
from tidings.admission.publish_intake import Published, PublishItem, VersionConflict
from tidings.admission.scheduler import Switches
from tidings.api import ratelimit
from tidings.api.asgi import replay_body
from tidings.api.auth import authorize
from tidings.api.context import ApiContext, ctx
from tidings.api.errors import ApiError, ErrorBody
from tidings.api.fields import KEY, TEXT
from tidings.config.queues import LONGEST_CUSTOMER_ID, QueueDigestSettings
from tidings.core.cron import EARLIEST_DATE, LATEST_DATE, logical_day
from tidings.core.errors import InvalidInput
from tidings.core.keys import canonical_json
from tidings.core.model import IntentDraft
from tidings.stores.base import IdempotentResponse, PublishWrite

router = APIRouter(tags=["publish"])
PATH = "/v1/queue/publish"
#: What an Idempotency-Key may be: 1 to 255 visible ASCII characters.
IDEMPOTENCY_KEY = r"^[\x21-\x7e]+$"

_KEY_PART = r"^[^\s/]+$"


class PublishPayload(BaseModel):
    """One message. Fields beyond these become template data."""

    model_config = ConfigDict(extra="allow")

    customer_id: Annotated[str, Field(min_length=1, max_length=LONGEST_CUSTOMER_ID,
                                      pattern=_KEY_PART), KEY]
    schedule_day: str = Field(
        description=f"YYYY-MM-DD, from {EARLIEST_DATE} to {LATEST_DATE}",
        pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
    template: Annotated[str, Field(min_length=1, max_length=200), KEY] | None = None
    email: Annotated[str, Field(min_length=3, max_length=320), TEXT] | None = None
    phone: Annotated[str, Field(min_length=3, max_length=32), TEXT] | None = None
    data: dict[str, Any] | None = None

    @field_validator("schedule_day")
    @classmethod
    def _supported_date(cls, value: str) -> str:
        try:
            logical_day(value, "schedule_day")
        except InvalidInput as exc:
            raise PydanticCustomError("date", "{reason}", {"reason": exc.message}) from None
        return value


class PublishRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    queue: Annotated[str, Field(min_length=1, max_length=200), TEXT]
    payload: PublishPayload


class DigestItemAnswer(BaseModel):
    """An item a publish to a digest queue added: its key, its digest's key and window,
    whether it is new (False: the same message before), the window's items so far and
    when it closes."""

    key: str
    digest_key: str
    window_id: str
    created: bool
    items: int
    closes_at: float


class PublishAnswer(BaseModel):
    """What a publish did; a replay of the same request gets this same answer."""

    queue: str
    campaign: str | None
    channel: str | None
    keys: list[str]
    new: int
    skipped: dict[str, str]
    existing: list[str] = []
    """Keys that held an intent already, so nothing was queued for them: the same
    message published again, or (on a channel queue, one message per customer, template
    version and day) another one under the same key."""
    digests: list[DigestItemAnswer] = []
    """On a digest queue (``[api.queues.<name>.digest]``): the items added, one per
    channel, in place of intents (``keys`` is empty; the digest's intents are made when
    its window closes)."""


def answered(answer: PublishAnswer, keys: Sequence[str], created: Sequence[str]) -> str:
    """The stored answer once the intents of ``keys`` are written and ``created`` new."""
    made = set(created)
    return answer.model_copy(update={
        "new": len(made), "existing": [k for k in keys if k not in made]}).model_dump_json()


def request_hash(raw: bytes) -> str:
    """The hash of a request body as JSON, insensitive to key order and spacing."""
    return parsed_hash(json.loads(raw))


def parsed_hash(parsed: Any) -> str:
    """``request_hash`` of a body already read as JSON (``json.loads``)."""
    return hashlib.sha256(canonical_json(parsed).encode()).hexdigest()


def _item(payload: PublishPayload) -> PublishItem:
    """The payload as the intake takes it: its fields, and the others as extras."""
    return PublishItem(customer_id=payload.customer_id, schedule_day=payload.schedule_day,
                       template=payload.template, email=payload.email, phone=payload.phone,
                       data=payload.data, extras=payload.model_extra or {})


async def _resolve(c: ApiContext, body: PublishRequest, now: float
                   ) -> tuple[PublishAnswer, Published]:
    """Map a request to its intents (``publish_intake.resolve``); returns the answer
    skeleton and what the message stands for. A refusal is a 422, or a 409 for
    another version of a campaign's template."""
    problem = c.composer.draft_problem
    spec = _digest_spec(c, body.queue)
    if spec is not None:
        # Checked as the template will see it: this message as its digest's one item.
        def problem(draft: IntentDraft) -> tuple[str, str] | None:
            return c.composer.draft_problem(shaped_draft(draft, spec.key))
    try:
        published = await publish_intake.resolve(
            body.queue, _item(body.payload), queues=c.queues, campaign_of=c.admission.campaign,
            kinds=c.runtime.channel_kinds, problem=problem, now=now, where="body.",
            lanes=c.runtime.channel_lanes)
    except InvalidInput as exc:
        status = 409 if isinstance(exc, VersionConflict) else 422
        raise ApiError(status, exc.field, exc.message) from None
    answer = PublishAnswer(queue=published.queue, campaign=published.campaign,
                           channel=published.channel, keys=published.keys, new=0,
                           skipped=published.skipped)
    return answer, published


def _digest_spec(c: ApiContext, queue: str) -> QueueDigestSettings | None:
    target = c.queues.get(queue)
    return None if target is None else target.digest


async def _add_items(c: ApiContext, answer: PublishAnswer, body: PublishRequest,
                     drafts: Sequence[IntentDraft], spec: QueueDigestSettings,
                     idempotency_key: str, now: float) -> PublishAnswer:
    """A digest queue's message: each draft becomes an item of its digest's window,
    known by the Idempotency-Key and the channel (a retry of the message is the same
    item, even where its answer was lost); the answer names them."""
    store = c.runtime.store
    added = []
    try:
        for draft in drafts:
            digest = queue_digest(spec, queue=body.queue, customer_id=body.payload.customer_id,
                                  channel=draft.channel)
            item = draft_item(draft, digest, item_key=f"{idempotency_key}:{draft.channel}")
            added.append(await add_item(store, item, now=now))
    except InvalidInput as exc:
        # exc.field names the digest's own field (digest.key): said once, under the queue
        field = "body.payload" if exc.field == "data" else f"body.queue.{exc.field}"
        raise ApiError(422, field, exc.message) from None
    filled = [item.window_id for item in added if item.sealed and item.created]
    if filled:  # at its item cap: sent now, not at the next pass; other windows wait for it
        await c.runtime.close_digest_windows(filled)
    return answer.model_copy(update={"keys": [], "digests": [
        DigestItemAnswer(key=item.item_key, digest_key=item.digest_key,
                         window_id=item.window_id, created=item.created, items=item.items,
                         closes_at=item.closes_at) for item in added]})


async def _refusals(c: ApiContext, switches: Switches, channels: Sequence[str],
                    campaign: str | None, now: float) -> None:
    """429 while admission is paused or the intake is over its rate."""
    runtime = c.runtime
    paused = [f"campaign {campaign!r}"] if campaign and switches.campaign_paused(campaign) else []
    paused += [f"channel {ch!r}" for ch in channels if ch in switches.paused_channels()]
    retry = str(math.ceil(c.settings.paused_retry_after_s))
    if paused:
        raise ApiError(429, "body.queue", f"admission is paused for {', '.join(paused)}; "
                       f"retry after {retry} s", headers={"Retry-After": retry},
                       reason="paused")
    if c.bucket is not None:
        wait = await ratelimit.take(runtime.store, c.bucket, now)
        if wait > 0:
            seconds = str(max(1, math.ceil(wait)))
            raise ApiError(429, "request", f"intake is over its rate "
                           f"({c.settings.publish_rate}); retry after {seconds} s",
                           headers={"Retry-After": seconds}, reason="rate")


def _conflict() -> ApiError:
    return ApiError(409, "header.Idempotency-Key", "was already used for a different "
                    "request; use a new key for a new message", reason="idempotency_conflict")


def _stored(record: IdempotentResponse) -> Response:
    return _json(record.body, record.status, {"Idempotent-Replayed": "true"})


_REFUSED: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text} for code, text in (
        (401, "No valid token."), (403, "The token lacks the publish scope."),
        (409, "The Idempotency-Key was used for another request."),
        (413, "The body is over the configured limit."),
        (415, "The body is not application/json."),
        (422, "A field is invalid; 'field' names it."),
        (429, "Admission paused or intake over its rate: retry after Retry-After."))}


async def require_json(request: Request) -> None:
    """415 for a body that is not JSON (before the body is validated as JSON)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        raise ApiError(415, "header.Content-Type", "must be application/json")


@router.post(PATH, status_code=202, response_model=PublishAnswer,
             responses=_REFUSED, summary="Publish one message (managed-queue compatible)",
             dependencies=[Depends(require_json)])
async def publish(
    request: Request,
    body: PublishRequest,
    idempotency_key: Annotated[str, Header(alias="Idempotency-Key", min_length=1,
                                           max_length=255, pattern=IDEMPOTENCY_KEY)],
) -> Response:
    """Map a queue message to intents, once per Idempotency-Key."""
    # What FastAPI serves here is what ``PublishRoute`` does not take: a request with a
    # problem (its 4xx names the field) or sent to an app built without it.
    return await publish_one(ctx(request), body, request_hash(await request.body()),
                             idempotency_key)


async def publish_one(c: ApiContext, body: PublishRequest, digest: str,
                      idempotency_key: str) -> Response:
    """The publish of one authorised, valid request whose body hashes to ``digest``."""
    now = c.runtime.clock.now()
    stored, switches = await c.lookups.submit(idempotency_key)
    if stored is not None and stored.request_hash == digest and stored.status != 0:
        c.metrics.publish_accepted.inc()
        return _stored(stored)
    if stored is not None and stored.request_hash != digest:
        raise _conflict()
    answer, published = await _resolve(c, body, now)
    drafts = published.drafts
    # Refused before anything is written: a 429 leaves nothing to release.
    await _refusals(c, Switches.of(switches), published.channels, published.campaign, now)
    spec = _digest_spec(c, body.queue)
    if spec is not None:
        answer = await _add_items(c, answer, body, drafts, spec, idempotency_key, now)
        drafts = []  # the digest's intents come when its window closes
    horizon = now + c.runtime.settings.scheduler.relay_horizon_s
    write = PublishWrite(
        key=idempotency_key, request_hash=digest,
        later=[d for d in drafts if d.due_at > horizon],
        soon=[d for d in drafts if d.due_at <= horizon],
        answer=lambda created: answered(answer, [d.key for d in drafts], created),
        created_at=now)
    # Coalesced with the publishes in flight beside it: answered once its own
    # reservation, intents and answer are committed; a failure is this request's alone.
    written = await c.publishes.submit(write)
    if written.stored is not None or written.body is None:
        return await _answered_before(c, written.stored, digest, answer, drafts, now)
    c.metrics.publish_accepted.inc()
    return _json(written.body, 202)


def _json(body: str, status: int, headers: Mapping[str, str] | None = None) -> Response:
    """An answer whose JSON text is ``body`` (as stored: sent as it is, not re-encoded)."""
    return Response(body.encode(), status_code=status, headers=headers,
                    media_type="application/json")


async def _answered_before(c: ApiContext, stored: IdempotentResponse | None, digest: str,
                           answer: PublishAnswer, drafts: Sequence[IntentDraft],
                           now: float) -> Response:
    """The key had an answer, or a reservation, when this request's group was written."""
    if stored is None:  # pragma: no cover - a conflicting row is committed before it is read
        raise ApiError(409, "header.Idempotency-Key", "was reserved and expired at the "
                       "same moment; retry with the same key", reason="idempotency_conflict")
    if stored.request_hash != digest:
        raise _conflict()
    if stored.status != 0:
        c.metrics.publish_accepted.inc()
        return _stored(stored)
    # The same request in flight elsewhere (a reservation): its intents are the same
    # keys, so writing them here too is a no-op where it got there first.
    runtime = c.runtime
    sched = runtime.settings.scheduler
    created = await admit_drafts(runtime.store, runtime.transport, drafts, now=now,
                                 horizon_s=sched.relay_horizon_s, lease_s=sched.relay_lease_s,
                                 enqueue_in_store=runtime.enqueue_in_store)
    c.metrics.publish_accepted.inc()
    return _json(answered(answer, [d.key for d in drafts], created), 202)


# ---------------------------------------------------------------- the served route

#: Set in a request's scope once ``PublishRoute`` has handed it to the documented route.
_HANDED_ON = "tidings.publish_handed_on"


class PublishRoute(Route):
    """``POST /v1/queue/publish`` without FastAPI's per-request machinery (dependency
    solving, its request body and response layers: most of the API's CPU per publish).

    Placed before the documented route (``install``), it serves every request whose
    body is valid JSON that ``PublishRequest`` accepts and whose Idempotency-Key is
    well formed, with the same credential check (``auth.authorize``, so the scope map
    decides here too), the same publish (``publish_one``) and the app's own error
    handlers and middleware (body limit, access log). Anything else, a request with a
    problem to name, is handed on unchanged to the documented route, which answers it
    as it always has: the 4xx bodies come from one place.
    """

    def __init__(self) -> None:
        super().__init__(PATH, self._serve, methods=["POST"], include_in_schema=False)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope.get("method") != "POST" or scope.get(_HANDED_ON):
            return Match.NONE, {}
        match, child = super().matches(scope)
        if match is Match.FULL:
            # As FastAPI's routes do: the access log, /metrics and authorize read the
            # matched route's template from the scope.
            child["route"] = self
        return match, child

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._serve(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await _whole_body(receive)
        request = Request(scope, receive, send)
        response = await self._answer(request, raw)
        if response is None:
            await self._hand_on(scope, raw, receive, send)
            return
        await response(scope, receive, send)

    async def _answer(self, request: Request, raw: bytes) -> Response | None:
        """The answer to a request this route serves, else None (hand it on)."""
        headers = request.headers
        media = headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            return None
        try:
            parsed = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested past what it reads:
            return None  # the documented route names the body
        # The same check as every route's (raises the 401/403 for the error handlers).
        await authorize(request)
        key = headers.get("idempotency-key")
        if key is None or not 1 <= len(key) <= 255 or _KEY_CHARS.match(key) is None:
            return None
        try:
            body = PublishRequest.model_validate(parsed)
        except ValidationError:
            return None
        return await publish_one(ctx(request), body, parsed_hash(parsed), key)

    async def _hand_on(self, scope: Scope, raw: bytes, receive: Receive, send: Send) -> None:
        """The request, its body replayed, to the router again: this route now steps
        aside (``matches``) and the documented route takes it."""
        scope[_HANDED_ON] = True
        replay = replay_body(raw, receive)
        router: Callable[[Scope, Receive, Send], Awaitable[None]] = scope["router"].app
        await router(scope, replay, send)


_KEY_CHARS = re.compile(IDEMPOTENCY_KEY)


def install(app: FastAPI) -> None:
    """Serve publishes through ``PublishRoute``, ahead of the documented route."""
    app.router.routes.insert(0, PublishRoute())


async def _whole_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
