"""``POST /v1/trigger/{campaign}``: what an external cron calls.

Authenticated by an HMAC signature of the timestamp, method, path and body (see
``tidings.api.auth``; a signature made for one campaign opens no other) or a bearer
token with the ``trigger`` scope. It runs one bounded admission pass for the occurrence due now
and answers with the counts; an occurrence too big for one pass keeps being admitted in
the background, never while the request waits. Idempotent per (campaign, logical date):
the occurrence's intents have deterministic keys, and a repeated trigger of a date
admitted already writes nothing (``repeat`` says so).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tidings.api.context import ctx
from tidings.api.errors import ApiError, ErrorBody, location

router = APIRouter(tags=["trigger"])


class TriggerBody(BaseModel):
    """Optional. Managed crons send whatever fixed body (and content type) they were
    given: a body that is not a JSON object is ignored, as are unknown fields (all of it
    is still covered by the signature)."""

    model_config = ConfigDict(extra="ignore")

    campaign: str | None = Field(default=None, max_length=200,
                                 description="If given, must equal the path's campaign.")
    logical_date: str | None = Field(
        default=None, max_length=16, pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2})?$",
        description="If given, must be the occurrence due now (an old trigger delivered "
                    "late is refused rather than admitted).")


class PassCounts(BaseModel):
    members: int
    admitted: int
    skipped: int
    published: int


class OccurrenceState(BaseModel):
    status: str
    kind: str
    members: int
    admitted: int
    skipped: int
    passes: int
    reason: str | None


class TriggerAnswer(BaseModel):
    """What one trigger did: this pass's counts, the occurrence's totals, and whether
    more remains (then admission continues in the background)."""

    campaign: str
    logical_date: str
    logical_at: float
    triggers: int
    repeat: bool
    more: bool
    continuing: bool
    paused: bool
    missed: bool
    occurrence: OccurrenceState | None
    pass_: PassCounts = Field(alias="pass")


_REFUSED: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text} for code, text in (
        (401, "Bad or missing signature or token (a signature made for another "
              "method, path or body, an expired or revoked token), or a stale timestamp."),
        (403, "The token lacks the trigger scope."),
        (404, "No such campaign."),
        (409, "A replayed signed request, or no occurrence is due."),
        (413, "The body is over the configured limit."),
        (422, "A field is invalid; 'field' names it."))}


_BODY_SCHEMA = {"requestBody": {"required": False, "content": {
    "application/json": {"schema": TriggerBody.model_json_schema()}}}}


def trigger_body(raw: bytes) -> TriggerBody | None:
    """The fields a cron's body may carry; None for an empty or non-object body."""
    if not raw.strip():
        return None
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    try:
        return TriggerBody.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ApiError(422, location(("body", *err["loc"])), str(err["msg"])) from None


@router.post("/v1/trigger/{campaign}", response_model=TriggerAnswer,
             responses=_REFUSED, openapi_extra=_BODY_SCHEMA,
             summary="Run one bounded admission pass (for a cron)")
async def trigger(
    request: Request,
    campaign: Annotated[str, Path(min_length=1, max_length=200)],
) -> dict[str, Any]:
    """Admit the occurrence of ``campaign`` due now, one bounded pass; answers at once.

    Signed: ``X-Tidings-Timestamp: <unix seconds>`` and ``X-Tidings-Signature:
    sha256=<hex HMAC-SHA256>`` of ``<timestamp>\\n<METHOD>\\n<path[?query]>\\n<body>``
    (the path as sent, no host), or ``Authorization: Bearer`` with a trigger token."""
    body = trigger_body(await request.body())
    if body is not None and body.campaign is not None and body.campaign != campaign:
        raise ApiError(422, "body.campaign", f"names {body.campaign!r} but the path names "
                       f"{campaign!r}")
    return await ctx(request).admission.trigger(
        campaign, logical_date=None if body is None else body.logical_date)
