"""Operator endpoints for uncertain sends: list them, settle them by a decision.

``GET /v1/uncertain`` (viewer) lists uncertain and held intents with their channel's
policy; ``POST /v1/uncertain/resolve`` (operator) settles named keys, or a selection
by channel and age, as accepted, resend or failed. Each decision is an audit event on
the intent's timeline naming the token that made it. The work is
``tidings.operate.operations.uncertain_list`` / ``uncertain_resolve``, shared with the CLI.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from tidings.api.auth import Principal, authorize
from tidings.api.context import ApiContext, ctx
from tidings.api.errors import ApiError, ErrorBody
from tidings.api.fields import KEY, LINE, TEXT
from tidings.core.errors import InvalidInput
from tidings.delivery.uncertain import parse_age
from tidings.operate import operations
from tidings.operate.readmodel import to_json

router = APIRouter(prefix="/v1", tags=["operator"])

_REFUSED: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text} for code, text in (
        (401, "No valid token."), (403, "The token lacks the scope this route needs."),
        (404, "No such channel; 'field' says which."),
        (422, "A field is invalid; 'field' names it."))}


def _age(value: str | None, field: str) -> float | None:
    if value is None:
        return None
    try:
        return parse_age(value, field)
    except InvalidInput as exc:
        raise ApiError(422, exc.field, exc.message) from None


async def _who(c: ApiContext, principal: Principal) -> str:
    """The decider as the audit trail names it: the token's id and name."""
    if principal.token_id is None:
        return f"api:{principal.kind}"
    row = await c.records.api_token_get(principal.token_id)
    name = f" ({row.name})" if row is not None and row.name else ""
    return f"api:tid_{principal.token_id}{name}"


@router.get("/uncertain", responses=_REFUSED, summary="Uncertain and held sends")
async def uncertain_list(
    request: Request,
    channel: Annotated[str | None, Query(min_length=1, max_length=200), TEXT] = None,
    older_than: Annotated[str | None, Query(
        max_length=20, description="Unsettled at least this long: 90, 90s, 15m, 2h, 1d."),
        TEXT] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> dict[str, Any]:
    """Oldest first, each with its channel's policy and whether it awaits an operator;
    with the per-channel counts."""
    c = ctx(request)
    rt = c.runtime
    if channel is not None:
        c.channel(channel, "query.channel")
    age = _age(older_than, "query.older_than")
    policies = rt.uncertain_policies()
    now = rt.clock.now()
    return {"channels": to_json(await operations.uncertain_counts(rt.store, policies, now=now)),
            "uncertain": to_json(await operations.uncertain_list(
                rt.store, policies, now=now, channel=channel, older_than_s=age,
                limit=limit))}


class ResolveBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    keys: list[Annotated[str, Field(min_length=1, max_length=512), KEY]] | None = Field(
        default=None, max_length=10_000, description="Intent keys; or a selection instead.")
    decision: Literal["accepted", "resend", "failed"] = Field(
        alias="as", description="accepted: the provider has it (no send); resend: send "
                                "again under the same key; failed: dead (terminal).")
    channel: Annotated[str | None, TEXT] = Field(default=None, min_length=1, max_length=200)
    older_than: Annotated[str | None, TEXT] = Field(default=None, max_length=20,
                                   description="Unsettled at least this long (15m, 2h, …).")
    note: Annotated[str | None, LINE] = Field(default=None, max_length=500)
    limit: int = Field(default=1000, ge=1, le=10_000,
                       description="With a selection: at most this many.")


@router.post("/uncertain/resolve", responses=_REFUSED,
             summary="Settle uncertain or held sends by an operator's decision")
async def uncertain_resolve(request: Request, body: ResolveBody,
                            principal: Annotated[Principal, Depends(authorize)]
                            ) -> dict[str, Any]:
    """Named keys, or a selection by channel and age; each change is guarded (one
    settled meanwhile is skipped) and leaves an audit event naming this token."""
    c = ctx(request)
    rt = c.runtime
    if not body.keys and body.channel is None and body.older_than is None:
        raise ApiError(422, "body.keys", "give keys, or a selection (channel, older_than)")
    if body.channel is not None:
        c.channel(body.channel, "body.channel")
    age = _age(body.older_than, "body.older_than")
    try:
        result = await operations.uncertain_resolve(
            rt.store, rt.transport, decision=body.decision, who=await _who(c, principal),
            now=rt.clock.now(), keys=body.keys or None, channel=body.channel,
            older_than_s=age, note=body.note, limit=body.limit)
    except InvalidInput as exc:
        raise ApiError(422, f"body.{exc.field}", exc.message) from None
    return asdict(result)
