"""The dashboard's suppression list (``/ui/suppressions``): find entries by address
(exactly, or a part of it), channel and reason a page at a time, add one, remove one
with a note, export the list as CSV.

The work is ``tidings.operate.suppression``'s, as for ``/v1/suppressions`` and
``tidings suppression``: an addition and a removal are audited the same way, naming
the session's token. Every route wants the operator scope, as the API's do (the list
holds addresses). A refused field is shown on the form it came from, named.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Depends, Request
from fastapi.responses import Response, StreamingResponse

from tidings.api.auth import Principal, authorize
from tidings.api.context import ApiContext, ctx
from tidings.api.holds import actor
from tidings.api.ui.pages import HEADERS, redirect, render
from tidings.api.ui.session import checked_form, frame, one
from tidings.core.addresses import CHANNEL_KINDS
from tidings.core.errors import InvalidInput, unknown_name
from tidings.core.suppression import Reason
from tidings.operate import suppression

Who = Annotated[Principal, Depends(authorize)]

#: The fields of the filter form (and of its next page).
FILTER = ("address", "match", "channel", "reason", "after_address", "after_kind")
#: Entries a page shows.
PAGE_SIZE = 50
#: The one-line result of an action that redirected here (nothing typed is echoed).
NOTICES = {"added": "Address suppressed.",
           "already": "That address was suppressed already; its first reason stands.",
           "removed": "Address taken off the suppression list; the removal is audited.",
           "absent": "That address was not suppressed (the attempt is audited)."}


def kind_of(c: ApiContext, channel: str, field: str = "channel") -> str:
    """The address kind a channel's entries are kept under: a declared channel's kind,
    or a kind named as it is (``email``, ``sms``)."""
    kinds = c.runtime.channel_kinds
    if channel in kinds:
        return kinds[channel]
    if channel in CHANNEL_KINDS:
        return channel
    raise InvalidInput(field, unknown_name("channel", channel,
                                           [*kinds, *sorted(CHANNEL_KINDS - set(kinds))]))


async def _values(request: Request, who: Principal, query: Mapping[str, str]
                  ) -> dict[str, Any]:
    """The page: the filter as given, the entries it finds, the next page's link;
    ``error`` names a refused filter field (nothing is listed then)."""
    c = ctx(request)
    address, match = query.get("address", "").strip(), query.get("match") or "contains"
    channel, reason = query.get("channel", "").strip(), query.get("reason", "").strip()
    after_address = query.get("after_address")
    after = (after_address, query.get("after_kind", "")) if after_address else None
    values: dict[str, Any] = {
        **frame(request, who, "suppressions"), "address": address, "match": match,
        "channel": channel, "reason": reason, "channels": list(c.runtime.channel_kinds),
        "reasons": [r.value for r in Reason], "rows": [], "next": None, "error": None,
        "notice": NOTICES.get(query.get("done", "")), "add": {}}
    try:
        if match not in ("contains", "exact"):
            raise InvalidInput("match", "must be contains or exact")
        kind = kind_of(c, channel) if channel else None
        store = c.runtime.store
        if address:
            rows, more = await suppression.find(store, address=address,
                                                exact=match == "exact", kind=kind,
                                                reason=reason or None, after=after,
                                                limit=PAGE_SIZE)
        else:
            rows, more = await suppression.page(store, kind=kind, reason=reason or None,
                                                after=after, limit=PAGE_SIZE)
    except InvalidInput as exc:
        values["error"] = {"field": exc.field, "message": exc.message, "form": "filter"}
        return values
    values["rows"] = rows
    if more and rows:
        values["next"] = {"after_address": rows[-1].address, "after_kind": rows[-1].kind}
    values["export"] = "/ui/suppressions/export" + (
        "?" + urlencode({k: v for k, v in (("channel", channel), ("reason", reason)) if v})
        if channel or reason else "")
    return values


def _page(values: dict[str, Any], status: int = 200) -> Response:
    values.setdefault("export", "/ui/suppressions/export")
    return render("suppressions.html", values, status=422 if values["error"] else status)


async def suppressions(request: Request, who: Who) -> Response:
    """The first page of the whole list (and the result of an action, ``done``)."""
    return _page(await _values(request, who, {"done": request.query_params.get("done", "")}))


# A filter (and the next page of one) is a POST, as the timeline's search is: what
# was typed, and the address a page ends at, stay out of URLs and the browser's history.
async def found(request: Request, who: Who) -> Response:
    form = await checked_form(request, who)
    return _page(await _values(request, who, {name: one(form, name) for name in FILTER}))


async def _refused(request: Request, who: Principal, exc: InvalidInput, form: str,
                   typed: Mapping[str, str]) -> Response:
    values = await _values(request, who, {})
    values["error"] = {"field": exc.field, "message": exc.message, "form": form}
    values["add"] = dict(typed) if form == "add" else {}
    return render("suppressions.html", values, status=422)


async def add(request: Request, who: Who) -> Response:
    form = await checked_form(request, who)
    c = ctx(request)
    typed = {"address": one(form, "address"), "channel": one(form, "channel"),
             "note": one(form, "note")}
    try:
        if not typed["channel"]:
            raise InvalidInput("channel", "is empty")
        item = suppression.entry(typed["address"], kind_of(c, typed["channel"]),
                                 note=typed["note"] or None)
    except InvalidInput as exc:
        return await _refused(request, who, exc, "add", typed)
    by = suppression.recorded_by(await actor(c, who))
    added = await suppression.add(c.runtime.store, item, by=by, now=c.runtime.clock.now())
    return redirect("/ui/suppressions?done=" + ("added" if added else "already"))


async def remove(request: Request, who: Who) -> Response:
    """Take one entry off the list with the operator's note (required here: a removal
    lets sends go out again, and the audit trail should say why)."""
    form = await checked_form(request, who)
    c = ctx(request)
    address, kind, note = one(form, "address"), one(form, "kind"), one(form, "note")
    by = suppression.recorded_by(await actor(c, who))
    try:
        if not note:
            raise InvalidInput("note", "is empty: say why the address may be sent to again")
        removed = await suppression.remove(c.runtime.store, address=address, kind=kind,
                                           by=by, now=c.runtime.clock.now(), note=note)
    except InvalidInput as exc:
        return await _refused(request, who, exc, "remove", {})
    return redirect("/ui/suppressions?done=" + ("removed" if removed else "absent"))


async def export(request: Request, who: Who, channel: str = "", reason: str = ""
                 ) -> Response:
    """The list as CSV, as ``GET /v1/suppressions/export`` writes it."""
    c = ctx(request)
    store = c.runtime.store
    try:
        kind = kind_of(c, channel) if channel else None
        await suppression.listing(store, kind=kind, reason=reason or None, limit=1)  # checks
    except InvalidInput as exc:
        return await _refused(request, who, exc, "filter", {})

    async def rows() -> AsyncIterator[str]:
        async for line in suppression.export_csv(store, kind=kind, reason=reason or None):
            yield line

    return StreamingResponse(rows(), media_type="text/csv; charset=utf-8", headers={
        **HEADERS, "Content-Disposition": 'attachment; filename="suppressions.csv"'})


#: The routes (under the dashboard's ``/ui``): path, methods, endpoint.
ROUTES: list[tuple[str, list[str], Callable[..., Any]]] = [
    ("/suppressions", ["GET"], suppressions), ("/suppressions", ["POST"], found),
    ("/suppressions/add", ["POST"], add),
    ("/suppressions/remove", ["POST"], remove), ("/suppressions/export", ["GET"], export)]
