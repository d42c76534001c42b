"""Recipient preferences over HTTP: the application's unsubscribe link or settings page
writes them; every later send checks them (opted out -> cancelled ``opted_out``,
quiet hours -> deferred to their end)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from tidings.api.context import ctx
from tidings.api.errors import ApiError, ErrorBody
from tidings.api.fields import TEXT
from tidings.core.errors import InvalidInput

router = APIRouter(prefix="/v1/preferences", tags=["preferences"])

_ID = Annotated[str, Path(min_length=1, max_length=200), TEXT]
_REFUSED: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text} for code, text in (
        (401, "No valid token."), (403, "The token lacks the scope this route needs."),
        (404, "Unknown channel."), (422, "A field is invalid; 'field' names it."))}


class PreferenceBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    opted_out: StrictBool = False
    """true or false: "yes", 1 or "false" are refused, not read as a boolean."""
    quiet_start: Annotated[str, Field(max_length=5, description="HH:MM"), TEXT] | None = None
    quiet_end: Annotated[str, Field(max_length=5, description="HH:MM"), TEXT] | None = None
    timezone: Annotated[str, Field(min_length=1, max_length=64, description="IANA zone of "
                                   "the quiet hours, e.g. Europe/London"), TEXT] = "UTC"


def _refuse(exc: InvalidInput, where: str) -> ApiError:
    status = 404 if exc.field == "channel" else 422
    return ApiError(status, f"{'path' if exc.field in ('channel', 'recipient_id') else where}."
                    f"{exc.field}", exc.message)


@router.put("/{recipient_id}/{channel}", responses=_REFUSED,
            summary="Set a recipient's wishes for a channel")
async def put_preference(request: Request, recipient_id: _ID, channel: _ID,
                         body: PreferenceBody) -> dict[str, Any]:
    """Replaces what was stored; applies to every send from now on."""
    try:
        stored = await ctx(request).runtime.set_preference(
            recipient_id, channel, opted_out=body.opted_out, quiet_start=body.quiet_start,
            quiet_end=body.quiet_end, timezone=body.timezone)
    except InvalidInput as exc:
        raise _refuse(exc, "body") from None
    return asdict(stored)


@router.delete("/{recipient_id}/{channel}", responses=_REFUSED,
               summary="Forget a recipient's wishes for a channel")
async def delete_preference(request: Request, recipient_id: _ID, channel: _ID
                            ) -> dict[str, Any]:
    try:
        deleted = await ctx(request).runtime.delete_preference(recipient_id, channel)
    except InvalidInput as exc:
        raise _refuse(exc, "path") from None
    return {"recipient_id": recipient_id, "channel": channel, "deleted": deleted}


@router.get("/{recipient_id}", responses=_REFUSED, summary="A recipient's stored wishes")
async def get_preferences(request: Request, recipient_id: _ID) -> dict[str, Any]:
    found = await ctx(request).runtime.preferences(recipient_id)
    return {"recipient_id": recipient_id, "preferences": [asdict(p) for p in found]}
