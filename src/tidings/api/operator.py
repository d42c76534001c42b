"""Operator endpoints: status, plan, timelines, dead letters, admission switches,
replay and cancel. The numbers come from ``tidings.operate.operations`` (shared with the CLI)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from tidings.admission.scheduler import MAX_REPLAY_LIFETIME_S
from tidings.api.context import ApiContext, ctx
from tidings.api.errors import ApiError, ErrorBody
from tidings.api.fields import KEY, LINE, TEXT
from tidings.core.errors import InvalidInput
from tidings.operate import operations
from tidings.operate.readmodel import Plan, Status, as_dict

router = APIRouter(prefix="/v1", tags=["operator"])

_NAME = Annotated[str, Path(min_length=1, max_length=200), TEXT]


def _refused(*codes: int) -> dict[int | str, dict[str, Any]]:
    texts = {401: "No valid token.", 403: "The token lacks the scope this route needs.",
             404: "Not found; 'field' says what.", 409: "Not possible in the current state.",
             413: "The body is over the configured limit.",
             422: "A field is invalid; 'field' names it."}
    return {code: {"model": ErrorBody, "description": texts[code]}
            for code in (401, 403, *codes)}


async def status_report(c: ApiContext) -> Status:
    """Status per campaign and channel (the CLI's ``status --json`` is the same)."""
    rt = c.runtime
    snap = await operations.snapshot(rt.store, rt.transport, channels=rt.channels,
                                     now=rt.clock.now(), window_s=c.settings.rate_window_s)
    uncertain = await operations.uncertain_counts(rt.store, rt.uncertain_policies(),
                                                  now=snap.now)
    return operations.status(snap, campaigns={x.name: x.channels for x in rt.campaigns},
                             channels=rt.channels, limits=rt.limits,
                             freshness={x.name: x.expires_after_s for x in rt.campaigns},
                             uncertain=uncertain,
                             retention=rt.retention(), lanes=rt.channel_lanes)


async def plan_report(c: ApiContext) -> Plan:
    """Drain time against freshness deadlines, with the numbers used."""
    rt = c.runtime
    snap = await operations.snapshot(rt.store, rt.transport, channels=rt.channels,
                                     now=rt.clock.now(), window_s=c.settings.rate_window_s,
                                     occurrences=False)
    return operations.plan_report(
        snap, limits=rt.limits, freshness={x.name: x.expires_after_s for x in rt.campaigns},
        uncertain=await operations.uncertain_counts(rt.store, rt.uncertain_policies(),
                                                    now=snap.now))


@router.get("/status", responses=_refused(), summary="Status per campaign and channel")
async def status(request: Request) -> dict[str, Any]:
    """Backlog, oldest age, in flight, send rate, 429s, retries, dead letters,
    duplicates suppressed and the SLI, per channel and per campaign."""
    return as_dict(await status_report(ctx(request)))


@router.get("/plan", responses=_refused(), summary="Drain time vs freshness deadline")
async def plan(request: Request) -> dict[str, Any]:
    """Per channel and campaign: backlog ÷ sustained rate against the earliest expiry."""
    return as_dict(await plan_report(ctx(request)))


@router.get("/timeline", responses=_refused(404, 422),
            summary="A delivery's timeline by key or recipient")
async def timeline(
    request: Request,
    key: Annotated[str, Query(min_length=1, max_length=512), KEY] | None = None,
    recipient: Annotated[str, Query(
        min_length=1, max_length=200,
        description="A recipient id, or its surrogate r_<16 hex> as logged."), TEXT] | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> dict[str, Any]:
    """Was it selected, was it enqueued, did the channel accept it — and every event."""
    c = ctx(request)
    if (key is None) == (recipient is None):
        raise ApiError(422, "query.key", "give exactly one of key or recipient")
    deliveries = await operations.timeline(c.runtime.store, key=key, recipient=recipient,
                                           channels=c.runtime.channels, limit=limit)
    if not deliveries:
        field, value = ("query.key", key) if key is not None else ("query.recipient", recipient)
        raise ApiError(404, field, f"no delivery found for {value!r}")
    return {"deliveries": [as_dict(d) for d in deliveries]}


@router.get("/dead-letters/{channel}", responses=_refused(404, 422),
            summary="A channel's dead letters")
async def dead_letters(request: Request, channel: _NAME,
                       limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
    """Oldest first, each with its intent's state in the ledger."""
    c = ctx(request)
    rows = await operations.dead_letters(c.runtime.store, c.runtime.transport,
                                         c.channel(channel), limit=limit)
    return {"channel": channel, "dead_letters": [as_dict(r) for r in rows]}


class RedriveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[Annotated[str, Field(min_length=1, max_length=40), TEXT]] | None = Field(
        default=None, max_length=1000, description="Dead letters to redrive; all when absent.")
    limit: StrictInt = Field(default=100, ge=1, le=1000,
                             description="Without ids: how many of the oldest to redrive.")


@router.post("/dead-letters/{channel}/redrive", responses=_refused(404, 422),
             summary="Redrive dead letters (the ledger is rechecked before any send)")
async def redrive(request: Request, channel: _NAME,
                  body: RedriveBody | None = None) -> dict[str, Any]:
    """Dead intents are reopened, then their messages go back on the queue."""
    c = ctx(request)
    body = body or RedriveBody()
    try:
        result = await operations.redrive(
            c.runtime.store, c.runtime.transport, c.channel(channel),
            now=c.runtime.clock.now(), ids=body.ids, limit=body.limit)
    except InvalidInput as exc:
        raise ApiError(422, f"body.{exc.field}", exc.message) from None
    return asdict(result)


class SwitchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    campaign: Annotated[str, Field(min_length=1, max_length=200), TEXT] | None = None
    channel: Annotated[str, Field(min_length=1, max_length=200), TEXT] | None = None
    reason: Annotated[str, Field(max_length=500), LINE] | None = None


async def _switch(request: Request, body: SwitchBody, paused: bool) -> dict[str, Any]:
    c = ctx(request)
    if (body.campaign is None) == (body.channel is None):
        raise ApiError(422, "body.campaign", "name exactly one of campaign or channel")
    if body.campaign is not None:
        scope, name = "campaign", c.admission.campaign(body.campaign, "body.campaign").name
    else:
        assert body.channel is not None
        scope, name = "channel", c.channel(body.channel, "body.channel")
    switch, _ = await operations.switch_admission(
        c.runtime.store, scope=scope, name=name, paused=paused, now=c.runtime.clock.now(),
        reason=body.reason)
    return dict(switch.__dict__)


@router.post("/admission/pause", responses=_refused(404, 422),
             summary="Stop new admission for a campaign or a channel")
async def pause(request: Request, body: SwitchBody) -> dict[str, Any]:
    """Work already accepted is untouched; a paused campaign does not backfill."""
    return await _switch(request, body, True)


@router.post("/admission/resume", responses=_refused(404, 422),
             summary="Restart admission for a campaign or a channel")
async def resume(request: Request, body: SwitchBody) -> dict[str, Any]:
    """Occurrences missed while paused need an explicit replay."""
    return await _switch(request, body, False)


@router.post("/replay/{campaign}/{date}", responses=_refused(404, 422),
             summary="Admit a past date of a campaign as its own replay")
async def replay(request: Request, campaign: _NAME,
                 date: Annotated[str, Path(min_length=10, max_length=16,
                                           description="YYYY-MM-DD or YYYY-MM-DDTHH:MM"), TEXT],
                 expires_in_s: Annotated[float | None, Query(
                     gt=0, le=MAX_REPLAY_LIFETIME_S, description="A new freshness deadline, "
                     "seconds from now: needed when the date's own deadline has passed")] = None,
                 new_version: Annotated[bool, Query(
                     description="Replay a date admitted under an earlier "
                     "campaign version (a second delivery to each recipient)")] = False,
                 ) -> dict[str, Any]:
    """One bounded pass now; a large date continues in the background. Refused (422)
    when the date's deadline has passed without ``expires_in_s``, or when it was
    admitted under an earlier version without ``new_version``."""
    return await ctx(request).admission.replay(campaign, date, expires_in_s=expires_in_s,
                                               new_version=new_version)


class CancelBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: Annotated[str, Field(min_length=1, max_length=512, description="An intent key, or "
                              "a notify key (every channel of it)."), KEY]
    reason: Annotated[str, Field(min_length=1, max_length=500), LINE] = "cancelled by operator"


@router.post("/cancel", responses=_refused(404, 422), summary="Cancel a key before its send")
async def cancel(request: Request, body: CancelBody) -> dict[str, Any]:
    """Cancelled at once unless a send is in progress (then the worker sees it first)."""
    c = ctx(request)
    try:
        states = await c.runtime.cancel(body.key, reason=body.reason)
    except InvalidInput as exc:
        status = 404 if exc.message.startswith("no intent has key") else 422
        raise ApiError(status, f"body.{exc.field}", exc.message) from None
    return {"cancelled": {k: (v.value if v else None) for k, v in states.items()}}
