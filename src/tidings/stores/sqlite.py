"""The SQLite store: the embedded default, one file, any number of local processes.

Every batch method is one write transaction (``BEGIN IMMEDIATE``) on the
database thread, and set-based where it can be: admission is a multi-row insert,
enqueue marking is one event insert and one update over a JSON list of keys, claims
read all their rows at once, the core plans them (``claims.plan_claims``) and one
``executemany`` writes the leases. The reads are ``reads.StoreReads``'s, run in a
read transaction. The SQL lives in ``stores/sql/sqlite/*.sql``.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, TypeVar

from tidings.claims import claim_keys, plan_claims
from tidings.errors import StoreError
from tidings.model import (
    DraftPage,
    Event,
    IntentDraft,
    message_body,
    message_body_parts,
    plain_keys,
)
from tidings.preferences import Preference
from tidings.retention import PENDING_STATES, PRUNABLE_STATES, PruneCounts
from tidings.states import State
from tidings.stores import base, rows
from tidings.stores.lifecycle import DatabaseStore
from tidings.stores.provider_events import (
    ADOPTION,
    RECEIPT_OWNER,
    owner_key,
    recorded,
    timeline_row,
    unique_provider_events,
)
from tidings.stores.reads import StoreReads
from tidings.stores.sqlite_db import SqliteDatabase, insert_messages

T = TypeVar("T")
R = TypeVar("R")

#: One row of the multi-row admission insert: the ten draft columns.
_DRAFT_ROW = "(?,?,?,?,?,?,?,?,?,?)"
#: Rows per admission statement: 10,000 variables, well under SQLite's 32,766, and one
#: statement text (so one cached prepared statement) for every full chunk.
_ADMIT_CHUNK = 1000
#: One intent of a page's insert (``intent_admit_page``): key, recipient id, address, data.
_PAGE_ROW = "(?,?,?,?)"
_PAGE_WIDTH = 4
#: Intents per page statement: 10,000 variables, and a page of 5,000 in two statements.
_PAGE_CHUNK = 2500


@dataclass(frozen=True, slots=True)
class _ChannelPart:
    """One channel's intents of a page, as ``_admit_page_fn``'s statements bind them."""

    channel: str
    keys: list[str]
    keys_json: str
    values: list[str]
    """(key, recipient id, address, data) per intent, one after the other."""
    plain: bool
    """No key holds what JSON escapes (``model.plain_keys``)."""


@dataclass(frozen=True, slots=True)
class _PageParts:
    keys_json: str
    channels: list[_ChannelPart]


def _page_parts(channels: Sequence[str], keys: list[str],
                page_rows: Sequence[tuple[int, str, str, str]]) -> _PageParts:
    """A page's (or its new intents') statement parameters, by channel, in page order.
    Made in C as far as it goes (``zip``, ``chain``): this covers every intent."""
    keys_json = json.dumps(keys)
    parts = []
    for index, channel in enumerate(channels):
        if len(channels) == 1:
            chosen_keys, chosen, listed = keys, page_rows, keys_json
        else:
            picked = [i for i, row in enumerate(page_rows) if row[0] == index]
            chosen_keys = [keys[i] for i in picked]
            chosen = [page_rows[i] for i in picked]
            listed = json.dumps(chosen_keys)
        if not chosen:
            continue
        _, recipient_ids, addresses, data = zip(*chosen, strict=True)
        values = list(chain.from_iterable(zip(chosen_keys, recipient_ids, addresses, data,
                                              strict=True)))
        parts.append(_ChannelPart(channel=channel, keys=chosen_keys, keys_json=listed,
                                  values=values, plain=plain_keys(chosen_keys)))
    return _PageParts(keys_json=keys_json, channels=parts)


def _insert_page_rows(conn: sqlite3.Connection, insert: str, head: tuple[Any, ...],
                      values: list[str]) -> int:
    """Insert one channel's intents of a page (``values``: four per intent),
    ``_PAGE_CHUNK`` per statement; returns the rows written."""
    written = 0
    step = _PAGE_CHUNK * _PAGE_WIDTH
    for start in range(0, len(values), step):
        chunk = values[start:start + step]
        statement = _page_statement(insert, len(chunk) // _PAGE_WIDTH)
        written += conn.execute(statement, [*head, *chunk]).rowcount
    return written


@functools.lru_cache(maxsize=8)
def _page_statement(insert: str, count: int) -> str:
    """``insert`` with ``count`` row groups (kept: every full chunk shares one text)."""
    return insert.replace("{rows}", ",".join([_PAGE_ROW] * count))


def _insert_events(
    conn: sqlite3.Connection, sql: Mapping[str, str], by_channel: Mapping[str, Sequence[str]],
    *, type: str, state: str, at: float, attempt: int = 0, keys_json: str | None = None,
) -> None:
    """One event per key, one statement per channel (``keys_json``: the one channel's
    keys already as JSON).

    A JSON key list bound once is about twice as fast as an ``executemany`` of one
    row per key, and a page of admissions has one or two channels.
    """
    for channel, keys in by_channel.items():
        conn.execute(sql["event_insert_keys"], {
            "keys": json.dumps(keys) if keys_json is None else keys_json,
            "channel": channel, "type": type, "at": at, "state": state, "attempt": attempt,
        })


def _all(conn: sqlite3.Connection, shape: rows.Shape[R], statement: str,
         params: Any = ()) -> list[R]:
    cursor = conn.execute(statement, params)
    return shape.all(cursor.description, cursor)


def _one(conn: sqlite3.Connection, shape: rows.Shape[R], statement: str,
         params: Any = ()) -> R | None:
    cursor = conn.execute(statement, params)
    row = cursor.fetchone()
    return None if row is None else shape.one(cursor.description, row)


class SqliteStore(DatabaseStore[SqliteDatabase], StoreReads):
    """The ``Store`` port on one SQLite file (see ``SqliteDatabase`` for concurrency)."""

    concurrent_writers = False

    @classmethod
    async def open(cls, url: str) -> SqliteStore:
        """A store on its own database connection, from ``sqlite:///path.db``."""
        return cls(SqliteDatabase.from_url(url))

    # ---------------------------------------------------------------- admission and relay

    async def intent_admit(self, drafts: Sequence[IntentDraft], *, now: float,
                           publish_lease_until: float | None = None,
                           progress: base.OccurrenceProgress | None = None,
                           enqueue: bool = False,
                           progress_after: Awaitable[object] | None = None) -> list[str]:
        """``Store.intent_admit``: one write transaction, a multi-row insert of the drafts
        whose keys are new. SQLite has one writer, so ``progress_after`` is simply
        awaited first."""
        if progress_after is not None:
            await progress_after
        if not drafts and progress is None:
            return []
        if isinstance(drafts, DraftPage):
            # A campaign page is written in its columns: no draft is made per intent.
            return await self.db.write(self._admit_page_fn(
                drafts, now=now, publish_lease_until=publish_lease_until,
                progress=progress, enqueue=enqueue))
        return await self.db.write(self._admit_fn(
            list(drafts), now=now, publish_lease_until=publish_lease_until,
            progress=progress, enqueue=enqueue))

    def _admit_page_fn(self, page: DraftPage, *, now: float, publish_lease_until: float | None,
                       progress: base.OccurrenceProgress | None, enqueue: bool
                       ) -> Callable[[sqlite3.Connection], list[str]]:
        """``_admit_fn`` for a ``DraftPage``: per intent only its key, recipient id,
        address and data are bound (what the page shares is bound once per statement),
        its event and queue message are each one statement per channel over the JSON
        key list, and nothing is made per intent but the key.

        The statements' parameters are made here, on the caller's thread, for the page
        as if every key were new (the usual case): the database thread only runs them,
        and makes them again for the keys that are new when some are not."""
        sql = self._sql
        insert = sql["intent_admit_page_enqueued" if enqueue else "intent_admit_page"]
        state = "enqueued" if enqueue else "selected"
        stamp = (now, now, now, now if enqueue else publish_lease_until)
        shared = (page.template, page.campaign, page.occurrence, page.due_at, page.expires_at)
        channels = [channel for channel, _, _ in page.channels]
        keys = page.keys()
        whole = _page_parts(channels, keys, page.rows)
        # model.message_body's visibility rule, once for the page (its due time is shared).
        available_at = now + max(0.0, page.due_at - now)
        body_head, body_tail = message_body_parts()

        def fn(conn: sqlite3.Connection) -> list[str]:
            # Under BEGIN IMMEDIATE nobody else can insert between this read and the
            # insert, so "new" is exactly what the insert will write.
            seen = {key for (key,) in conn.execute(sql["intent_existing_keys"],
                                                   {"keys": whole.keys_json})}
            parts, fresh_keys = whole.channels, keys
            if seen or len(set(keys)) != len(keys):
                fresh_keys, fresh_rows = [], []
                for key, row in zip(keys, page.rows, strict=True):
                    if key not in seen:  # also keeps the first of a key drafted twice
                        seen.add(key)
                        fresh_keys.append(key)
                        fresh_rows.append(row)
                parts = _page_parts(channels, fresh_keys, fresh_rows).channels
            written = 0
            for part in parts:
                written += _insert_page_rows(conn, insert, (*stamp, part.channel, *shared),
                                             part.values)
                _insert_events(conn, sql, {part.channel: part.keys}, type=state, state=state,
                               at=now, keys_json=part.keys_json)
                if not enqueue:
                    continue
                if part.plain:
                    conn.execute(sql["message_insert_keys"], {
                        "queue": part.channel, "now": now, "keys": part.keys_json,
                        "body_head": body_head, "body_tail": body_tail,
                        "available_at": available_at})
                else:
                    insert_messages(conn, sql, part.channel,
                                    [(k, message_body(k), page.due_at - now)
                                     for k in part.keys], now=now)
            if written != len(fresh_keys):
                raise StoreError(f"admission wrote {written} of {len(fresh_keys)} new intents")
            if progress is not None:
                cursor = conn.execute(sql["occurrence_progress"],
                                      rows.progress_params(progress, admitted=len(fresh_keys)))
                if cursor.rowcount != 1:
                    raise StoreError(f"occurrence {progress.occurrence!r} does not exist")
            return list(fresh_keys)

        return fn

    def _admit_fn(self, drafts: list[IntentDraft], *, now: float,
                  publish_lease_until: float | None, progress: base.OccurrenceProgress | None,
                  enqueue: bool) -> Callable[[sqlite3.Connection], list[str]]:
        """The body of one admission, run inside a write transaction (``intent_admit``,
        ``api_publish_many``)."""
        sql = self._sql
        insert = sql["intent_admit_values_enqueued" if enqueue else "intent_admit_values"]
        head = (now, now, now, now if enqueue else publish_lease_until)
        keys_json = json.dumps([d.key for d in drafts])

        def fn(conn: sqlite3.Connection) -> list[str]:
            rows_by_queue: dict[str, list[tuple[str, str, float]]] = {}
            # Under BEGIN IMMEDIATE nobody else can insert between this read and the
            # insert, so "new" is exactly what the insert will write.
            seen = {key for (key,) in conn.execute(sql["intent_existing_keys"],
                                                   {"keys": keys_json})}
            fresh: list[IntentDraft] = []
            for d in drafts:
                if d.key not in seen:  # also keeps the first of a key drafted twice
                    seen.add(d.key)
                    fresh.append(d)
            written = 0
            for start in range(0, len(fresh), _ADMIT_CHUNK):
                chunk = fresh[start:start + _ADMIT_CHUNK]
                params: list[Any] = [*head]
                for d in chunk:
                    params += (d.key, d.channel, d.recipient_id, d.address, d.template, d.data,
                               d.campaign, d.occurrence, d.due_at, d.expires_at)
                groups = ",".join([_DRAFT_ROW] * len(chunk))
                statement = insert.replace("{rows}", groups)
                written += conn.execute(statement, params).rowcount
            if written != len(fresh):
                raise StoreError(f"admission wrote {written} of {len(fresh)} new intents")
            by_channel: dict[str, list[str]] = {}
            for d in fresh:
                by_channel.setdefault(d.channel, []).append(d.key)
            if enqueue:
                # Born enqueued: one transition, one event (selected_at and enqueued_at
                # both say when).
                _insert_events(conn, sql, by_channel, type="enqueued", state="enqueued", at=now)
                for d in fresh:
                    rows_by_queue.setdefault(d.channel, []).append(
                        (d.key, message_body(d.key), d.due_at - now))
                for queue, messages in rows_by_queue.items():
                    insert_messages(conn, sql, queue, messages, now=now)
            else:
                _insert_events(conn, sql, by_channel, type="selected", state="selected", at=now)
            if progress is not None:
                cursor = conn.execute(sql["occurrence_progress"],
                                      rows.progress_params(progress, admitted=len(fresh)))
                if cursor.rowcount != 1:
                    raise StoreError(f"occurrence {progress.occurrence!r} does not exist")
            return [d.key for d in fresh]

        return fn

    async def intent_claim_publish(
        self, *, now: float, horizon_s: float, lease_s: float, limit: int
    ) -> list[base.PublishItem]:
        """Lease due ``selected`` intents for publishing, oldest due first."""
        params = {"now": now, "due_by": now + horizon_s, "lease_until": now + lease_s,
                  "limit": limit}

        def fn(conn: sqlite3.Connection) -> list[base.PublishItem]:
            cursor = conn.execute(self._sql["intent_claim_publish"], params)
            return rows.PUBLISH_ITEM.all(cursor.description, cursor)

        items = await self.db.write(fn)
        items.sort(key=lambda item: (item.due_at, item.key))
        return items

    async def intent_extend_publish(self, keys: Sequence[str], *, held_until: float,
                                    lease_until: float) -> list[str]:
        """Extend the publish lease of the keys still held under ``held_until``."""
        if not keys:
            return []
        params = {"keys": json.dumps(list(dict.fromkeys(keys))), "held_until": held_until,
                  "lease_until": lease_until}

        def fn(conn: sqlite3.Connection) -> list[str]:
            cursor = conn.execute(self._sql["intent_extend_publish"], params)
            return [str(row[0]) for row in cursor]

        held = set(await self.db.write(fn))
        return [k for k in dict.fromkeys(keys) if k in held]

    async def intent_release_publish(self, keys: Sequence[str], *, held_until: float) -> None:
        """A no-op: the lease is a column of each intent (marking clears it), so a page
        given up keeps its unmarked rows leased until the lease lapses."""

    async def intent_mark_enqueued(self, keys: Sequence[str], *, now: float) -> int:
        """``selected``/``retryable`` -> ``enqueued`` with an event; returns the count."""
        if not keys:
            return 0
        sql = self._sql
        params = {"keys": json.dumps(list(keys)), "now": now}

        def fn(conn: sqlite3.Connection) -> int:
            events = conn.execute(sql["intent_mark_enqueued_events"], params).rowcount
            moved = conn.execute(sql["intent_mark_enqueued"], params).rowcount
            if moved != events:
                raise StoreError(f"enqueue marked {moved} intents but wrote {events} events")
            return moved

        return await self.db.write(fn)

    # ---------------------------------------------------------------- the worker's hot path

    async def intent_claim_many(self, keys: Sequence[str], *, owner: str, lease_s: float,
                                now: float, message_ids: Sequence[str] | None = None
                                ) -> list[base.Claim]:
        """Claim each key with a lease; one Claim per key, in order (see ``plan_claims``)."""
        keys_json = json.dumps(claim_keys(keys, message_ids))
        if not keys:
            return []
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> list[base.Claim]:
            current = {i.key: i for i in _all(conn, rows.INTENT, sql["intent_claim_read"],
                                              {"keys": keys_json})}
            plan = plan_claims(keys, current, owner=owner, lease_s=lease_s, now=now,
                               message_ids=message_ids)
            if plan.leases:
                expires_at = plan.lease_expires_at
                cursor = conn.executemany(sql["intent_claim"], [
                    (owner, expires_at, now, key, state.value, token)
                    for key, state, token in plan.leases])
                if cursor.rowcount != len(plan.leases):
                    # Impossible under BEGIN IMMEDIATE; refuse rather than hand out a
                    # lease that another writer may also hold.
                    raise StoreError("claim guard failed inside a write transaction")
            conn.executemany(sql["event_insert"], [rows.event_row(e) for e in plan.events])
            return plan.claims

        return await self.db.write(fn)

    async def intent_renew_leases(
        self, leases: Sequence[tuple[str, int]], *, owner: str, lease_s: float, now: float
    ) -> list[str]:
        """Extend live leases held by ``owner``; return the keys whose lease was lost."""
        if not leases:
            return []
        params = {"leases": json.dumps([[key, token] for key, token in leases]),
                  "owner": owner, "now": now, "expires_at": now + lease_s}

        def fn(conn: sqlite3.Connection) -> set[str]:
            return {key for (key,) in conn.execute(self._sql["intent_renew_leases"], params)}

        renewed = await self.db.write(fn)
        return list(dict.fromkeys(key for key, _ in leases if key not in renewed))

    async def intent_apply_many(self, changes: Sequence[base.Change], *, now: float,
                                acks: base.QueueAcks | None = None) -> list[str]:
        """Apply guarded changes in one transaction; return the keys applied (with
        ``acks``, the applied changes' messages are acked in it too)."""
        rows.check_changes(changes, acks)
        if not changes:
            return []
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> list[str]:
            applied: list[str] = []
            events: list[rows.EventRow] = []
            applied_at: list[int] = []
            for i, change in enumerate(changes):
                row = conn.execute(sql["intent_apply"], rows.change_params(change, now)).fetchone()
                if row is None:
                    continue
                channel, attempts = row
                applied.append(change.key)
                events.append(rows.change_event(change, channel=channel, attempts=attempts,
                                                now=now))
                applied_at.append(i)
            conn.executemany(sql["event_insert"], events)
            ids = rows.acked_ids(acks, applied_at)
            if acks is not None and ids:
                conn.execute(sql["message_ack"], {"queue": acks.queue, "ids": json.dumps(ids)})
            return applied

        return await self.db.write(fn)

    async def intent_request_cancel(self, key: str, *, now: float, reason: str) -> State | None:
        """Cancel at once unless claimed (then flag it for the worker); None if unknown."""
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> State | None:
            target = _one(conn, rows.CANCEL_TARGET, sql["intent_cancel_read"], (key,))
            if target is None:
                return None
            plan = rows.cancel_plan(key, target, now=now, reason=reason)
            if plan.change is not None:
                conn.execute(sql["intent_apply"], rows.change_params(plan.change, now))
            if plan.flag:
                conn.execute(sql["intent_cancel_request"], (now, key))
            conn.executemany(sql["event_insert"], rows.cancel_events(plan, target, now=now))
            return plan.state

        return await self.db.write(fn)

    # ---------------------------------------------------------------- how a read runs

    def _array(self, values: Sequence[Any]) -> str:
        return json.dumps(list(values))

    async def _read_all(self, shape: rows.Shape[R], query: str, params: Any = ()) -> list[R]:
        statement = self._sql[query]
        return await self.db.read(lambda conn: _all(conn, shape, statement, params))

    async def _read_one(self, shape: rows.Shape[R], query: str, params: Any = ()) -> R | None:
        statement = self._sql[query]
        return await self.db.read(lambda conn: _one(conn, shape, statement, params))

    async def _read_tuples(self, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
        statement = self._sql[query]
        return await self.db.read(lambda conn: conn.execute(statement, params).fetchall())

    # ---------------------------------------------------------------- events

    async def event_append_many(self, events: Sequence[Event]) -> None:
        if not events:
            return
        params = [rows.event_row(e) for e in events]
        await self.db.write(lambda conn: conn.executemany(self._sql["event_insert"], params))

    # ---------------------------------------------------------------- occurrences

    async def occurrence_open(
        self, *, id: str, campaign: str, logical_at: float, logical_date: str, kind: str,
        now: float,
    ) -> base.Occurrence:
        """Return the occurrence, creating it if new; a replay re-opens one not done.

        ``passes`` counts the openings that leave it admitting.
        """
        sql = self._sql
        params = {"id": id, "campaign": campaign, "logical_at": logical_at,
                  "logical_date": logical_date, "kind": kind, "now": now}

        def fn(conn: sqlite3.Connection) -> base.Occurrence:
            if conn.execute(sql["occurrence_insert"], params).rowcount == 0:
                conn.execute(sql["occurrence_reopen"], {"id": id, "kind": kind})
            # Inserted or present in this transaction: it cannot be absent.
            return rows.present(_one(conn, rows.OCCURRENCE, sql["occurrence_get"], (id,)),
                                f"occurrence {id!r}")

        return await self.db.write(fn)

    async def occurrence_finish(self, id: str, *, now: float, status: str = "done",
                                reason: str | None = None) -> None:
        """Close an occurrence with ``status`` (done or skipped); unknown ids raise."""
        params = {"id": id, "now": now, "status": status, "reason": reason}

        def fn(conn: sqlite3.Connection) -> None:
            if conn.execute(self._sql["occurrence_finish"], params).rowcount != 1:
                raise StoreError(f"occurrence {id!r} does not exist")

        await self.db.write(fn)

    async def occurrence_restart(self, id: str, *, reason: str) -> None:
        """Admit an occurrence again from its first member (unknown ids raise)."""
        params = {"id": id, "reason": reason}

        def fn(conn: sqlite3.Connection) -> None:
            if conn.execute(self._sql["occurrence_restart"], params).rowcount != 1:
                raise StoreError(f"occurrence {id!r} does not exist")

        await self.db.write(fn)

    # ---------------------------------------------------------------- admission switches

    async def switch_set(
        self, *, scope: str, name: str, paused: bool, now: float, reason: str | None = None
    ) -> base.Switch:
        params = {"scope": scope, "name": name, "paused": int(paused), "now": now,
                  "reason": reason}

        def fn(conn: sqlite3.Connection) -> base.Switch:
            # An upsert with RETURNING returns its row.
            return rows.present(_one(conn, rows.SWITCH, self._sql["switch_upsert"], params),
                                f"switch {scope}:{name}")

        return await self.db.write(fn)

    async def switch_trip(self, *, scope: str, name: str, now: float, reason: str
                          ) -> base.Switch | None:
        """Pause unless already paused; the switch if this call paused it, else None."""
        params = {"scope": scope, "name": name, "now": now, "reason": reason}

        def fn(conn: sqlite3.Connection) -> base.Switch | None:
            return _one(conn, rows.SWITCH, self._sql["switch_trip"], params)

        return await self.db.write(fn)

    async def switch_declare(self, *, scope: str, name: str, paused: bool, now: float,
                             reason: str | None = None) -> base.Switch | None:
        """Create a switch in this state unless it exists; the switch if created now."""
        params = {"scope": scope, "name": name, "paused": int(paused), "now": now,
                  "reason": reason}

        def fn(conn: sqlite3.Connection) -> base.Switch | None:
            return _one(conn, rows.SWITCH, self._sql["switch_declare"], params)

        return await self.db.write(fn)

    # ---------------------------------------------------------------- delivery holds

    async def hold_insert(self, *, scope: str, name: str, now: float, by: str,
                          reason: str | None = None) -> base.Hold | None:
        """Hold unless already held; the hold if this call made it, else None."""
        params = {"scope": scope, "name": name, "now": now, "by": by, "reason": reason}

        def fn(conn: sqlite3.Connection) -> base.Hold | None:
            return _one(conn, rows.HOLD, self._sql["hold_insert"], params)

        return await self.db.write(fn)

    async def hold_delete(self, *, scope: str, name: str) -> base.Hold | None:
        """Remove a hold; the hold removed, or None if there was none."""
        params = {"scope": scope, "name": name}

        def fn(conn: sqlite3.Connection) -> base.Hold | None:
            return _one(conn, rows.HOLD, self._sql["hold_delete"], params)

        return await self.db.write(fn)

    # ---------------------------------------------------------------- recipient preferences

    async def preference_set(self, preference: Preference, *, now: float) -> None:
        """Insert or replace the preference of (recipient_id, channel), stamped ``now``."""
        params = rows.preference_params(preference, now=now)
        await self.db.write(lambda conn: conn.execute(self._sql["preference_upsert"], params))

    async def preference_delete(self, recipient_id: str, channel: str) -> bool:
        """Forget a preference; False if there was none."""
        params = {"recipient_id": recipient_id, "channel": channel}

        def fn(conn: sqlite3.Connection) -> bool:
            return conn.execute(self._sql["preference_delete"], params).rowcount > 0

        return await self.db.write(fn)

    async def preferences_for(
        self, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], Preference]:
        """The preferences of many (recipient_id, channel) pairs in one read."""
        if not pairs:
            return {}
        params = {"pairs": json.dumps([[r, c] for r, c in dict.fromkeys(pairs)])}

        found = await self._read_all(rows.PREFERENCE, "preferences_for", params)
        return {(p.recipient_id, p.channel): p for p in found}

    # ---------------------------------------------------------------- pacer state

    async def pacer_transact(
        self, channel: str, fn: Callable[[dict[str, Any] | None], tuple[dict[str, Any], T]]
    ) -> T:
        """Read, transform with ``fn`` and write the channel's pacer state atomically.

        ``fn`` runs on the database thread inside the write transaction, and again if
        the transaction is retried, which is why it must be pure.
        """
        sql = self._sql

        def transact(conn: sqlite3.Connection) -> T:
            (stored,) = conn.execute(sql["pacer_read"], (channel,)).fetchone() or (None,)
            new_state, result = fn(rows.pacer_state(stored))
            conn.execute(sql["pacer_write"], (channel, json.dumps(new_state)))
            return result

        return await self.db.write(transact)

    async def pacer_pause(self, channel: str, until: float) -> None:
        await self.db.write(lambda conn: conn.execute(self._sql["pacer_pause"], (channel, until)))

    # ---------------------------------------------------------------- operator API

    async def api_token_insert(self, token: base.ApiToken) -> None:
        """Store a new token; StoreError if its id exists."""
        params = rows.api_token_params(token)
        await self.db.write(lambda conn: conn.execute(self._sql["api_token_insert"], params))

    async def api_token_revoke(self, id: str, *, now: float) -> base.ApiToken | None:
        """Revoke a token (a second revocation keeps the first time); None if unknown."""
        statement = self._sql["api_token_revoke"]
        return await self.db.write(
            lambda conn: _one(conn, rows.API_TOKEN, statement, {"id": id, "now": now}))

    async def api_signature_claim(self, signature: str, *, now: float,
                                  expires_at: float) -> bool:
        """Record a signature until ``expires_at``; False if already recorded (a replay)."""
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> bool:
            conn.execute(sql["api_signature_prune"], {"now": now})
            cursor = conn.execute(sql["api_signature_insert"],
                                  {"signature": signature, "expires_at": expires_at})
            return cursor.rowcount == 1

        return await self.db.write(fn)

    async def api_trigger_record(self, campaign: str, logical_date: str, *, now: float) -> int:
        """Count one HTTP trigger of an occurrence; return its count so far."""
        params = {"campaign": campaign, "logical_date": logical_date, "now": now}

        def fn(conn: sqlite3.Connection) -> int:
            (count,) = conn.execute(self._sql["api_trigger_record"], params).fetchone()
            return int(count)

        return await self.db.write(fn)

    async def api_idempotency_put(self, record: base.IdempotentResponse, *,
                                  expire_before: float | None = None) -> base.IdempotentResponse:
        """Keep the first answer to a key; return the one stored (this one or an older)."""
        sql = self._sql
        params = rows.idempotent_params(record)

        def fn(conn: sqlite3.Connection) -> base.IdempotentResponse:
            if expire_before is not None:
                conn.execute(sql["api_idempotency_prune"], {"before": expire_before})
            if conn.execute(sql["api_idempotency_insert"], params).rowcount == 1:
                return record
            # The conflicting row is in this transaction: it cannot be absent.
            return rows.present(_one(conn, rows.IDEMPOTENT_RESPONSE, sql["api_idempotency_get"],
                                     (record.key,)), f"idempotency key {record.key!r}")

        return await self.db.write(fn)

    async def api_publish_many(self, writes: Sequence[base.PublishWrite], *, now: float,
                               expire_before: float | None = None, enqueue: bool = False,
                               publish_lease_until: float | None = None
                               ) -> list[base.PublishWritten]:
        """``Store.api_publish_many``: one write transaction for the whole group."""
        if not writes:
            return []
        sql = self._sql
        reserve = json.dumps([[w.key, w.request_hash] for w in writes])

        def fn(conn: sqlite3.Connection) -> list[base.PublishWritten]:
            if expire_before is not None:
                conn.execute(sql["api_idempotency_prune"], {"before": expire_before})
            inserted = conn.execute(sql["api_idempotency_insert_many"], {
                "rows": reserve, "created_at": min(w.created_at for w in writes)}).fetchall()
            owners = base.publish_owners(writes, [(k, h) for k, h in inserted])
            mine = [w for w, own in zip(writes, owners, strict=True) if own]
            created: set[str] = set()
            later = [d for w in mine for d in w.later]
            soon = [d for w in mine for d in w.soon]
            if later:
                created.update(self._admit_fn(later, now=now, publish_lease_until=None,
                                              progress=None, enqueue=False)(conn))
            if soon:
                created.update(self._admit_fn(
                    soon, now=now, publish_lease_until=None if enqueue else publish_lease_until,
                    progress=None, enqueue=enqueue)(conn))
            per_write = base.publish_created(writes, owners, created)
            answers: list[base.PublishWritten] = []
            finish = []
            for write, keys in zip(writes, per_write, strict=True):
                if keys is None:
                    answers.append(base.PublishWritten())
                    continue
                body = write.answer(keys)
                finish.append([write.key, write.request_hash, write.status, body])
                answers.append(base.PublishWritten(created=keys, body=body))
            if finish:
                conn.execute(sql["api_idempotency_finish_many"], {"rows": json.dumps(finish)})
            for i, (write, own) in enumerate(zip(writes, owners, strict=True)):
                if not own:
                    stored = _one(conn, rows.IDEMPOTENT_RESPONSE,
                                    sql["api_idempotency_get"], (write.key,))
                    answers[i] = base.PublishWritten(stored=stored)
            return answers

        return await self.db.write(fn)

    async def api_idempotency_finish(self, key: str, request_hash: str, *, status: int,
                                     body: str) -> bool:
        """Turn this request's reservation into its answer; False if there is none."""
        params = {"key": key, "request_hash": request_hash, "status": status, "body": body}

        def fn(conn: sqlite3.Connection) -> bool:
            return conn.execute(self._sql["api_idempotency_finish"], params).rowcount == 1

        return await self.db.write(fn)

    async def api_idempotency_release(self, key: str, request_hash: str) -> bool:
        """Drop this request's reservation (it was refused, so a retry starts afresh)."""
        params = {"key": key, "request_hash": request_hash}

        def fn(conn: sqlite3.Connection) -> bool:
            return conn.execute(self._sql["api_idempotency_release"], params).rowcount == 1

        return await self.db.write(fn)

    # ---------------------------------------------------------------- provider webhooks

    async def provider_events_record(self, events: Sequence[base.ProviderEvent], *,
                                     now: float) -> base.RecordResult:
        """Record provider events once each, on their intent's timeline or orphaned: one
        lookup and one insert for the whole batch."""
        unique = unique_provider_events(events)
        if not unique:
            return base.RecordResult(duplicates=len(events))
        sql = self._sql
        message_ids = json.dumps(sorted({e.message_id for e in unique}))

        def fn(conn: sqlite3.Connection) -> base.RecordResult:
            owners = {owner.receipt: owner for owner in _all(
                conn, RECEIPT_OWNER, sql["intents_by_receipts"], {"message_ids": message_ids})}
            batch = json.dumps([[e.provider, e.message_id, e.type.value, e.at,
                                 owner_key(owners, e), e.detail] for e in unique])
            inserted = {(p, m, t) for p, m, t in conn.execute(
                sql["provider_events_insert_many"], {"now": now, "events": batch})}
            timeline, result = recorded(events, unique, owners, inserted)
            conn.executemany(sql["event_insert"], timeline)
            return result

        return await self.db.write(fn)

    async def provider_events_adopt(self, *, since: float, limit: int = 1000) -> int:
        """Attach orphans received since ``since`` whose message id is now a receipt."""
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> int:
            adoptions = _all(conn, ADOPTION, sql["provider_events_adopt"],
                             {"since": since, "limit": limit})
            adoptions.sort(key=lambda adoption: (adoption.received_at, adoption.id))
            conn.executemany(sql["event_insert"],
                             [timeline_row(a.event, a.owner) for a in adoptions])
            return len(adoptions)

        return await self.db.write(fn)

    # ---------------------------------------------------------------- retention

    async def retention_prune_batch(self, *, intent_cutoff: float, occurrence_cutoff: float,
                                    limit: int) -> PruneCounts:
        """``Store.retention_prune_batch``: events go row-wise, by key (no partitions)."""
        sql = self._sql
        states = json.dumps(PRUNABLE_STATES)

        def fn(conn: sqlite3.Connection) -> PruneCounts:
            keys = [key for (key,) in conn.execute(sql["retention_prune_intents"], {
                "cutoff": intent_cutoff, "states": states, "limit": limit}).fetchall()]
            events = 0
            if keys:
                events = conn.execute(sql["retention_prune_events"],
                                      {"keys": json.dumps(keys)}).rowcount
            occurrences = conn.execute(sql["retention_prune_occurrences"], {
                "cutoff": occurrence_cutoff, "limit": limit,
                "pending": json.dumps(PENDING_STATES)}).rowcount
            return PruneCounts(intents=len(keys), events=events, occurrences=occurrences)

        return await self.db.write(fn)

    async def retention_count(self, *, intent_cutoff: float, occurrence_cutoff: float
                              ) -> tuple[PruneCounts, float | None]:
        params = {"cutoff": intent_cutoff, "states": json.dumps(PRUNABLE_STATES)}
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> tuple[PruneCounts, float | None]:
            (intents,) = conn.execute(sql["retention_count_intents"], params).fetchone()
            (events,) = conn.execute(sql["retention_count_events"], params).fetchone()
            (occurrences,) = conn.execute(sql["retention_count_occurrences"], {
                "cutoff": occurrence_cutoff, "pending": json.dumps(PENDING_STATES)}).fetchone()
            (oldest,) = conn.execute(sql["retention_oldest_kept"], params).fetchone()
            return (PruneCounts(intents=intents, events=events, occurrences=occurrences),
                    oldest)

        return await self.db.read(fn)

    async def intent_age_span(self) -> tuple[float, float] | None:
        ((oldest, newest),) = await self._read_tuples("intent_age_span")
        return None if oldest is None else (float(oldest), float(newest))
