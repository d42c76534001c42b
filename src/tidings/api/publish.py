"""``POST /v1/queue/publish``: a managed-queue-style endpoint for existing publishers.

A publisher sends ``Authorization: Bearer``, ``Idempotency-Key`` and
``{"queue": …, "payload": {"customer_id", "schedule_day", "template", …}}``; it treats
any 2xx as done, retries a 429 after ``Retry-After`` with the same key, and treats
anything else as a rejection. tidings maps the queue to a campaign (its channels) or a
channel, and the payload to intents keyed by campaign, day, customer, channel and
template version — for a campaign, the very keys its scheduler would write, so a
publish and a scheduled run of the same day never deliver twice.

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
from datetime import date, datetime, time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send

from tidings.api import ratelimit
from tidings.api.asgi import replay_body
from tidings.api.auth import authorize
from tidings.api.context import ApiContext, ctx
from tidings.api.errors import ApiError, ErrorBody
from tidings.api.fields import KEY, TEXT
from tidings.audience import Audience
from tidings.campaign import Campaign
from tidings.compose import Composer
from tidings.cron import EARLIEST_DATE, LATEST_DATE, logical_day
from tidings.errors import InvalidInput
from tidings.keys import campaign_key, check_json_text, queue_key, template_ref, validate_key
from tidings.model import IntentDraft, Recipient, address_kind, encode_data
from tidings.runtime import Runtime
from tidings.scheduler import Switches, occurrence_id
from tidings.stores.base import IdempotentResponse, Ledger, PublishWrite

router = APIRouter(tags=["publish"])
PATH = "/v1/queue/publish"
#: What an Idempotency-Key may be: 1 to 255 visible ASCII characters.
IDEMPOTENCY_KEY = r"^[\x21-\x7e]+$"

_KEY_PART = r"^[^\s/]+$"
_VERSIONED = re.compile(r"^(?P<base>.+?)[-/@_.]v(?P<version>[1-9][0-9]{0,5})$")
_KNOWN = frozenset({"customer_id", "schedule_day", "template", "email", "phone", "data"})
#: Members looked at per attempt when finding a customer in a campaign's audience.
_LOOKUP_PAGE = 50


class PublishPayload(BaseModel):
    """One message. Fields beyond these become template data."""

    model_config = ConfigDict(extra="allow")

    customer_id: Annotated[str, Field(min_length=1, max_length=200, pattern=_KEY_PART), KEY]
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


def answered(answer: PublishAnswer, keys: Sequence[str], created: Sequence[str]) -> str:
    """The stored answer once the intents of ``keys`` are written and ``created`` new."""
    made = set(created)
    return answer.model_copy(update={
        "new": len(made), "existing": [k for k in keys if k not in made]}).model_dump_json()


# ---------------------------------------------------------------- mapping (no I/O)


def template_version(template: str) -> tuple[str, int] | None:
    """``weekly-digest-v3`` (or ``…/v3``, ``…@v3``, ``…_v3``, ``….v3``) -> ("weekly-digest", 3)."""
    match = _VERSIONED.match(template)
    return None if match is None else (match["base"], int(match["version"]))


def extra_data(payload: PublishPayload, member: Recipient | None) -> str:
    """Template data: the audience member's, then payload extras, then ``payload.data``."""
    data: dict[str, Any] = dict(member.data) if member is not None else {}
    extras = {k: v for k, v in (payload.model_extra or {}).items() if k not in _KNOWN}
    data.update(extras)
    data.update(payload.data or {})
    try:
        check_json_text(extras, "body.payload")
        check_json_text(payload.data, "body.payload.data")
        return encode_data(data, "body.payload.data")
    except InvalidInput as exc:
        raise ApiError(422, exc.field, exc.message) from None


def campaign_drafts(campaign: Campaign, payload: PublishPayload, recipient: Recipient,
                    *, queue: str, now: float, kinds: Mapping[str, str]
                    ) -> tuple[list[IntentDraft], dict[str, str]]:
    """The intents a publish to a campaign queue stands for, and the channels skipped
    (``kinds``: each channel's address kind, ``Runtime.channel_kinds``)."""
    version = campaign.version
    if payload.template is not None:
        parsed = template_version(payload.template)
        if parsed is None or parsed[0] != campaign.template:
            raise ApiError(422, "body.payload.template",
                           f"must be {campaign.template!r} with a version, like "
                           f"'{campaign.template}-v{campaign.version}', for queue {queue!r} "
                           f"(campaign {campaign.name!r})")
        if parsed[1] != campaign.version:
            # Another version is another key: a second send to a customer and day
            # already sent. Moving a campaign to a new version is a change of its
            # settings (and an explicit replay), never a side effect of a publish.
            raise ApiError(409, "body.payload.template", (
                f"campaign {campaign.name!r} is declared at v{campaign.version}; this "
                f"publish names v{parsed[1]} ({payload.template!r}). Publish "
                f"'{campaign.template}-v{campaign.version}' (or no template), or move the "
                f"campaign to v{parsed[1]} in its settings first"))
    day = payload.schedule_day
    try:
        due_at = campaign.schedule.occurrence_for(day).logical_at
        occurrence: str | None = occurrence_id(campaign.name, day)
    except InvalidInput:
        # The campaign's cron does not fire that day: the day itself is the due time.
        due_at = datetime.combine(date.fromisoformat(day), time(0),
                                  tzinfo=campaign.schedule.zone).timestamp()
        occurrence = None
    expires_at = None if campaign.expires_after_s is None else due_at + campaign.expires_after_s
    if expires_at is not None and expires_at <= now:
        raise ApiError(422, "body.payload.schedule_day",
                       f"{day} is past the freshness deadline of campaign {campaign.name!r} "
                       f"({campaign.expires_after_s:g} s after it is due)")
    if not recipient.active:
        return [], {ch: "recipient is not active" for ch in campaign.channels}
    data = extra_data(payload, recipient)
    drafts, skipped = [], {}
    for channel in campaign.channels:
        kind = address_kind(channel, kinds.get(channel))
        address = recipient.address(kind)
        if not address:
            skipped[channel] = f"customer has no {'phone' if kind == 'sms' else 'email'}"
            continue
        drafts.append(IntentDraft(
            key=campaign_key(campaign.name, day, payload.customer_id, channel, version),
            channel=channel, recipient_id=payload.customer_id, address=address,
            template=template_ref(campaign.template, version), data=data, due_at=due_at,
            expires_at=expires_at, campaign=campaign.name, occurrence=occurrence))
    return drafts, skipped


def channel_drafts(channel: str, payload: PublishPayload, *, queue: str,
                   kind: str) -> list[IntentDraft]:
    """The one intent a publish to a channel queue stands for (the payload names the
    address and the template; ``kind`` is the channel's address kind)."""
    field = "phone" if kind == "sms" else "email"
    address = payload.phone if kind == "sms" else payload.email
    if not address:
        raise ApiError(422, f"body.payload.{field}",
                       f"is required for queue {queue!r} (channel {channel!r})")
    if payload.template is None:
        raise ApiError(422, "body.payload.template",
                       f"is required for queue {queue!r} (channel {channel!r})")
    parsed = template_version(payload.template)
    if parsed is None and "/" in payload.template:
        raise ApiError(422, "body.payload.template",
                       "must end in a version (like 'receipt-v2') or contain no '/'")
    segment = payload.template if parsed is None else f"v{parsed[1]}"
    template = payload.template if parsed is None else template_ref(*parsed)
    day = payload.schedule_day
    due_at = datetime.fromisoformat(f"{day}T00:00:00+00:00").timestamp()
    return [IntentDraft(
        key=queue_key(queue, day, payload.customer_id, channel, segment), channel=channel,
        recipient_id=payload.customer_id, address=address, template=template,
        data=extra_data(payload, None), due_at=due_at)]


def sendable(composer: Composer, drafts: Sequence[IntentDraft], skipped: dict[str, str], *,
             from_payload: bool, template_field: str) -> list[IntentDraft]:
    """The drafts a worker could send, checked as it will check them (address, template):
    a template that does not exist, or an address the payload gave that no send can
    use, is a 422 now rather than a rejected intent later. An address from the audience
    that no send can use skips its channel (the answer says why)."""
    kept = []
    for draft in drafts:
        try:
            validate_key(draft.key)  # what a worker's message decode checks again
        except InvalidInput as exc:
            raise ApiError(422, "body.payload", f"makes a delivery key that {exc.message}; "
                           "shorten customer_id or template") from None
        found = composer.draft_problem(draft)
        if found is None:
            kept.append(draft)
            continue
        what, problem = found
        if what == "template":
            raise ApiError(422, template_field, f"{problem} (channel {draft.channel!r})")
        if from_payload:
            raise ApiError(422, f"body.payload.{'phone' if draft.channel == 'sms' else 'email'}",
                           f"{problem} (channel {draft.channel!r})")
        else:
            skipped[draft.channel] = f"customer's address in the audience: {problem}"
    return kept


def request_hash(raw: bytes) -> str:
    """The hash of a request body as JSON, insensitive to key order and spacing."""
    return parsed_hash(json.loads(raw))


def parsed_hash(parsed: Any) -> str:
    """``request_hash`` of a body already read as JSON (``json.loads``)."""
    canonical = json.dumps(parsed, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


# ---------------------------------------------------------------- I/O helpers


def _predecessors(rid: str) -> list[str]:
    """Values just below ``rid`` to page an audience from: numerically (an INTEGER id
    column) and as a string (a text one)."""
    found = []
    # ASCII digits only: "²".isdigit() holds, and int("²") raises.
    if rid.isascii() and rid.isdigit() and int(rid) > 0:
        found.append(str(int(rid) - 1))
    below = ord(rid[-1]) - 1
    if 0xD800 <= below <= 0xDFFF:
        below = 0xD7FF  # the character before the surrogates, which no text can hold
    found.append(rid[:-1] + chr(below) + "\U0010ffff" if below > 0 else rid[:-1])
    return found


async def find_member(audience: Audience, rid: str) -> Recipient | None:
    """The audience member with id ``rid``, read through ``page`` (no lookup by id in
    the Audience port): a page that starts just below it, tried numerically and as a
    string. Bounded: at most two pages."""
    for after in _predecessors(rid):
        for member in await audience.page(after or None, _LOOKUP_PAGE):
            if member.id == rid:
                return member
    return None


async def admit(runtime: Runtime, drafts: Sequence[IntentDraft], now: float) -> list[str]:
    """Write intents (an existing key is a no-op), as ``notify`` does: with the store's
    own queue the ones due soon are enqueued in the same transaction; with a broker they
    wait ``selected`` for the relay. Returns the keys created now."""
    if not drafts:
        return []
    s = runtime.settings.scheduler
    store: Ledger = runtime.store
    soon = [d for d in drafts if d.due_at <= now + s.relay_horizon_s]
    later = [d for d in drafts if d.due_at > now + s.relay_horizon_s]
    created = await store.intent_admit(later, now=now) if later else []
    if soon and runtime.enqueue_in_store:
        created += await store.intent_admit(soon, now=now, enqueue=True)
    elif soon:
        # The outbox: the relay publishes them; the request never waits for the broker.
        created += await store.intent_admit(soon, now=now)
    return created


async def _resolve(c: ApiContext, body: PublishRequest, now: float
                   ) -> tuple[PublishAnswer, list[IntentDraft], list[str], str | None]:
    """Map a request to its intents; returns the answer skeleton, the drafts, the
    channels they use and the campaign (for the switches)."""
    target = c.queues.get(body.queue)
    if target is None:
        known = ", ".join(sorted(c.queues)) or "none (see [api.queues] in the settings)"
        raise ApiError(422, "body.queue", f"unknown queue {body.queue!r}; configured: {known}")
    payload = body.payload
    if target.campaign is not None:
        campaign = c.admission.campaign(target.campaign)
        if payload.email or payload.phone:
            recipient = Recipient(id=payload.customer_id, email=payload.email,
                                  phone=payload.phone)
        else:
            member = await find_member(campaign.audience, payload.customer_id)
            if member is None:
                raise ApiError(422, "body.payload.customer_id",
                               f"{payload.customer_id!r} is not in the audience of "
                               f"campaign {campaign.name!r}; send email or phone in the "
                               "payload")
            recipient = member
        drafts, skipped = campaign_drafts(campaign, payload, recipient, queue=body.queue,
                                          now=now, kinds=c.runtime.channel_kinds)
        drafts = sendable(c.composer, drafts, skipped,
                          from_payload=bool(payload.email or payload.phone),
                          template_field="body.payload.template" if payload.template
                          else "body.queue")
        answer = PublishAnswer(queue=body.queue, campaign=campaign.name, channel=None,
                               keys=[d.key for d in drafts], new=0, skipped=skipped)
        return answer, drafts, list(campaign.channels), campaign.name
    assert target.channel is not None
    kind = address_kind(target.channel, c.runtime.channel_kinds.get(target.channel))
    drafts = sendable(c.composer, channel_drafts(target.channel, payload, queue=body.queue,
                                                 kind=kind),
                      {}, from_payload=True, template_field="body.payload.template")
    answer = PublishAnswer(queue=body.queue, campaign=None, channel=target.channel,
                           keys=[d.key for d in drafts], new=0, skipped={})
    return answer, drafts, [target.channel], None


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
    answer, drafts, channels, campaign = await _resolve(c, body, now)
    # Refused before anything is written: a 429 leaves nothing to release.
    await _refusals(c, Switches.of(switches), channels, campaign, now)
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
    created = await admit(c.runtime, drafts, now)
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
