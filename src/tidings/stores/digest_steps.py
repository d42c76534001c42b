"""The digest role's transactions, written once for both SQL stores: each body is a
generator that yields ``(query name, parameters)`` and is sent the rows back, and
``DigestRole`` runs it in one write transaction of its store (``_run``). What a window
and an item mean is ``tidings.core.digest``'s; the dialects' named queries are
``sql/<dialect>/digests.sql``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Mapping, Sequence
from functools import partial
from typing import Any

from tidings.core.digest import WindowState, opening, over_budget, slid, window_id
from tidings.stores.records import (
    DigestAdded,
    DigestBuild,
    DigestItem,
    DigestItemDraft,
    DigestPending,
    DigestsClosed,
    DigestWindow,
)

Rows = list[tuple[Any, ...]]
#: How often an add reads its key's open window again after another writer opened one
#: first; each try sees what committed before it.
TRIES = 20
#: A body: yields (query name, parameters), is sent the rows, returns its result.
Body = Generator[tuple[str, dict[str, Any]], Rows, Any]
#: Not a query: the store's admission of ``drafts`` (its driver runs it in the body's
#: transaction and sends back the keys created, one a row).
ADMIT = "<admit>"


def _window(row: Sequence[Any]) -> DigestWindow:
    return DigestWindow(window_id=row[0], digest_key=row[1], state=row[2],
                        opened_at=float(row[3]), closes_at=float(row[4]), items=int(row[5]),
                        request=row[6])


def add_body(item: DigestItemDraft, now: float) -> Body:
    """``Digests.digest_add``."""
    key = {"digest_key": item.digest_key, "item_key": item.item_key}
    found = yield "digest_item_get", key
    if found:
        wid, state, items, closes_at = found[0]
        return DigestAdded(window_id=wid, created=False, state=state, items=int(items),
                           closes_at=float(closes_at))
    size = len(item.data.encode())
    for _ in range(TRIES):  # a writer on another connection may open the key's window first
        open_rows = yield "digest_open_get", {"digest_key": item.digest_key}
        if open_rows:
            (wid, opened_at, closes_at, window_s, wait_s, sliding, _cap, added,
             used) = open_rows[0]
            if float(closes_at) > now and not over_budget(int(used), size):
                break
            # Its time is up (the closer has not come yet), or this item would carry it
            # over the payload budget: it takes no more, and this item opens the next.
            yield "digest_seal", {"window_id": wid}
        last = yield "digest_last_opened", {"digest_key": item.digest_key}
        last_opened = None if not last or last[0][0] is None else float(last[0][0])
        opened_at, closes_at = opening(window_s=item.window_s, now=now,
                                       last_opened=last_opened)
        wid = window_id(item.digest_key, opened_at)
        made = yield "digest_window_insert", {
            "window_id": wid, "digest_key": item.digest_key, "opened_at": opened_at,
            "closes_at": closes_at, "window_s": item.window_s, "wait_s": item.wait_s,
            "sliding": item.sliding, "max_items": item.max_items, "request": item.request}
        if made:
            window_s, wait_s, sliding, added = item.window_s, item.wait_s, item.sliding, 0
            break
    else:
        raise RuntimeError(f"digest {item.digest_key!r}: no open window after {TRIES} tries")
    # Its place: after every item added before, cancelled ones too (a cancel gives no
    # place back, so the order the template sees is the order of adding).
    inserted = yield "digest_item_insert", {**key, "window_id": wid, "seq": int(added) + 1,
                                            "added_at": now, "data": item.data}
    if not inserted:  # the same item, added at once by another writer
        again = yield "digest_item_get", key
        wid, state, items, closes_at = again[0]
        return DigestAdded(window_id=wid, created=False, state=state, items=int(items),
                           closes_at=float(closes_at))
    closes_at = slid(sliding=bool(sliding), window_s=float(window_s), wait_s=float(wait_s),
                     opened_at=float(opened_at), closes_at=float(closes_at), now=now)
    grown = yield "digest_window_grow", {"window_id": wid, "bytes": size + 1,
                                         "request": item.request, "closes_at": closes_at}
    state, items, closes_at = grown[0]
    return DigestAdded(window_id=wid, created=True, state=state, items=int(items),
                       closes_at=float(closes_at))


def cancel_body(digest_key: str, item_key: str, now: float) -> Body:
    """``Digests.digest_cancel_item``."""
    key = {"digest_key": digest_key, "item_key": item_key}
    rows = yield "digest_item_window_lock", key
    if not rows:
        found = yield "digest_item_get", key
        return None if not found else str(found[0][1])
    wid, state = rows[0]
    if state != WindowState.OPEN:
        return str(state)
    yield "digest_item_cancel", {**key, "now": now}
    yield "digest_window_shrink", {"window_id": wid}
    return str(WindowState.OPEN)


def finish_body(finished: Mapping[str, Sequence[str]], now: float) -> Body:
    """Mark sealed windows done, each with its digest's keys: one statement for the
    lot; the windows finished now."""
    rows = yield "digest_finish", {"now": now, "finished": json.dumps([
        {"window_id": window,
         "state": str(WindowState.CLOSED if keys else WindowState.EMPTY),
         "intent_keys": json.dumps(list(keys))} for window, keys in finished.items()])}
    return [str(row[0]) for row in rows]


def claim_body(now: float, limit: int, window: str | None) -> Body:
    """The page ``Digests.digest_close`` closes: sealed, and held by its transaction."""
    if window is None:
        rows = yield "digest_claim", {"now": now, "limit": limit}
    else:
        rows = yield "digest_claim_window", {"now": now, "window_id": window}
    # RETURNING gives no order: the earliest due first, as the page was chosen.
    return sorted((_window(row) for row in rows), key=lambda w: (w.closes_at, w.window_id))


def items_body(window_ids: Sequence[str]) -> Body:
    """The items not cancelled of a page of windows, by window, in order."""
    rows = yield "digest_items_of", {"window_ids": json.dumps(list(window_ids))}
    items: dict[str, list[DigestItem]] = {}
    for r in rows:
        items.setdefault(r[0], []).append(
            DigestItem(item_key=r[1], seq=int(r[2]), added_at=float(r[3]), data=r[4]))
    return items


def close_body(now: float, limit: int, window: str | None, build: DigestBuild) -> Body:
    """``Digests.digest_close``: claim a page, read its items, admit what ``build`` makes
    of them (``ADMIT``: the store's own admission, run by its driver in this
    transaction, sent back the keys it created as rows), and mark the page done."""
    page = yield from claim_body(now, limit, window)
    if not page:
        return DigestsClosed(windows=[], created=[])
    items = yield from items_body([w.window_id for w in page])
    made = build(page, items)
    created = (yield ADMIT, {"drafts": made.drafts, "now": now}) if made.drafts else []
    done = yield from finish_body(made.finished, now)
    return DigestsClosed(windows=done, created=[str(row[0]) for row in created])


def purge_body(before: float) -> Body:
    """``Digests.digest_purge``."""
    yield "digest_purge_items", {"before": before}
    rows = yield "digest_purge_windows", {"before": before}
    return len(rows)


class DigestRole:
    """The ``Digests`` role over a store's ``_run`` (a body in one write transaction)
    and ``_query`` (one read)."""

    async def _run(self, body: Callable[[], Body], *, enqueue: bool = False) -> Any:
        """Run a fresh ``body()`` in one write transaction; its ``ADMIT`` steps admit
        drafts born enqueued (with ``enqueue``) or selected. A factory, not a body: a
        transaction retried (a lost connection, a busy file) starts its body again, and
        a generator half-run by the failed attempt cannot."""
        raise NotImplementedError

    async def _query(self, name: str, params: dict[str, Any]) -> Rows:
        raise NotImplementedError

    async def digest_add(self, item: DigestItemDraft, *, now: float) -> DigestAdded:
        added: DigestAdded = await self._run(partial(add_body, item, now))
        return added

    async def digest_due(self, *, now: float, limit: int) -> list[DigestWindow]:
        rows = await self._query("digest_due", {"now": now, "limit": limit})
        return [_window(row) for row in rows]

    async def digest_seal(self, window_id: str) -> bool:
        return bool(await self._run(partial(_one, "digest_seal", {"window_id": window_id})))

    async def digest_window(self, window_id: str) -> DigestWindow | None:
        rows = await self._query("digest_window_get", {"window_id": window_id})
        return _window(rows[0]) if rows else None

    async def digest_items(self, window_id: str) -> list[DigestItem]:
        rows = await self._query("digest_window_items", {"window_id": window_id})
        return [DigestItem(item_key=r[0], seq=int(r[1]), added_at=float(r[2]), data=r[3])
                for r in rows]

    async def digest_close(self, *, now: float, limit: int, build: DigestBuild,
                           enqueue: bool, window_id: str | None = None) -> DigestsClosed:
        closed: DigestsClosed = await self._run(partial(close_body, now, limit, window_id, build),
                                                enqueue=enqueue)
        return closed

    async def digest_finish(self, window_id: str, *, intent_keys: Sequence[str],
                            now: float) -> bool:
        return bool(await self._run(partial(finish_body, {window_id: intent_keys}, now)))

    async def digest_cancel_item(self, digest_key: str, item_key: str, *,
                                 now: float) -> str | None:
        state: str | None = await self._run(partial(cancel_body, digest_key, item_key, now))
        return state

    async def digest_pending(self) -> DigestPending:
        rows = await self._query("digest_pending", {})
        windows, items, oldest = rows[0]
        return DigestPending(windows=int(windows), items=int(items or 0),
                             oldest_opened_at=None if oldest is None else float(oldest))

    async def digest_purge(self, *, before: float) -> int:
        purged: int = await self._run(partial(purge_body, before))
        return purged


def _one(name: str, params: dict[str, Any]) -> Body:
    rows = yield name, params
    return rows
