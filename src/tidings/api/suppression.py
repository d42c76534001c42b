"""The suppression list over HTTP (``/v1/suppressions``): list, add, remove, import and
export it, all with the operator scope (the list holds addresses). The work is
``tidings.operate.suppression``'s, shared with ``tidings suppression``; every addition
and removal is an audit event naming the caller's token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from tidings.api.auth import Principal, authorize
from tidings.api.context import ctx
from tidings.api.errors import ApiError
from tidings.api.fields import LINE, TEXT
from tidings.api.holds import actor
from tidings.api.operator import _refused
from tidings.core.errors import InvalidInput
from tidings.core.suppression import Suppression
from tidings.operate import suppression

router = APIRouter(prefix="/v1/suppressions", tags=["suppression"])

Who = Annotated[Principal, Depends(authorize)]
_ADDRESS = Annotated[str, Field(min_length=1, max_length=320,
                                description="An email address or an E.164 phone number; "
                                            "normalised before it is looked up or stored."),
                     TEXT]
_KIND = Annotated[str, Field(min_length=1, max_length=10, description="email or sms"), TEXT]
_NOTE = Annotated[str, Field(max_length=500, description="Why, for the audit trail."), LINE]
_CSV = {"requestBody": {"required": True, "content": {"text/csv": {"schema": {
    "type": "string", "description": "A header row (address,kind and optionally "
                                     "reason,note), then one address a row."}}}}}


def _row(found: Suppression) -> dict[str, Any]:
    return {"address": found.address, "kind": found.kind, "reason": found.reason.value,
            "source": found.source, "created_at": found.created_at, "key": found.key,
            "detail": found.detail}


def _refuse(exc: InvalidInput, where: str) -> ApiError:
    return ApiError(422, f"{where}.{exc.field}", exc.message)


class AddBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    address: _ADDRESS
    kind: _KIND
    reason: Annotated[str, Field(max_length=20, description="manual (the default), "
                                 "unsubscribe, hard_bounce, complaint, sms_stop."),
                      TEXT] = "manual"
    note: _NOTE | None = None


class RemoveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    address: _ADDRESS
    kind: _KIND
    note: _NOTE | None = None


@router.get("", responses=_refused(422), summary="A page of the suppression list")
async def list_suppressions(
    request: Request,
    kind: Annotated[str | None, Query(max_length=10)] = None,
    reason: Annotated[str | None, Query(max_length=20)] = None,
    after_address: Annotated[str | None, Query(max_length=320)] = None,
    after_kind: Annotated[str, Query(max_length=10)] = "",
    limit: Annotated[int, Query(ge=1, le=suppression.BATCH)] = 100,
) -> dict[str, Any]:
    """In (address, kind) order; ``next`` is the ``after_address``/``after_kind`` of the
    next page (None on the last: no row follows this page)."""
    after = (after_address, after_kind) if after_address is not None else None
    try:
        found, more = await suppression.page(ctx(request).runtime.store, kind=kind,
                                             reason=reason, after=after, limit=limit)
    except InvalidInput as exc:
        raise _refuse(exc, "query") from None
    last = found[-1] if more and found else None
    return {"suppressions": [_row(s) for s in found],
            "next": None if last is None else {"after_address": last.address,
                                               "after_kind": last.kind}}


@router.get("/history", responses=_refused(422),
            summary="One address's entry and who added and removed it")
async def suppression_history(
    request: Request,
    kind: Annotated[str, Query(min_length=1, max_length=10)],
    address: Annotated[str, Query(min_length=1, max_length=320)],
) -> dict[str, Any]:
    """The entry the address has now (``entry``, null when it is not suppressed) and
    every operator's addition and removal of it, oldest first: ``by`` who, ``at`` when,
    ``detail`` why (what was removed, and the note)."""
    try:
        found = await suppression.history(ctx(request).runtime.store, address=address,
                                          kind=kind)
    except InvalidInput as exc:
        raise _refuse(exc, "query") from None
    return {"address": found.address, "kind": found.kind,
            "entry": None if found.entry is None else _row(found.entry),
            "events": [{"type": e.type, "at": e.at, "by": e.worker, "detail": e.detail}
                       for e in found.events]}


@router.post("", responses=_refused(422), summary="Suppress an address")
async def add_suppression(request: Request, body: AddBody, who: Who) -> dict[str, Any]:
    """No send to it goes out from now on. Suppressing what is suppressed already
    changes nothing (``added`` false; the first reason stands)."""
    c = ctx(request)
    try:
        item = suppression.entry(body.address, body.kind, reason=body.reason, note=body.note)
    except InvalidInput as exc:
        raise _refuse(exc, "body") from None
    by = suppression.recorded_by(await actor(c, who))
    added = await suppression.add(c.runtime.store, item, by=by, now=c.runtime.clock.now())
    return {"address": item.address, "kind": item.kind, "added": added is not None,
            "by": by}


@router.post("/remove", responses=_refused(422),
             summary="Take an address off the suppression list (audited)")
async def remove_suppression(request: Request, body: RemoveBody, who: Who) -> dict[str, Any]:
    """Sends to it go out again; the removal is on the audit trail with ``note``."""
    c = ctx(request)
    by = suppression.recorded_by(await actor(c, who))
    try:
        removed = await suppression.remove(c.runtime.store, address=body.address,
                                           kind=body.kind, by=by, now=c.runtime.clock.now(),
                                           note=body.note)
    except InvalidInput as exc:
        raise _refuse(exc, "body") from None
    return {"removed": None if removed is None else _row(removed), "by": by}


@router.post("/import", responses=_refused(413, 422), openapi_extra=_CSV,
             summary="Suppress every address of a CSV file")
async def import_suppressions(request: Request, who: Who) -> dict[str, Any]:
    """Every row is checked before any is stored (an error names the line and column);
    addresses already suppressed keep their first reason. The body limit is the API's
    (``api.max_body_bytes``): a bigger list goes in several files, or by the CLI."""
    c = ctx(request)
    try:
        text = (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(422, "body", "is not UTF-8 text") from None
    try:
        entries = suppression.read_csv(text)
    except InvalidInput as exc:
        raise _refuse(exc, "body") from None
    by = suppression.recorded_by(await actor(c, who))
    done = await suppression.import_entries(c.runtime.store, entries, by=by,
                                            now=c.runtime.clock.now())
    return {"rows": done.rows, "added": done.added, "already": done.already}


@router.get("/export", responses=_refused(422), summary="The suppression list as CSV",
            response_class=StreamingResponse)
async def export_suppressions(
    request: Request,
    kind: Annotated[str | None, Query(max_length=10)] = None,
    reason: Annotated[str | None, Query(max_length=20)] = None,
) -> StreamingResponse:
    """address, kind, reason, source, created_at (ISO 8601 UTC), key, detail; read a page
    at a time as it is sent."""
    store = ctx(request).runtime.store
    try:
        await suppression.listing(store, kind=kind, reason=reason, limit=1)  # checks
    except InvalidInput as exc:
        raise _refuse(exc, "query") from None

    async def rows() -> AsyncIterator[str]:
        async for line in suppression.export_csv(store, kind=kind, reason=reason):
            yield line

    return StreamingResponse(rows(), media_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": 'attachment; filename="suppressions.csv"'})
