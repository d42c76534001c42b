"""The ``Ledger`` role on PostgreSQL past admission: the outbox relay's leases, the
worker's claims and changes, cancellation and the events.

Claims read their rows ``FOR UPDATE SKIP LOCKED`` in key order (no deadlock between
claimers of overlapping pages), the core plans them (``claims.plan_claims``), and one
guarded ``UPDATE`` writes the leases; the relay takes due intents ``FOR UPDATE SKIP
LOCKED``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

from tidings.core.claims import claim_keys, plan_claims
from tidings.core.errors import StoreError
from tidings.core.model import Event
from tidings.core.states import State
from tidings.stores import base, rows
from tidings.stores.postgres_base import (
    PostgresBase,
    fetch_all,
    fetch_one,
    insert_events,
    json_rows,
)
from tidings.stores.postgres_db import Conn

#: ``intent_apply`` parameters in the order ``intent_apply_columns`` reads each change.
_APPLY_FIELDS = ("key", "from_state", "to_state", "lease_token", "lease_expired_by",
                 "receipt", "next_attempt_at", "leaves_claimed", "terminal", "reopens",
                 "reason", "count_attempt", "count_failure", "reset_failures",
                 "provider_request_id", "unstarted")


def _apply_columns(params: Sequence[Mapping[str, Any]], now: float) -> dict[str, Any]:
    """``intent_apply`` parameters of many changes as ``intent_apply_columns`` binds
    them: one JSON row per change, in the changes' order."""
    return {"changes": json_rows([p[field] for field in _APPLY_FIELDS] for p in params),
            "now": now}


class PostgresLedger(PostgresBase):
    """The relay's publish leases, the worker's claims, leases and changes, cancelling,
    and appending events."""

    # ---------------------------------------------------------------- the outbox relay

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
                                now: float, message_ids: Sequence[str] | None = None,
                                started: bool = False) -> list[base.Claim]:
        """Claim each key with a lease; one Claim per key, in order (see ``plan_claims``).

        Rows another transaction holds are skipped, not waited for, and claimed as busy.
        """
        unique_keys = claim_keys(keys, message_ids)
        if not keys:
            return []
        sql = self._sql

        async def fn(conn: Conn) -> list[base.Claim]:
            current = {i.key: i for i in await fetch_all(
                conn, rows.INTENT, sql["intent_claim_read"], {"keys": unique_keys})}
            locked: set[str] = set()
            if len(current) < len(unique_keys):
                cur = await conn.execute(sql["intent_existing_keys"], {"keys": unique_keys})
                locked = {key for (key,) in await cur.fetchall()} - current.keys()
            plan = plan_claims(keys, current, owner=owner, lease_s=lease_s, now=now,
                               message_ids=message_ids, locked=locked)
            if plan.leases:
                cur = await conn.execute(sql["intent_claim"], {
                    "owner": owner, "expires_at": plan.lease_expires_at, "now": now,
                    "started": started,
                    "leases": json_rows((lease.key, lease.from_state.value, lease.token)
                                        for lease in plan.leases),
                })
                if cur.rowcount != len(plan.leases):
                    # Impossible while the rows are locked; refuse rather than hand out a
                    # lease that another writer may also hold.
                    raise StoreError("claim guard failed under a row lock")
            await insert_events(conn, sql, [rows.event_row(e) for e in plan.events])
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

    async def intent_mark_started(self, leases: Sequence[tuple[str, int]], *, owner: str,
                                  now: float) -> set[str]:
        """``Ledger.intent_mark_started``: one statement, in key order (as the outcome
        commit locks its keys), so it never waits on a commit in a circle."""
        if not leases:
            return set()
        ordered = sorted(set(leases))
        params = {"keys": [k for k, _ in ordered], "tokens": [t for _, t in ordered],
                  "owner": owner, "now": now}

        async def fn(conn: Conn) -> set[str]:
            cur = await conn.execute(self._sql["intent_mark_started"], params)
            return {key for (key,) in await cur.fetchall()}

        return await self.db.write(fn)

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
            await insert_events(conn, sql, events)
            ids = rows.acked_ids(acks, applied_at)
            if acks is not None and ids:
                await conn.execute(sql["message_ack"], {"queue": acks.queue, "ids": ids})
            return applied

        return await self.db.write(fn)

    async def intent_request_cancel(self, key: str, *, now: float, reason: str) -> State | None:
        """Cancel at once unless claimed (then flag it for the worker); None if unknown."""
        sql = self._sql

        async def fn(conn: Conn) -> State | None:
            target = await fetch_one(conn, rows.CANCEL_TARGET, sql["intent_cancel_read"], (key,))
            if target is None:
                return None
            plan = rows.cancel_plan(key, target, now=now, reason=reason)
            if plan.change is not None:
                await conn.execute(sql["intent_apply"], rows.change_params(plan.change, now))
            if plan.flag:
                await conn.execute(sql["intent_cancel_request"], (now, key))
            await insert_events(conn, sql, rows.cancel_events(plan, target, now=now))
            return plan.state

        return await self.db.write(fn)

    # ---------------------------------------------------------------- events

    async def event_append_many(self, events: Sequence[Event]) -> None:
        if not events:
            return
        params = [rows.event_row(e) for e in events]

        async def fn(conn: Conn) -> None:
            await insert_events(conn, self._sql, params)

        await self.db.write(fn)
