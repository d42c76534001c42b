"""The operator API's records (``ApiRecords``) and the provider webhooks' events
(``WebhookRecords``) on SQLite. ``api_publish_many`` admits its intents by the
admission's own transaction body, so this mixin stands on ``SqliteAdmission``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace

from tidings.core.suppression import SuppressionRules
from tidings.stores import base, rows
from tidings.stores import provider_events as pe
from tidings.stores import suppression_batches as sb
from tidings.stores.sqlite_admission import SqliteAdmission
from tidings.stores.sqlite_base import fetch_all, fetch_one
from tidings.stores.sqlite_suppressions import strike, suppress


class SqliteApi(SqliteAdmission):
    """API tokens, signatures, triggers and idempotent answers; provider events."""

    # ---------------------------------------------------------------- operator API

    async def api_token_insert(self, token: base.ApiToken) -> None:
        """Store a new token; StoreError if its id exists."""
        params = rows.api_token_params(token)
        await self.db.write(lambda conn: conn.execute(self._sql["api_token_insert"], params))

    async def api_token_revoke(self, id: str, *, now: float) -> base.ApiToken | None:
        """Revoke a token (a second revocation keeps the first time); None if unknown."""
        statement = self._sql["api_token_revoke"]
        return await self.db.write(
            lambda conn: fetch_one(conn, rows.API_TOKEN, statement, {"id": id, "now": now}))

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
            return rows.present(fetch_one(conn, rows.IDEMPOTENT_RESPONSE,
                                          sql["api_idempotency_get"], (record.key,)),
                                f"idempotency key {record.key!r}")

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
                    stored = fetch_one(conn, rows.IDEMPOTENT_RESPONSE,
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
                                     now: float, rules: SuppressionRules | None = None
                                     ) -> base.RecordResult:
        """Record provider events once each, on their intent's timeline or orphaned: one
        lookup and one insert for the whole batch; their moves and suppressions in the
        same transaction."""
        unique = pe.unique_provider_events(events)
        if not unique:
            return base.RecordResult(duplicates=len(events))
        sql = self._sql
        message_ids = json.dumps(sorted({e.message_id for e in unique}))
        rules = rules or SuppressionRules()

        def fn(conn: sqlite3.Connection) -> base.RecordResult:
            owners = {owner.receipt: owner for owner in fetch_all(
                conn, pe.RECEIPT_OWNER, sql["intents_by_receipts"], {"message_ids": message_ids})}
            batch = json.dumps([[e.provider, e.message_id, e.type.value, e.at,
                                 pe.owner_key(owners, e), e.detail, e.bounce] for e in unique])
            inserted = {(p, m, t) for p, m, t in conn.execute(
                sql["provider_events_insert_many"], {"now": now, "events": batch})}
            joined = pe.attached(unique, owners, inserted)
            moved = self._report_moves(conn, pe.moves(joined), now)
            timeline, result = pe.recorded(events, unique, owners, inserted, moved)
            conn.executemany(sql["event_insert"], timeline)
            return replace(result, suppressed=self._report_suppressions(conn, joined, rules,
                                                                        now))

        return await self.db.write(fn)

    def _report_suppressions(self, conn: sqlite3.Connection,
                             joined: Sequence[tuple[base.ProviderEvent, pe.ReceiptOwner]],
                             rules: SuppressionRules, now: float) -> int:
        """Suppress what hard bounces, complaints and enough soft bounces say; how many
        addresses were added."""
        entries, strikes = sb.from_reports(joined, rules, now)
        counted = strike(conn, self._sql, strikes, rules, now)
        return len(suppress(conn, self._sql, [*entries, *counted], now))

    def _report_moves(self, conn: sqlite3.Connection, planned: Sequence[pe.Move],
                      now: float) -> dict[pe.Identity, str]:
        """Apply the moves provider reports make, one guarded update each, in order;
        the state each report that moved its intent moved it to."""
        statement = self._sql["intent_report_move"]
        moved: dict[pe.Identity, str] = {}
        for planned_move in planned:
            row = conn.execute(statement, {
                "key": planned_move.key, "to_state": planned_move.move.to.value, "now": now,
                "sources": json.dumps(sorted(planned_move.move.sources))}).fetchone()
            if row is not None:
                moved[planned_move.event] = str(row[0])
        return moved

    async def provider_events_adopt(self, *, since: float, limit: int = 1000,
                                    now: float | None = None,
                                    rules: SuppressionRules | None = None) -> int:
        """Attach orphans received since ``since`` whose message id is now a receipt,
        moving their intents and suppressing as the reports say (at ``now``)."""
        sql = self._sql
        at = since if now is None else now

        def fn(conn: sqlite3.Connection) -> int:
            adoptions = fetch_all(conn, pe.ADOPTION, sql["provider_events_adopt"],
                                  {"since": since, "limit": limit})
            adoptions.sort(key=lambda adoption: (adoption.received_at, adoption.id))
            joined = [(a.event, a.owner) for a in adoptions]
            moved = self._report_moves(conn, pe.moves(joined), at)
            conn.executemany(sql["event_insert"], pe.timeline_rows(joined, moved))
            self._report_suppressions(conn, joined, rules or SuppressionRules(), at)
            return len(adoptions)

        return await self.db.write(fn)
