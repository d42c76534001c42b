"""The ``Ledger`` role on SQLite past admission: the outbox relay's leases, the
worker's claims and changes, cancellation and the events. Each batch is one write
transaction (``BEGIN IMMEDIATE``): claims read all their rows at once, the core plans
them (``claims.plan_claims``) and one ``executemany`` writes the leases.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from tidings.core.claims import claim_keys, plan_claims
from tidings.core.errors import StoreError
from tidings.core.model import Event
from tidings.core.states import State
from tidings.stores import base, rows
from tidings.stores.sqlite_base import SqliteBase, fetch_all, fetch_one


class SqliteLedger(SqliteBase):
    """The relay's publish leases, the worker's claims, leases and changes, cancelling,
    and appending events."""

    # ---------------------------------------------------------------- the outbox relay

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
                                now: float, message_ids: Sequence[str] | None = None,
                                started: bool = False) -> list[base.Claim]:
        """Claim each key with a lease; one Claim per key, in order (see ``plan_claims``)."""
        keys_json = json.dumps(claim_keys(keys, message_ids))
        if not keys:
            return []
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> list[base.Claim]:
            current = {i.key: i for i in fetch_all(conn, rows.INTENT, sql["intent_claim_read"],
                                                   {"keys": keys_json})}
            plan = plan_claims(keys, current, owner=owner, lease_s=lease_s, now=now,
                               message_ids=message_ids)
            if plan.leases:
                expires_at = plan.lease_expires_at
                cursor = conn.executemany(sql["intent_claim"], [
                    (owner, expires_at, now, started, key, state.value, token)
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

    async def intent_mark_started(self, leases: Sequence[tuple[str, int]], *, owner: str,
                                  now: float) -> set[str]:
        """``Ledger.intent_mark_started``: one statement over the JSON pairs."""
        if not leases:
            return set()
        params = {"leases": json.dumps([[key, token] for key, token in leases]),
                  "owner": owner, "now": now}

        def fn(conn: sqlite3.Connection) -> set[str]:
            return {key for (key,) in conn.execute(self._sql["intent_mark_started"], params)}

        return await self.db.write(fn)

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
            target = fetch_one(conn, rows.CANCEL_TARGET, sql["intent_cancel_read"], (key,))
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

    # ---------------------------------------------------------------- events

    async def event_append_many(self, events: Sequence[Event]) -> None:
        if not events:
            return
        params = [rows.event_row(e) for e in events]
        await self.db.write(lambda conn: conn.executemany(self._sql["event_insert"], params))
