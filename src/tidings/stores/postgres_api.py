"""The operator API's records (``ApiRecords``) and the provider webhooks' events
(``WebhookRecords``) on PostgreSQL. ``api_publish_many`` admits its intents by the
admission's own transaction body, so this mixin stands on ``PostgresAdmission``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidings.core.suppression import SuppressionRules
from tidings.stores import base, rows
from tidings.stores.postgres_admission import PostgresAdmission
from tidings.stores.postgres_base import fetch_all, fetch_one, insert_events
from tidings.stores.postgres_db import Conn
from tidings.stores.postgres_suppressions import count_strikes, suppress_in
from tidings.stores.provider_events import (
    ADOPTION,
    RECEIPT_OWNER,
    Identity,
    Move,
    ReceiptOwner,
    attached,
    moves,
    owner_key,
    recorded,
    timeline_rows,
    unique_provider_events,
)
from tidings.stores.suppression_batches import from_reports


class PostgresApi(PostgresAdmission):
    """API tokens, signatures, triggers and idempotent answers; provider events."""

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
            lambda conn: fetch_one(conn, rows.API_TOKEN, statement, {"id": id, "now": now}))

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
            found = await fetch_one(conn, rows.IDEMPOTENT_RESPONSE, sql["api_idempotency_get"],
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
                    stored = await fetch_one(conn, rows.IDEMPOTENT_RESPONSE,
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
                                     now: float, rules: SuppressionRules | None = None
                                     ) -> base.RecordResult:
        """Record provider events once each, on their intent's timeline or orphaned,
        with their moves and suppressions, in one transaction.

        One lookup and one insert for the whole batch; the insert's ``RETURNING`` names
        exactly the events this transaction stored, so of two deliveries of one webhook
        at once, one records (and moves, and suppresses) and the other counts duplicates.
        """
        unique = unique_provider_events(events)
        if not unique:
            return base.RecordResult(duplicates=len(events))
        sql = self._sql
        message_ids = sorted({e.message_id for e in unique})
        policy = rules if rules is not None else SuppressionRules()

        async def fn(conn: Conn) -> base.RecordResult:
            owners = {owner.receipt: owner for owner in await fetch_all(
                conn, RECEIPT_OWNER, sql["intents_by_receipts"], {"message_ids": message_ids})}
            cur = await conn.execute(sql["provider_events_insert_many"], {
                "now": now, "providers": [e.provider for e in unique],
                "message_ids": [e.message_id for e in unique],
                "types": [e.type.value for e in unique], "ats": [e.at for e in unique],
                "keys": [owner_key(owners, e) for e in unique],
                "details": [e.detail for e in unique], "bounces": [e.bounce for e in unique],
            })
            inserted = {(p, m, t) for p, m, t in await cur.fetchall()}
            joined = attached(unique, owners, inserted)
            moved = await self._report_moves(conn, moves(joined), now)
            timeline, result = recorded(events, unique, owners, inserted, moved)
            await insert_events(conn, sql, timeline)
            suppressed = await self._suppress_reported(conn, joined, policy, now)
            return base.RecordResult(recorded=result.recorded, duplicates=result.duplicates,
                                     orphaned=result.orphaned, moved=result.moved,
                                     suppressed=suppressed)

        return await self.db.write(fn)

    async def _suppress_reported(self, conn: Conn,
                                 joined: Sequence[tuple[base.ProviderEvent, ReceiptOwner]],
                                 policy: SuppressionRules, now: float) -> int:
        """The suppressions of hard bounces, complaints and soft bounces past the limit,
        written in the caller's transaction; how many addresses were added."""
        entries, strikes = from_reports(joined, policy, now)
        more = await count_strikes(conn, self._sql, strikes, policy, now)
        added = await suppress_in(conn, self._sql, entries + more, now)
        return len(added)

    async def _report_moves(self, conn: Conn, planned: Sequence[Move], now: float
                            ) -> dict[Identity, str]:
        """The moves provider reports make, as one pipelined run of guarded updates
        applied in order (a report after another on one intent meets the state its
        predecessor left); the state each report that moved its intent moved it to."""
        if not planned:
            return {}
        cur = conn.cursor()
        await cur.executemany(self._sql["intent_report_move"], [
            {"key": m.key, "to_state": m.move.to.value, "now": now,
             "sources": [state.value for state in sorted(m.move.sources)]} for m in planned],
            returning=True)
        moved: dict[Identity, str] = {}
        for planned_move in planned:
            row = await cur.fetchone()
            if row is not None:
                moved[planned_move.event] = str(row[0])
            cur.nextset()
        return moved

    async def provider_events_adopt(self, *, since: float, limit: int = 1000,
                                    now: float | None = None,
                                    rules: SuppressionRules | None = None) -> int:
        """Attach orphans received since ``since`` whose message id is now a receipt,
        moving their intents and suppressing as the reports say (at ``now``)."""
        sql = self._sql
        policy = rules if rules is not None else SuppressionRules()

        async def fn(conn: Conn) -> int:
            adoptions = await fetch_all(conn, ADOPTION, sql["provider_events_adopt"],
                                        {"since": since, "limit": limit})
            adoptions.sort(key=lambda adoption: adoption.id)
            joined = [(a.event, a.owner) for a in adoptions]
            when = since if now is None else now
            moved = await self._report_moves(conn, moves(joined), when)
            await insert_events(conn, sql, timeline_rows(joined, moved))
            await self._suppress_reported(conn, joined, policy, when)
            return len(adoptions)

        return await self.db.write(fn)
