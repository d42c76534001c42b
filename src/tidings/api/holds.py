"""Operator endpoints for delivery holds and bulk actions (``tidings.operate.holds``,
``tidings.operate.bulk``). Every change is an audit event naming the caller's token."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

from tidings.api.auth import Principal, authorize
from tidings.api.context import ApiContext, ctx
from tidings.api.errors import ApiError
from tidings.api.fields import KEY, LINE, TEXT
from tidings.api.operator import _refused
from tidings.core.errors import InvalidInput
from tidings.operate import bulk, holds
from tidings.operate.readmodel import as_dict

router = APIRouter(prefix="/v1", tags=["operator"])

Who = Annotated[Principal, Depends(authorize)]
_NAME = Annotated[str, Field(min_length=1, max_length=200), TEXT]


async def actor(c: ApiContext, who: Principal) -> str:
    """Who the audit trail names: the token's name and id (a session's token alike)."""
    if who.token_id is None:
        return who.kind
    token = await c.records.api_token_get(who.token_id)
    name = token.name if token is not None else "?"
    return f"token {name} ({who.token_id})"


class HoldBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    campaign: _NAME | None = None
    channel: _NAME | None = None
    occurrence: Annotated[str, Field(min_length=1, max_length=300), KEY] | None = None
    reason: Annotated[str, Field(max_length=500), LINE] | None = None


def _target(body: HoldBody) -> tuple[str, str]:
    named = [(scope, name) for scope, name in (
        ("campaign", body.campaign), ("channel", body.channel),
        ("occurrence", body.occurrence)) if name is not None]
    if len(named) != 1:
        raise ApiError(422, "body.campaign",
                       "name exactly one of campaign, channel or occurrence")
    return named[0]


async def _checked(c: ApiContext, scope: str, name: str) -> None:
    try:
        await holds.check_target(c.runtime.store, scope, name, channels=c.runtime.channels,
                                 campaigns=[x.name for x in c.runtime.campaigns])
    except InvalidInput as exc:
        raise ApiError(404, f"body.{exc.field}", exc.message) from None


@router.get("/holds", responses=_refused(), summary="Delivery holds in place")
async def list_holds(request: Request) -> dict[str, Any]:
    """Each hold with who placed it and its parked intents; intents expired while held."""
    c = ctx(request)
    return as_dict(await holds.report(c.runtime.store, await c.runtime.store.event_counts()))


@router.post("/holds", responses=_refused(404, 422),
             summary="Hold delivery of a campaign, channel or occurrence")
async def hold(request: Request, body: HoldBody, who: Who) -> dict[str, Any]:
    """Workers park the scope's intents unsent until a release; expiry still applies.
    Holding what is held already changes nothing (``held`` false)."""
    c = ctx(request)
    scope, name = _target(body)
    await _checked(c, scope, name)
    by = await actor(c, who)
    made = await holds.hold(c.runtime.store, scope=scope, name=name, by=by,
                            now=c.runtime.clock.now(), reason=body.reason)
    return {"scope": scope, "name": name, "held": made is not None, "by": by}


@router.post("/holds/release", responses=_refused(404, 422),
             summary="Release a hold: its parked intents are republished")
async def release(request: Request, body: HoldBody, who: Who) -> dict[str, Any]:
    """In bounded batches; intents expired while held become expired, and intents
    another hold still covers stay parked. Releasing again finishes a release cut short."""
    c = ctx(request)
    scope, name = _target(body)
    await _checked(c, scope, name)
    by = await actor(c, who)
    done = await holds.release(c.runtime.store, c.runtime.transport, scope=scope, name=name,
                               by=by, now=c.runtime.clock.now())
    return {"scope": scope, "name": name, "was_held": done.released is not None,
            "republished": done.republished, "expired": done.expired,
            "still_held": done.still_held, "by": by}


class BulkBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    campaign: _NAME | None = None
    channel: _NAME | None = None
    occurrence: Annotated[str, Field(min_length=1, max_length=300), KEY] | None = None
    states: list[Annotated[str, Field(min_length=1, max_length=20), TEXT]] = Field(
        default_factory=list, max_length=10, description="Only intents in these states.")
    older_than_s: StrictFloat | StrictInt | None = Field(
        default=None, ge=0, le=366 * 86400, description="Only intents due longer ago.")
    until: StrictFloat | StrictInt | None = Field(
        default=None, gt=0, lt=253402300800,
        description="delay only: when to deliver instead (Unix seconds).")
    reason: Annotated[str, Field(max_length=500), LINE] | None = None
    dry_run: StrictBool = Field(default=False, description="Count the selection only.")


@router.post("/bulk/{action}", responses=_refused(404, 422),
             summary="Delay, cancel, dead-letter or reopen a selection (dry run first)")
async def bulk_action(request: Request,
                      action: Literal["delay", "cancel", "dead-letter", "reopen"],
                      body: BulkBody, who: Who) -> dict[str, Any]:
    """Counts per state of the selection, then (unless ``dry_run``) how many changed.
    Nothing deletes an intent; bounded batches; one audit event naming the token."""
    c = ctx(request)
    for scope, name in (("campaign", body.campaign), ("channel", body.channel),
                        ("occurrence", body.occurrence)):
        if name is not None:
            await _checked(c, scope, name)
    by = await actor(c, who)
    try:
        result = await bulk.run(c.runtime.store, bulk.BulkRequest(
            action=action, by=by, campaign=body.campaign, occurrence=body.occurrence,
            channel=body.channel, states=tuple(body.states),
            older_than_s=None if body.older_than_s is None else float(body.older_than_s),
            until=None if body.until is None else float(body.until), reason=body.reason),
            now=c.runtime.clock.now(), dry_run=body.dry_run, transport=c.runtime.transport)
    except InvalidInput as exc:
        field = {"state": "states", "older_than": "older_than_s"}.get(exc.field, exc.field)
        raise ApiError(422, f"body.{field}", exc.message) from None
    return asdict(result) | {"by": by}
