"""The PostgreSQL store: many processes on many machines share one database.

Same semantics as the SQLite store, method for method (the Store conformance suite
runs unchanged on both); what differs is how concurrency is made safe. SQLite
serializes every writer; here each transaction locks only the rows it decides about:

- admission ``COPY``s a page into a temporary stage, then one statement inserts the
  intents (``ON CONFLICT DO NOTHING RETURNING key``, so the keys returned are exactly
  those this transaction inserted, even when two schedulers admit the same page at
  once) and, for just those, their events and queue messages;
- claims read their rows ``FOR UPDATE SKIP LOCKED`` in key order (no deadlock between
  claimers of overlapping pages), the core plans them (``claims.plan_claims``), and one
  guarded ``UPDATE`` writes the leases;
- the outbox relay takes due intents ``FOR UPDATE SKIP LOCKED``;
- ``pacer_transact`` locks the channel's pacer row (``SELECT … FOR UPDATE``), so one
  pacing budget per channel holds across machines.

The SQL lives in ``stores/sql/postgresql/*.sql``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any, TypeVar, cast

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql as pg_sql

from tidings import retention
from tidings.claims import claim_keys, plan_claims
from tidings.errors import InvalidInput, StoreError
from tidings.model import DraftPage, Event, IntentDraft, message_body, message_body_parts
from tidings.preferences import Preference
from tidings.retention import PRUNABLE_STATES, Partition, PruneCounts, parse_partition
from tidings.states import State
from tidings.stores import base, rows
from tidings.stores.lifecycle import DatabaseStore
from tidings.stores.postgres_db import Conn, PostgresDatabase
from tidings.stores.provider_events import (
    ADOPTION,
    RECEIPT_OWNER,
    owner_key,
    recorded,
    timeline_row,
    unique_provider_events,
)
from tidings.stores.reads import StoreReads

T = TypeVar("T")
R = TypeVar("R")

#: Seconds a pacer transaction may sit idle holding the channel's pacer row before the
#: server ends its session (see ``pacer_lock``): far above the few milliseconds a live
#: client takes between its statements, far below the seconds in which a cut-off
#: client would otherwise be found gone and its session ended.
PACER_IDLE_S = 1.0

#: How long a page's transaction waits for the previous page before rolling back. Two
#: schedulers admitting overlapping pages can wait on each other's rows while each
#: waits for its own previous page, a cycle PostgreSQL cannot see; rolling back after
#: this long breaks it (the page is admitted again from the high-water mark).
PAGE_ORDER_WAIT_S = 10.0
#: The admission inserts by whether the new intents are born enqueued (their messages
#: in the same transaction) or selected; whole names, so each query's user is found.
_ADMIT_PAGE = {False: "intent_admit_page", True: "intent_admit_page_enqueued"}
_ADMIT_FRESH = {False: "intent_admit_fresh", True: "intent_admit_fresh_enqueued"}
_ADMIT_STAGED = {False: "intent_admit_staged", True: "intent_admit_staged_enqueued"}


def _page_copy_text(page: DraftPage) -> str | None:
    """The page's rows as COPY text when no field needs escaping (the usual case), else
    None and psycopg formats them row by row. One join and four scans of the result
    instead of a formatting call per row: this runs for every member admitted."""
    members = page.rows
    text = "".join([f"{c}\t{r}\t{a}\t{d}\n" for c, r, a, d in members])
    if (text.count("\t") == 3 * len(members) and text.count("\n") == len(members)
            and "\\" not in text and "\r" not in text):
        return text
    return None


async def _in_page_order(previous: Awaitable[object]) -> None:
    """Wait for the previous page's write (its failure is this page's failure)."""
    try:
        await asyncio.wait_for(asyncio.shield(previous), timeout=PAGE_ORDER_WAIT_S)
    except TimeoutError:
        raise StoreError(f"the previous page was not written within {PAGE_ORDER_WAIT_S} s; "
                         "this page rolled back and will be admitted again") from None


async def _insert_events(conn: Conn, sql: Mapping[str, str], events: Sequence[Any]) -> None:
    if len(events) == 1:
        await conn.execute(sql["event_insert"], events[0])
    elif events:
        # One statement, its rows one JSON parameter (see event_insert_columns): an
        # executemany would bind and adapt each row's ten parameters in Python on the
        # event loop, and a worker leaves one event per claim and one per outcome.
        await conn.execute(sql["event_insert_columns"], (_json_rows(events),))


#: ``intent_apply`` parameters in the order ``intent_apply_columns`` reads each change.
_APPLY_FIELDS = ("key", "from_state", "to_state", "lease_token", "lease_expired_by",
                 "receipt", "next_attempt_at", "leaves_claimed", "terminal", "reopens",
                 "reason", "count_attempt", "count_failure", "reset_failures",
                 "provider_request_id")


def _json_rows(rows_: Iterable[Sequence[Any]]) -> str:
    """Rows as one JSON array of arrays, the parameter a ``jsonb_array_elements``
    statement reads (encoded in C; NaN and infinities refused here, as JSON has neither)."""
    return json.dumps(list(rows_), allow_nan=False)  # a tuple encodes as an array


def _apply_columns(params: Sequence[Mapping[str, Any]], now: float) -> dict[str, Any]:
    """``intent_apply`` parameters of many changes as ``intent_apply_columns`` binds
    them: one JSON row per change, in the changes' order."""
    return {"changes": _json_rows([p[field] for field in _APPLY_FIELDS] for p in params),
            "now": now}


async def _all(conn: Conn, shape: rows.Shape[R], statement: str, params: Any = None) -> list[R]:
    cur = await conn.execute(statement, params)
    return shape.all(cur.description, await cur.fetchall())


async def _one(conn: Conn, shape: rows.Shape[R], statement: str, params: Any = None) -> R | None:
    cur = await conn.execute(statement, params)
    row = await cur.fetchone()
    return None if row is None else shape.one(cur.description, row)


class PostgresStore(DatabaseStore[PostgresDatabase], StoreReads):
    """The ``Store`` port on one PostgreSQL database (see ``PostgresDatabase``)."""

    concurrent_writers = True

    @classmethod
    async def open(cls, url: str) -> PostgresStore:
        """A store on its own connection pool, from ``postgresql://…``."""
        db = PostgresDatabase.from_url(url)
        await db.open()
        return cls(db)

    # ---------------------------------------------------------------- admission and relay

    async def intent_admit(self, drafts: Sequence[IntentDraft], *, now: float,
                           publish_lease_until: float | None = None,
                           progress: base.OccurrenceProgress | None = None,
                           enqueue: bool = False,
                           progress_after: Awaitable[object] | None = None) -> list[str]:
        """``Store.intent_admit``, pages side by side: with ``progress_after`` this page's
        rows are written while that one's are, and only the occurrence's progress waits
        for it (see ``_admission`` for how a page goes in)."""
        if not drafts and progress is None:
            return []
        fn = self._admission(drafts, now=now, publish_lease_until=publish_lease_until,
                             progress=progress, enqueue=enqueue, progress_after=progress_after)
        return await self.db.write(fn)

    async def intent_admit_in(self, connection: object, drafts: Sequence[IntentDraft], *,
                              now: float, enqueue: bool = False) -> list[str]:
        """``intent_admit`` inside the caller's own transaction on ``connection``.

        ``connection`` is the caller's ``psycopg.AsyncConnection`` to this database.
        The intents (and, with ``enqueue``, their messages) become visible if and only
        if the caller's transaction commits. Inside a transaction the writes sit in a
        savepoint, so a failure here leaves the caller's transaction usable; on an
        autocommit connection outside a transaction they are one transaction of their
        own. There is no retry: the transaction is the caller's. The session gets the
        temporary table ``admit_stage`` (rows kept only until commit), as every
        connection that admits does.
        """
        if not isinstance(connection, psycopg.AsyncConnection):
            raise InvalidInput("connection", "must be a psycopg.AsyncConnection to the "
                               f"store's database, not {type(connection).__name__}")
        if not drafts:
            return []
        conn = cast(Conn, connection)
        fn = self._admission(drafts, now=now, publish_lease_until=None, progress=None,
                             enqueue=enqueue, progress_after=None)
        try:
            async with conn.transaction():
                return await fn(conn)
        except psycopg.Error as exc:
            raise StoreError(f"admission in the caller's transaction failed: {exc}") from exc

    def _admission(self, drafts: Sequence[IntentDraft], *, now: float,
                   publish_lease_until: float | None, progress: base.OccurrenceProgress | None,
                   enqueue: bool, progress_after: Awaitable[object] | None
                   ) -> Callable[[Conn], Awaitable[list[str]]]:
        """The body of one admission transaction (safe to run again: see intent_admit).

        The first try assumes no key exists yet (a scheduler's page past its mark) and
        inserts without ON CONFLICT in a savepoint; a unique_violation rolls back to it
        and the page goes in by ``intent_admit_staged``, which skips existing keys.
        A ``DraftPage`` is staged in its columns; anything else as whole drafts.
        """
        sql = self._sql
        params: dict[str, Any] = {"now": now, "lease_until": publish_lease_until}
        page = drafts if isinstance(drafts, DraftPage) else None
        channels = [] if page is None else [c for c, _, _ in page.channels]
        if page is not None:
            body_head, body_tail = message_body_parts()
            params.update(
                channels=channels,
                prefixes=[p for _, p, _ in page.channels],
                suffixes=[s for _, _, s in page.channels],
                template=page.template, campaign=page.campaign, occurrence=page.occurrence,
                due_at=page.due_at, expires_at=page.expires_at,
                body_head=body_head, body_tail=body_tail)

        def unique_drafts() -> tuple[list[IntentDraft], list[tuple[Any, ...]]]:
            seen: set[str] = set()
            unique: list[IntentDraft] = []
            staged: list[tuple[Any, ...]] = []
            for d in drafts:  # keeps the first of a key drafted twice
                if d.key not in seen:
                    seen.add(d.key)
                    unique.append(d)
                    staged.append((len(staged), d.key, d.channel, d.recipient_id, d.address,
                                 d.template, d.data, d.campaign, d.occurrence, d.due_at,
                                 d.expires_at, message_body(d.key)))
            return unique, staged

        async def copy_rows(cur: Any, create: str, copy_in: str,
                            staged: Sequence[tuple[Any, ...]], text: str | None = None) -> None:
            await cur.execute(sql[create])
            async with cur.copy(sql[copy_in]) as copy:
                if text is not None:
                    await copy.write(text)
                    return
                for row in staged:
                    await copy.write_row(row)

        async def fresh_only(cur: Any, insert: str) -> bool:
            try:
                async with cur.connection.transaction():
                    await cur.execute(sql[insert], params)
                return True
            except pg_errors.UniqueViolation:
                return False  # some keys exist (a replay, a second scheduler)

        async def write(cur: Any) -> tuple[list[str], set[str]]:
            """The new keys, and the queues that got messages."""
            if page is not None:
                await copy_rows(cur, "admit_page_stage_create", "admit_page_stage_copy",
                                page.rows, _page_copy_text(page))
                if await fresh_only(cur, _ADMIT_PAGE[enqueue]):
                    used = {channel for channel, _, _, _ in page.rows}
                    return page.keys(), {channels[i] for i in used}
                unique, staged = unique_drafts()
                await copy_rows(cur, "admit_stage_create", "admit_stage_copy", staged)
            else:
                unique, staged = unique_drafts()
                await copy_rows(cur, "admit_stage_create", "admit_stage_copy", staged)
                if await fresh_only(cur, _ADMIT_FRESH[enqueue]):
                    return [d.key for d in unique], {d.channel for d in unique}
            await cur.execute(sql[_ADMIT_STAGED[enqueue]], params)
            inserted = {key for (key,) in await cur.fetchall()}
            fresh = [d for d in unique if d.key in inserted]
            return [d.key for d in fresh], {d.channel for d in fresh}

        async def fn(conn: Conn) -> list[str]:
            keys: list[str] = []
            queues: set[str] = set()
            if drafts:
                async with conn.cursor() as cur:
                    keys, queues = await write(cur)
            if enqueue:
                for queue in sorted(queues):
                    await conn.execute(sql["queue_notify"], {"queue": queue})
            if progress_after is not None:
                await _in_page_order(progress_after)
            if progress is not None:
                cur = await conn.execute(sql["occurrence_progress"],
                                         rows.progress_params(progress, admitted=len(keys)))
                if cur.rowcount != 1:
                    raise StoreError(f"occurrence {progress.occurrence!r} does not exist")
            return keys

        return fn

    async def intent_claim_publish(
        self, *, now: float, horizon_s: float, lease_s: float, limit: int
    ) -> list[base.PublishItem]:
        """Lease due ``selected`` intents for publishing, oldest due first."""
        params = {"now": now, "due_by": now + horizon_s, "lease_until": now + lease_s,
                  "limit": limit}

        async def fn(conn: Conn) -> list[base.PublishItem]:
            await conn.execute(self._sql["relay_lock"])
            await conn.execute(self._sql["relay_plan"])
            cur = await conn.execute(self._sql["intent_claim_publish"], params)
            return rows.PUBLISH_ITEM.all(cur.description, await cur.fetchall())

        items = await self.db.write(fn)
        items.sort(key=attrgetter("due_at", "key"))  # C-level keys: a page is 5,000
        return items

    async def intent_extend_publish(self, keys: Sequence[str], *, held_until: float,
                                    lease_until: float) -> list[str]:
        """Extend the publish lease of the keys still held under ``held_until``."""
        if not keys:
            return []
        params = {"keys": list(dict.fromkeys(keys)), "held_until": held_until,
                  "lease_until": lease_until}

        async def fn(conn: Conn) -> list[str]:
            await conn.execute(self._sql["relay_lock"])
            await conn.execute(self._sql["relay_probe_plan"])
            cur = await conn.execute(self._sql["intent_extend_publish"], params)
            return [str(row[0]) for row in await cur.fetchall()]

        held = set(await self.db.write(fn))
        return [k for k in dict.fromkeys(keys) if k in held]

    async def intent_release_publish(self, keys: Sequence[str], *, held_until: float) -> None:
        """Take ``keys`` out of the page lease until ``held_until`` that holds them."""
        if not keys:
            return
        params = {"keys": json.dumps(list(dict.fromkeys(keys))), "held_until": held_until}

        async def fn(conn: Conn) -> None:
            await conn.execute(self._sql["relay_lock"])
            await conn.execute(self._sql["intent_release_publish"], params)

        await self.db.write(fn)

    async def intent_mark_enqueued(self, keys: Sequence[str], *, now: float) -> int:
        """``selected``/``retryable`` -> ``enqueued`` with an event; returns the count."""
        if not keys:
            return 0
        params = {"keys": json.dumps(list(dict.fromkeys(keys))), "now": now}

        async def fn(conn: Conn) -> int:
            await conn.execute(self._sql["relay_probe_plan"])
            cur = await conn.execute(self._sql["intent_mark_enqueued"], params)
            return cur.rowcount

        return await self.db.write(fn)

    # ---------------------------------------------------------------- the worker's hot path

    async def intent_claim_many(self, keys: Sequence[str], *, owner: str, lease_s: float,
                                now: float, message_ids: Sequence[str] | None = None
                                ) -> list[base.Claim]:
        """Claim each key with a lease; one Claim per key, in order (see ``plan_claims``).

        Rows another transaction holds are skipped, not waited for, and claimed as busy.
        """
        unique_keys = claim_keys(keys, message_ids)
        if not keys:
            return []
        sql = self._sql

        async def fn(conn: Conn) -> list[base.Claim]:
            current = {i.key: i for i in await _all(conn, rows.INTENT, sql["intent_claim_read"],
                                                    {"keys": unique_keys})}
            locked: set[str] = set()
            if len(current) < len(unique_keys):
                cur = await conn.execute(sql["intent_existing_keys"], {"keys": unique_keys})
                locked = {key for (key,) in await cur.fetchall()} - current.keys()
            plan = plan_claims(keys, current, owner=owner, lease_s=lease_s, now=now,
                               message_ids=message_ids, locked=locked)
            if plan.leases:
                cur = await conn.execute(sql["intent_claim"], {
                    "owner": owner, "expires_at": plan.lease_expires_at, "now": now,
                    "leases": _json_rows((lease.key, lease.from_state.value, lease.token)
                                         for lease in plan.leases),
                })
                if cur.rowcount != len(plan.leases):
                    # Impossible while the rows are locked; refuse rather than hand out a
                    # lease that another writer may also hold.
                    raise StoreError("claim guard failed under a row lock")
            await _insert_events(conn, sql, [rows.event_row(e) for e in plan.events])
            return plan.claims

        return await self.db.write(fn)

    async def intent_renew_leases(
        self, leases: Sequence[tuple[str, int]], *, owner: str, lease_s: float, now: float
    ) -> list[str]:
        """Extend live leases held by ``owner``; return the keys whose lease was lost."""
        if not leases:
            return []
        params = {"keys": [k for k, _ in leases], "tokens": [t for _, t in leases],
                  "owner": owner, "now": now, "expires_at": now + lease_s}

        async def fn(conn: Conn) -> set[str]:
            cur = await conn.execute(self._sql["intent_renew_leases"], params)
            return {key for (key,) in await cur.fetchall()}

        renewed = await self.db.write(fn)
        return list(dict.fromkeys(key for key, _ in leases if key not in renewed))

    async def intent_apply_many(self, changes: Sequence[base.Change], *, now: float,
                                acks: base.QueueAcks | None = None) -> list[str]:
        """Apply guarded changes in one transaction, in order; return the keys applied
        (with ``acks``, the applied changes' messages are acked in it too)."""
        rows.check_changes(changes, acks)
        if not changes:
            return []
        sql = self._sql

        keys = sorted({change.key for change in changes})

        params = [rows.change_params(change, now) for change in changes]

        async def fn(conn: Conn) -> list[str]:
            await conn.execute(sql["intent_lock_keys"], {"keys": keys})
            applied: list[str] = []
            events: list[Any] = []
            results: list[tuple[Any, ...] | None]
            if len(keys) == len(changes) > 1:
                # Distinct keys (a worker's commit): one statement, an array per field,
                # instead of binding each change's parameters on the event loop.
                cur = await conn.execute(sql["intent_apply_columns"],
                                         _apply_columns(params, now))
                found = {ord_: (channel, attempts)
                         for ord_, channel, attempts in await cur.fetchall()}
                results = [found.get(i) for i in range(1, len(changes) + 1)]
            else:
                # One pipelined executemany instead of a round trip per change; the
                # changes still apply in order, so a repeated key meets the guard its
                # twin left.
                cur = conn.cursor()
                await cur.executemany(sql["intent_apply"], params, returning=True)
                results = []
                while True:
                    results.append(await cur.fetchone())
                    if not cur.nextset():
                        break
            applied_at: list[int] = []
            for i, (change, row) in enumerate(zip(changes, results, strict=True)):
                if row is None:
                    continue
                channel, attempts = row
                applied.append(change.key)
                events.append(rows.change_event(change, channel=channel, attempts=attempts,
                                                now=now))
                applied_at.append(i)
            await _insert_events(conn, sql, events)
            ids = rows.acked_ids(acks, applied_at)
            if acks is not None and ids:
                await conn.execute(sql["message_ack"], {"queue": acks.queue, "ids": ids})
            return applied

        return await self.db.write(fn)

    async def intent_request_cancel(self, key: str, *, now: float, reason: str) -> State | None:
        """Cancel at once unless claimed (then flag it for the worker); None if unknown."""
        sql = self._sql

        async def fn(conn: Conn) -> State | None:
            target = await _one(conn, rows.CANCEL_TARGET, sql["intent_cancel_read"], (key,))
            if target is None:
                return None
            plan = rows.cancel_plan(key, target, now=now, reason=reason)
            if plan.change is not None:
                await conn.execute(sql["intent_apply"], rows.change_params(plan.change, now))
            if plan.flag:
                await conn.execute(sql["intent_cancel_request"], (now, key))
            await _insert_events(conn, sql, rows.cancel_events(plan, target, now=now))
            return plan.state

        return await self.db.write(fn)

    # ---------------------------------------------------------------- how a read runs

    def _array(self, values: Sequence[Any]) -> list[Any]:
        return list(values)

    async def _read_tuples(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        async def fn(conn: Conn) -> list[tuple[Any, ...]]:
            cur = await conn.execute(self._sql[query], params)
            return await cur.fetchall()

        return await self.db.read(fn)

    async def _read_all(self, shape: rows.Shape[R], query: str, params: Any = None) -> list[R]:
        statement = self._sql[query]
        return await self.db.read(lambda conn: _all(conn, shape, statement, params))

    async def _read_one(self, shape: rows.Shape[R], query: str, params: Any = None) -> R | None:
        statement = self._sql[query]
        return await self.db.read(lambda conn: _one(conn, shape, statement, params))

    # ---------------------------------------------------------------- events

    async def event_append_many(self, events: Sequence[Event]) -> None:
        if not events:
            return
        params = [rows.event_row(e) for e in events]

        async def fn(conn: Conn) -> None:
            await _insert_events(conn, self._sql, params)

        await self.db.write(fn)

    # ---------------------------------------------------------------- occurrences

    async def occurrence_open(
        self, *, id: str, campaign: str, logical_at: float, logical_date: str, kind: str,
        now: float,
    ) -> base.Occurrence:
        """Return the occurrence, creating it if new; a replay re-opens one not done."""
        sql = self._sql
        params = {"id": id, "campaign": campaign, "logical_at": logical_at,
                  "logical_date": logical_date, "kind": kind, "now": now}

        async def fn(conn: Conn) -> base.Occurrence:
            cur = await conn.execute(sql["occurrence_insert"], params)
            if cur.rowcount == 0:
                await conn.execute(sql["occurrence_reopen"], {"id": id, "kind": kind})
            found = await _one(conn, rows.OCCURRENCE, sql["occurrence_get"], (id,))
            # Inserted or present in this transaction: it cannot be absent.
            return rows.present(found, f"occurrence {id!r}")

        return await self.db.write(fn)

    async def occurrence_finish(self, id: str, *, now: float, status: str = "done",
                                reason: str | None = None) -> None:
        """Close an occurrence with ``status`` (done or skipped); unknown ids raise."""
        params = {"id": id, "now": now, "status": status, "reason": reason}

        async def fn(conn: Conn) -> None:
            cur = await conn.execute(self._sql["occurrence_finish"], params)
            if cur.rowcount != 1:
                raise StoreError(f"occurrence {id!r} does not exist")

        await self.db.write(fn)

    async def occurrence_restart(self, id: str, *, reason: str) -> None:
        """Admit an occurrence again from its first member (unknown ids raise)."""
        params = {"id": id, "reason": reason}

        async def fn(conn: Conn) -> None:
            cur = await conn.execute(self._sql["occurrence_restart"], params)
            if cur.rowcount != 1:
                raise StoreError(f"occurrence {id!r} does not exist")

        await self.db.write(fn)

    # ---------------------------------------------------------------- admission switches

    async def switch_set(
        self, *, scope: str, name: str, paused: bool, now: float, reason: str | None = None
    ) -> base.Switch:
        params = {"scope": scope, "name": name, "paused": paused, "now": now,
                  "reason": reason}

        async def fn(conn: Conn) -> base.Switch:
            found = await _one(conn, rows.SWITCH, self._sql["switch_upsert"], params)
            # An upsert with RETURNING returns its row.
            return rows.present(found, f"switch {scope}:{name}")

        return await self.db.write(fn)

    async def switch_trip(self, *, scope: str, name: str, now: float, reason: str
                          ) -> base.Switch | None:
        """Pause unless already paused; the switch if this call paused it, else None."""
        params = {"scope": scope, "name": name, "now": now, "reason": reason}

        async def fn(conn: Conn) -> base.Switch | None:
            return await _one(conn, rows.SWITCH, self._sql["switch_trip"], params)

        return await self.db.write(fn)

    async def switch_declare(self, *, scope: str, name: str, paused: bool, now: float,
                             reason: str | None = None) -> base.Switch | None:
        """Create a switch in this state unless it exists; the switch if created now."""
        params = {"scope": scope, "name": name, "paused": paused, "now": now,
                  "reason": reason}

        async def fn(conn: Conn) -> base.Switch | None:
            return await _one(conn, rows.SWITCH, self._sql["switch_declare"], params)

        return await self.db.write(fn)

    # ---------------------------------------------------------------- delivery holds

    async def hold_insert(self, *, scope: str, name: str, now: float, by: str,
                          reason: str | None = None) -> base.Hold | None:
        """Hold unless already held; the hold if this call made it, else None."""
        params = {"scope": scope, "name": name, "now": now, "by": by, "reason": reason}

        async def fn(conn: Conn) -> base.Hold | None:
            return await _one(conn, rows.HOLD, self._sql["hold_insert"], params)

        return await self.db.write(fn)

    async def hold_delete(self, *, scope: str, name: str) -> base.Hold | None:
        """Remove a hold; the hold removed, or None if there was none."""
        params = {"scope": scope, "name": name}

        async def fn(conn: Conn) -> base.Hold | None:
            return await _one(conn, rows.HOLD, self._sql["hold_delete"], params)

        return await self.db.write(fn)

    # ---------------------------------------------------------------- recipient preferences

    async def preference_set(self, preference: Preference, *, now: float) -> None:
        """Insert or replace the preference of (recipient_id, channel), stamped ``now``."""
        params = rows.preference_params(preference, now=now)

        async def fn(conn: Conn) -> None:
            await conn.execute(self._sql["preference_upsert"], params)

        await self.db.write(fn)

    async def preference_delete(self, recipient_id: str, channel: str) -> bool:
        """Forget a preference; False if there was none."""
        params = {"recipient_id": recipient_id, "channel": channel}

        async def fn(conn: Conn) -> bool:
            cur = await conn.execute(self._sql["preference_delete"], params)
            return cur.rowcount > 0

        return await self.db.write(fn)

    async def preferences_for(
        self, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], Preference]:
        """The preferences of many (recipient_id, channel) pairs in one read."""
        if not pairs:
            return {}
        found = await self._read_all(rows.PREFERENCE, "preferences_for", {
            "recipients": [r for r, _ in pairs], "channels": [c for _, c in pairs]})
        return {(p.recipient_id, p.channel): p for p in found}

    # ---------------------------------------------------------------- pacer state

    async def pacer_transact(
        self, channel: str, fn: Callable[[dict[str, Any] | None], tuple[dict[str, Any], T]]
    ) -> T:
        """Read, transform with ``fn`` and write the channel's pacer state atomically.

        The row is locked (``SELECT … FOR UPDATE``) from the read to the commit, so
        every process on every machine sees one sequence of states. ``fn`` runs again
        if the transaction is retried, which is why it must be pure.
        """
        sql = self._sql

        lock = {"channel": channel, "idle_ms": str(round(PACER_IDLE_S * 1000))}

        async def transact(conn: Conn) -> T:
            cur = await conn.execute(sql["pacer_lock"], lock)
            row = await cur.fetchone()
            if row is None:  # a new channel: create the row, then lock it
                await conn.execute(sql["pacer_ensure"], (channel,))
                cur = await conn.execute(sql["pacer_lock"], lock)
                row = await cur.fetchone()
            stored = row[0] if row is not None else None
            new_state, result = fn(rows.pacer_state(stored))
            await conn.execute(sql["pacer_write"], (json.dumps(new_state), channel))
            return result

        return await self.db.write(transact)

    async def pacer_pause(self, channel: str, until: float) -> None:
        async def fn(conn: Conn) -> None:
            await conn.execute(self._sql["pacer_pause"], (channel, until))

        await self.db.transaction(fn, block=False)  # one statement: no BEGIN/COMMIT

    # ---------------------------------------------------------------- operator API

    async def _write_rows(self, query: str, params: Any) -> list[tuple[Any, ...]]:
        async def fn(conn: Conn) -> list[tuple[Any, ...]]:
            cur = await conn.execute(self._sql[query], params)
            return await cur.fetchall() if cur.description is not None else []

        return await self.db.write(fn)

    async def api_token_insert(self, token: base.ApiToken) -> None:
        """Store a new token; StoreError if its id exists."""
        await self._write_rows("api_token_insert", rows.api_token_params(token))

    async def api_token_revoke(self, id: str, *, now: float) -> base.ApiToken | None:
        """Revoke a token (a second revocation keeps the first time); None if unknown."""
        statement = self._sql["api_token_revoke"]
        return await self.db.write(
            lambda conn: _one(conn, rows.API_TOKEN, statement, {"id": id, "now": now}))

    async def api_signature_claim(self, signature: str, *, now: float,
                                  expires_at: float) -> bool:
        """Record a signature until ``expires_at``; False if already recorded (a replay)."""
        sql = self._sql

        async def fn(conn: Conn) -> bool:
            await conn.execute(sql["api_signature_prune"], {"now": now})
            cur = await conn.execute(sql["api_signature_insert"],
                                     {"signature": signature, "expires_at": expires_at})
            return cur.rowcount == 1

        return await self.db.write(fn)

    async def api_trigger_record(self, campaign: str, logical_date: str, *, now: float) -> int:
        """Count one HTTP trigger of an occurrence; return its count so far."""
        ((count,),) = await self._write_rows("api_trigger_record", {
            "campaign": campaign, "logical_date": logical_date, "now": now})
        return int(count)

    async def api_idempotency_put(self, record: base.IdempotentResponse, *,
                                  expire_before: float | None = None) -> base.IdempotentResponse:
        """Keep the first answer to a key; return the one stored (this one or an older)."""
        sql = self._sql
        params = rows.idempotent_params(record)

        async def fn(conn: Conn) -> base.IdempotentResponse:
            if expire_before is not None:
                await conn.execute(sql["api_idempotency_prune"], {"before": expire_before})
            cur = await conn.execute(sql["api_idempotency_insert"], params)
            if cur.rowcount == 1:
                return record
            # A concurrent insert of the same key: ON CONFLICT waited for it to commit.
            found = await _one(conn, rows.IDEMPOTENT_RESPONSE, sql["api_idempotency_get"],
                               (record.key,))
            # The conflicting row is committed: it cannot be absent.
            return rows.present(found, f"idempotency key {record.key!r}")

        return await self.db.write(fn)

    async def api_publish_many(self, writes: Sequence[base.PublishWrite], *, now: float,
                               expire_before: float | None = None, enqueue: bool = False,
                               publish_lease_until: float | None = None
                               ) -> list[base.PublishWritten]:
        """``Store.api_publish_many``: the reservations in one insert, the owners'
        intents in one admission per kind (due later, due now), the answers in one
        update, and the stored answers of the rest read back, in one transaction."""
        if not writes:
            return []
        sql = self._sql

        async def fn(conn: Conn) -> list[base.PublishWritten]:
            if expire_before is not None:
                await conn.execute(sql["api_idempotency_prune"], {"before": expire_before})
            cur = await conn.execute(sql["api_idempotency_insert_many"], {
                "keys": [w.key for w in writes], "hashes": [w.request_hash for w in writes],
                "created_at": min(w.created_at for w in writes)})
            owners = base.publish_owners(writes, [(k, h) for k, h in await cur.fetchall()])
            mine = [w for w, own in zip(writes, owners, strict=True) if own]
            created: set[str] = set()
            later = [d for w in mine for d in w.later]
            soon = [d for w in mine for d in w.soon]
            if later:
                created.update(await self._admission(
                    later, now=now, publish_lease_until=None, progress=None, enqueue=False,
                    progress_after=None)(conn))
            if soon:
                if later:
                    await conn.execute(sql["admit_stage_clear"])
                created.update(await self._admission(
                    soon, now=now, publish_lease_until=None if enqueue else publish_lease_until,
                    progress=None, enqueue=enqueue, progress_after=None)(conn))
            per_write = base.publish_created(writes, owners, created)
            answers: list[base.PublishWritten] = []
            finish: list[tuple[str, str, int, str]] = []
            for write, keys in zip(writes, per_write, strict=True):
                if keys is None:
                    answers.append(base.PublishWritten())
                    continue
                body = write.answer(keys)
                finish.append((write.key, write.request_hash, write.status, body))
                answers.append(base.PublishWritten(created=keys, body=body))
            if finish:
                keys_, hashes, statuses, bodies = (list(c) for c in zip(*finish, strict=True))
                await conn.execute(sql["api_idempotency_finish_many"], {
                    "keys": keys_, "hashes": hashes, "statuses": statuses, "bodies": bodies})
            for i, (write, own) in enumerate(zip(writes, owners, strict=True)):
                if not own:
                    stored = await _one(conn, rows.IDEMPOTENT_RESPONSE,
                                    sql["api_idempotency_get"], (write.key,))
                    answers[i] = base.PublishWritten(stored=stored)
            return answers

        return await self.db.write(fn)

    async def _write_count(self, query: str, params: Any) -> int:
        async def fn(conn: Conn) -> int:
            cur = await conn.execute(self._sql[query], params)
            return cur.rowcount

        return await self.db.write(fn)

    async def api_idempotency_finish(self, key: str, request_hash: str, *, status: int,
                                     body: str) -> bool:
        """Turn this request's reservation into its answer; False if there is none."""
        return await self._write_count("api_idempotency_finish", {
            "key": key, "request_hash": request_hash, "status": status, "body": body}) == 1

    async def api_idempotency_release(self, key: str, request_hash: str) -> bool:
        """Drop this request's reservation (it was refused, so a retry starts afresh)."""
        return await self._write_count("api_idempotency_release",
                                        {"key": key, "request_hash": request_hash}) == 1

    # ---------------------------------------------------------------- provider webhooks

    async def provider_events_record(self, events: Sequence[base.ProviderEvent], *,
                                     now: float) -> base.RecordResult:
        """Record provider events once each, on their intent's timeline or orphaned.

        One lookup and one insert for the whole batch; the insert's ``RETURNING`` names
        exactly the events this transaction stored, so of two deliveries of one webhook
        at once, one records and the other counts duplicates.
        """
        unique = unique_provider_events(events)
        if not unique:
            return base.RecordResult(duplicates=len(events))
        sql = self._sql
        message_ids = sorted({e.message_id for e in unique})

        async def fn(conn: Conn) -> base.RecordResult:
            owners = {owner.receipt: owner for owner in await _all(
                conn, RECEIPT_OWNER, sql["intents_by_receipts"], {"message_ids": message_ids})}
            cur = await conn.execute(sql["provider_events_insert_many"], {
                "now": now, "providers": [e.provider for e in unique],
                "message_ids": [e.message_id for e in unique],
                "types": [e.type.value for e in unique], "ats": [e.at for e in unique],
                "keys": [owner_key(owners, e) for e in unique],
                "details": [e.detail for e in unique],
            })
            inserted = {(p, m, t) for p, m, t in await cur.fetchall()}
            timeline, result = recorded(events, unique, owners, inserted)
            await _insert_events(conn, sql, timeline)
            return result

        return await self.db.write(fn)

    async def provider_events_adopt(self, *, since: float, limit: int = 1000) -> int:
        """Attach orphans received since ``since`` whose message id is now a receipt."""
        sql = self._sql

        async def fn(conn: Conn) -> int:
            adoptions = await _all(conn, ADOPTION, sql["provider_events_adopt"],
                                   {"since": since, "limit": limit})
            adoptions.sort(key=lambda adoption: adoption.id)
            await _insert_events(conn, sql, [timeline_row(a.event, a.owner) for a in adoptions])
            return len(adoptions)

        return await self.db.write(fn)

    # ---------------------------------------------------------------- retention

    async def retention_prune_batch(self, *, intent_cutoff: float, occurrence_cutoff: float,
                                    limit: int) -> PruneCounts:
        """``Store.retention_prune_batch``: the events of the default partition go by key;
        a day partition's go with it (dropped whole, or swept: ``retention.prune``), so
        a batch never probes every partition's index for every key."""
        sql = self._sql
        params = {"cutoff": intent_cutoff, "states": list(PRUNABLE_STATES), "limit": limit}

        async def fn(conn: Conn) -> PruneCounts:
            cur = await conn.execute(sql["retention_prune_intents"], params)
            keys = [key for (key,) in await cur.fetchall()]
            events = 0
            if keys:
                cur = await conn.execute(sql["retention_prune_events"], {"keys": keys})
                events = cur.rowcount
            cur = await conn.execute(sql["retention_prune_occurrences"], {
                "cutoff": occurrence_cutoff, "limit": limit,
                "pending": list(retention.PENDING_STATES)})
            return PruneCounts(intents=len(keys), events=events, occurrences=cur.rowcount)

        return await self.db.write(fn)

    async def retention_count(self, *, intent_cutoff: float, occurrence_cutoff: float
                              ) -> tuple[PruneCounts, float | None]:
        params = {"cutoff": intent_cutoff, "states": list(PRUNABLE_STATES)}
        sql = self._sql

        async def scalar(conn: Conn, query: str, values: Any) -> Any:
            cur = await conn.execute(sql[query], values)
            row = await cur.fetchone()
            if row is None:
                return None
            (value,) = row  # one column: the count or the time asked for
            return value

        async def fn(conn: Conn) -> tuple[PruneCounts, float | None]:
            counts = PruneCounts(
                intents=await scalar(conn, "retention_count_intents", params),
                events=await scalar(conn, "retention_count_events", params),
                occurrences=await scalar(conn, "retention_count_occurrences", {
                    "cutoff": occurrence_cutoff, "pending": list(retention.PENDING_STATES)}))
            return counts, await scalar(conn, "retention_oldest_kept", params)

        return await self.db.read(fn)

    async def intent_age_span(self) -> tuple[float, float] | None:
        ((oldest, newest),) = await self._read_tuples("intent_age_span")
        return None if oldest is None else (float(oldest), float(newest))

    # ---- the events table's day partitions (base.PartitionedEvents)

    def _ddl(self, query: str, name: str, **literals: float) -> pg_sql.Composed:
        return pg_sql.SQL(self._sql[query]).format(
            name=pg_sql.Identifier(name), **{k: pg_sql.Literal(v) for k, v in literals.items()})

    async def _locked(self, conn: Conn) -> bool:
        cur = await conn.execute(self._sql["event_partition_lock"])
        (locked,) = await cur.fetchone() or (False,)
        if locked:
            await conn.execute(self._sql["event_partition_lock_timeout"])
        return bool(locked)

    async def event_partitions(self) -> list[Partition]:
        found = [parse_partition(name) for (name,) in await self._read_tuples("event_partitions")]
        return sorted(p for p in found if p is not None)

    async def event_partition_create(self, name: str, lower: float, upper: float) -> bool:
        sql = self._sql

        async def fn(conn: Conn) -> bool:
            if not await self._locked(conn):
                return False
            if name in {n for (n,) in await (await conn.execute(
                    sql["event_partitions"])).fetchall()}:
                return False
            cur = await conn.execute(sql["event_default_has_range"],
                                     {"lower": lower, "upper": upper})
            (busy,) = await cur.fetchone() or (True,)
            if busy:  # creating it would fail: those rows stay in the default
                return False
            await conn.execute(self._ddl("event_partition_create", name, lower=lower,
                                         upper=upper))
            return True

        return await self.db.write(fn)

    async def event_partitions_detached(self) -> list[str]:
        return [name for (name,) in await self._read_tuples("event_partitions_detached")]

    async def event_partition_drop(self, name: str, *, intent_types: Sequence[str]
                                   ) -> int | None:
        """Two transactions, so the table's lock is held only for the detach itself: the
        detach, then (with no lock on the events table) the count, the copy of events
        of no intent and the drop. A prune that stops between them leaves a detached
        table that the next one finishes (``event_partitions_detached``)."""
        sql = self._sql
        types = list(intent_types)

        async def detach(conn: Conn) -> bool:
            if not await self._locked(conn):
                return False
            attached = {n for (n,) in await (await conn.execute(
                sql["event_partitions"])).fetchall()}
            if name in attached:
                await conn.execute(self._ddl("event_partition_detach", name))
            return True

        async def drop(conn: Conn) -> int | None:
            if not await self._locked(conn):
                return None
            detached = {n for (n,) in await (await conn.execute(
                sql["event_partitions_detached"])).fetchall()}
            if name not in detached:
                return None
            cur = await conn.execute(self._ddl("event_partition_count", name), {"types": types})
            total, kept = await cur.fetchone() or (0, 0)
            if kept:
                await conn.execute(self._ddl("event_partition_rescue", name), {"types": types})
            await conn.execute(self._ddl("event_partition_drop", name))
            return int(total) - int(kept)

        if not await self.db.write(detach):
            return None
        return await self.db.write(drop)

    async def event_orphans_delete(self, name: str, *, before: float,
                                   intent_types: Sequence[str], limit: int) -> int:
        statement = self._ddl("event_orphans_delete", name)
        params = {"before": before, "types": list(intent_types), "limit": limit}

        async def fn(conn: Conn) -> int:
            cur = await conn.execute(statement, params)
            return cur.rowcount

        return await self.db.write(fn)
