"""The SQLite store: the embedded default, one file, any number of local processes.

Every batch method is one write transaction (``BEGIN IMMEDIATE``) on the
database thread, and set-based where it can be: admission is a multi-row insert,
enqueue marking is one event insert and one update over a JSON list of keys, claims
read all their rows at once and write with one ``executemany``. The SQL lives in
``stores/sql/sqlite/*.sql``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from tidings.claims import claim_kind, redelivery_event
from tidings.errors import StoreError
from tidings.model import Event, Intent, IntentDraft, message_body
from tidings.preferences import Preference
from tidings.states import CLAIMABLE, TERMINAL, State, check
from tidings.stores.base import (
    ApiToken,
    Change,
    Claim,
    ClaimKind,
    IdempotentResponse,
    IntentSummary,
    LatencyHistogram,
    Occurrence,
    OccurrenceProgress,
    OutcomeCount,
    ProviderEvent,
    ProviderEventCount,
    ProviderEventType,
    PublishItem,
    RecordResult,
    StoredProviderEvent,
    Switch,
)
from tidings.stores.sqlite_db import SqliteDatabase, insert_messages

T = TypeVar("T")

#: One row of the multi-row admission insert: the ten draft columns.
_DRAFT_ROW = "(?,?,?,?,?,?,?,?,?,?)"
#: Rows per admission statement: 10,000 variables, well under SQLite's 32,766, and one
#: statement text (so one cached prepared statement) for every full chunk.
_ADMIT_CHUNK = 1000
_EventRow = tuple[
    str, str, str, float, str | None, int | None, str | None, str | None, str | None, str | None
]


def _intent(row: Sequence[Any]) -> Intent:
    """An ``Intent`` from a row in the column order of the ``intent_get`` query."""
    return Intent(
        key=row[0], channel=row[1], recipient_id=row[2], address=row[3], template=row[4],
        data=row[5], campaign=row[6], occurrence=row[7], state=State(row[8]), due_at=row[9],
        expires_at=row[10], created_at=row[11], updated_at=row[12], selected_at=row[13],
        enqueued_at=row[14], accepted_at=row[15], finished_at=row[16], attempts=row[17],
        failures=row[18], lease_owner=row[19], lease_token=row[20], lease_expires_at=row[21],
        next_attempt_at=row[22], receipt=row[23], provider_request_id=row[24],
        disposition=row[25], reason=row[26], cancel_requested=bool(row[27]),
    )


def _occurrence(row: Sequence[Any]) -> Occurrence:
    return Occurrence(
        id=row[0], campaign=row[1], logical_at=row[2], logical_date=row[3], kind=row[4],
        status=row[5], high_water=row[6], members=row[7], admitted=row[8], skipped=row[9],
        passes=row[10], created_at=row[11], finished_at=row[12], reason=row[13],
    )


def _switch(row: Sequence[Any]) -> Switch:
    return Switch(scope=row[0], name=row[1], paused=bool(row[2]), changed_at=row[3],
                  reason=row[4])


def _api_token(row: Sequence[Any]) -> ApiToken:
    return ApiToken(id=row[0], name=row[1], scopes=tuple(row[2].split()), secret_hash=row[3],
                    created_at=row[4], revoked_at=row[5], expires_at=row[6])


def _api_token_params(token: ApiToken) -> dict[str, Any]:
    return {"id": token.id, "name": token.name, "scopes": " ".join(token.scopes),
            "secret_hash": token.secret_hash, "created_at": token.created_at,
            "revoked_at": token.revoked_at, "expires_at": token.expires_at}


def _idempotent(row: Sequence[Any]) -> IdempotentResponse:
    return IdempotentResponse(key=row[0], request_hash=row[1], status=row[2], body=row[3],
                              created_at=row[4])


def _summary(row: Sequence[Any]) -> IntentSummary:
    return IntentSummary(
        campaign=row[0], channel=row[1], total=row[2], backlog=row[3], scheduled=row[4],
        claimed=row[5], retryable=row[6], uncertain=row[7], accepted=row[8],
        accepted_in_time=row[9], accepted_recent=row[10], expired=row[11], dead=row[12],
        rejected=row[13], cancelled=row[14], overdue=row[15],
        oldest_due_at=None if row[16] is None else float(row[16]),
        earliest_expiry=None if row[17] is None else float(row[17]))


def _histograms(bounds: Sequence[float],
                rows: Sequence[Sequence[Any]]) -> list[LatencyHistogram]:
    """Fold ``(channel, bucket or None, count, sum)`` rows into one histogram per channel."""
    per: dict[str, tuple[list[int], list[float]]] = {}
    for channel, bucket, count, total in rows:
        counts, sums = per.setdefault(channel, ([0] * (len(bounds) + 1), [0.0]))
        counts[len(bounds) if bucket is None else int(bucket)] += int(count)
        sums[0] += float(total or 0.0)
    return [LatencyHistogram(channel=channel, bounds=tuple(bounds), counts=tuple(counts),
                             sum=sums[0], count=sum(counts))
            for channel, (counts, sums) in sorted(per.items())]


def _event_row(e: Event) -> _EventRow:
    return (e.key, e.channel, e.type, e.at, e.state, e.attempt, e.worker, e.message_id,
            e.provider_request_id, e.detail)


def _insert_events(
    conn: sqlite3.Connection, sql: Mapping[str, str], by_channel: dict[str, list[str]],
    *, type: str, state: str, at: float, attempt: int = 0,
) -> None:
    """One event per key, one statement per channel.

    A JSON key list bound once is about twice as fast as an ``executemany`` of one
    row per key, and a page of admissions has one or two channels.
    """
    for channel, keys in by_channel.items():
        conn.execute(sql["event_insert_keys"], {
            "keys": json.dumps(keys), "channel": channel, "type": type, "at": at,
            "state": state, "attempt": attempt,
        })


def _change_params(change: Change, now: float) -> dict[str, Any]:
    """Bind one change to ``intent_apply``, deciding its field effects from ``states``."""
    to_terminal = change.to_state in TERMINAL
    return {
        "key": change.key,
        "from_state": change.from_state.value,
        "to_state": change.to_state.value,
        "lease_token": change.lease_token,
        "lease_expired_by": change.lease_expired_by,
        "now": now,
        "receipt": change.receipt,
        "next_attempt_at": change.next_attempt_at,
        "leaves_claimed": int(change.from_state is State.CLAIMED
                              and change.to_state is not State.CLAIMED),
        "terminal": int(to_terminal),
        # An operator's redrive (dead -> retryable) makes the intent live again.
        "reopens": int(change.from_state in TERMINAL and not to_terminal),
        "reason": change.reason,
        "count_attempt": int(change.count_attempt),
        "count_failure": int(change.count_failure),
        "reset_failures": int(change.reset_failures),
        "provider_request_id": change.provider_request_id,
    }


def _stored_provider_event(row: Sequence[Any]) -> StoredProviderEvent:
    """A ``StoredProviderEvent`` from a row in the ``provider_events_orphaned`` order."""
    return StoredProviderEvent(provider=row[0], message_id=row[1],
                               type=ProviderEventType(row[2]), at=float(row[3]),
                               detail=row[4], key=row[5], received_at=float(row[6]))


def unique_provider_events(events: Sequence[ProviderEvent]) -> list[ProviderEvent]:
    """The first of each (provider, message id, type): a repeat in one batch is a
    duplicate, as it would be in the next batch."""
    seen: set[tuple[str, str, str]] = set()
    unique: list[ProviderEvent] = []
    for event in events:
        identity = (event.provider, event.message_id, event.type.value)
        if identity not in seen:
            seen.add(identity)
            unique.append(event)
    return unique


def adopted_event(row: Sequence[Any]) -> ProviderEvent:
    """The event of a ``provider_events_adopt(able)`` row (id, provider, message_id,
    type, at, detail, …)."""
    return ProviderEvent(provider=row[1], message_id=row[2], type=ProviderEventType(row[3]),
                         at=float(row[4]), detail=row[5])


def provider_timeline_row(event: ProviderEvent, key: str, channel: str, state: str,
                          attempts: int | None) -> _EventRow:
    """The timeline event of a provider event attached to intent ``key``: its state
    and attempts as they are (a provider event changes neither)."""
    return (key, channel, event.timeline_type, event.at, state, attempts, None, None, None,
            event.timeline_detail)


class SqliteStore:
    """The ``Store`` port on one SQLite file (see ``SqliteDatabase`` for concurrency)."""

    concurrent_writers = False

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db
        self.url = db.url
        self._sql: Mapping[str, str] = db.sql
        db.retain()

    @classmethod
    async def open(cls, url: str) -> SqliteStore:
        """A store on its own database connection, from ``sqlite:///path.db``."""
        return cls(SqliteDatabase.from_url(url))

    # ---------------------------------------------------------------- lifecycle

    async def migrate(self) -> list[int]:
        """Apply pending migrations; return the versions applied now."""
        return await self.db.migrate()

    async def schema_version(self) -> int:
        return await self.db.schema_version()

    async def check_schema(self) -> None:
        """Raise SchemaOutOfDate when migrations are pending."""
        await self.db.check_schema()

    async def close(self) -> None:
        """Release the database; it closes when no other adapter still uses it."""
        await self.db.release()

    # ---------------------------------------------------------------- admission and relay

    async def intent_admit(
        self,
        drafts: Sequence[IntentDraft],
        *,
        now: float,
        publish_lease_until: float | None = None,
        progress: OccurrenceProgress | None = None,
        enqueue: bool = False,
        progress_after: Awaitable[object] | None = None,
    ) -> list[str]:
        """Insert intents as ``selected`` (existing keys untouched); return the new keys.

        With ``enqueue`` the new intents' messages go into this database's queue in the
        same transaction and the intents are born ``enqueued``. SQLite has one writer:
        ``progress_after`` is simply awaited first.
        """
        if progress_after is not None:
            await progress_after
        if not drafts and progress is None:
            return []
        sql = self._sql
        insert = sql["intent_insert_many_enqueued" if enqueue else "intent_insert_many"]
        head = (now, now, now, now if enqueue else publish_lease_until)
        # A DraftPage makes its drafts on demand: make them once, here, not on the
        # database thread each time they are read.
        drafts = list(drafts)
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
                for queue, rows in rows_by_queue.items():
                    insert_messages(conn, sql, queue, rows, now=now)
            else:
                _insert_events(conn, sql, by_channel, type="selected", state="selected", at=now)
            if progress is not None:
                cursor = conn.execute(sql["occurrence_progress"], {
                    "id": progress.occurrence, "high_water": progress.high_water,
                    "after": progress.after,
                    "members": progress.members, "admitted": len(fresh),
                    "skipped": progress.skipped,
                })
                if cursor.rowcount != 1:
                    raise StoreError(f"occurrence {progress.occurrence!r} does not exist")
            return [d.key for d in fresh]

        return await self.db.write(fn)

    async def intent_claim_publish(
        self, *, now: float, horizon_s: float, lease_s: float, limit: int
    ) -> list[PublishItem]:
        """Lease due ``selected`` intents for publishing, oldest due first."""
        params = {"now": now, "due_by": now + horizon_s, "lease_until": now + lease_s,
                  "limit": limit}

        def fn(conn: sqlite3.Connection) -> list[tuple[str, str, float, str]]:
            return conn.execute(self._sql["intent_claim_publish"], params).fetchall()

        rows = await self.db.write(fn)
        rows.sort(key=lambda r: (r[2], r[0]))
        # float(): RETURNING hands back a whole REAL as the integer SQLite stored it as.
        return [PublishItem(key=k, channel=c, due_at=float(d), state=State(s))
                for k, c, d, s in rows]

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

    async def intent_claim_many(
        self,
        keys: Sequence[str],
        *,
        owner: str,
        lease_s: float,
        now: float,
        message_ids: Sequence[str] | None = None,
    ) -> list[Claim]:
        """Claim each key with a lease; one Claim per key, in order."""
        if message_ids is not None and len(message_ids) != len(keys):
            raise ValueError("message_ids must pair one to one with keys")
        if not keys:
            return []
        sql = self._sql
        lease_expires_at = now + lease_s
        keys_json = json.dumps(list(dict.fromkeys(keys)))

        def fn(conn: sqlite3.Connection) -> list[Claim]:
            current = {row[0]: row for row in conn.execute(sql["intent_claim_read"],
                                                           {"keys": keys_json})}
            claimed_now: dict[str, Claim] = {}
            updates: list[tuple[str, float, float, str, str, int]] = []
            events: list[_EventRow] = []
            claims: list[Claim] = []
            for i, key in enumerate(keys):
                message_id = message_ids[i] if message_ids is not None else None
                row = current.get(key)
                if key in claimed_now:
                    # The second copy of a key claimed by this very call.
                    claims.append(Claim(key=key, kind=ClaimKind.BUSY, state=State.CLAIMED,
                                        retry_at=lease_expires_at))
                    continue
                if row is None:
                    claims.append(Claim(key=key, kind=ClaimKind.MISSING))
                    continue
                state = State(row[8])
                kind, retry_at = claim_kind(state, next_attempt_at=row[22],
                                            lease_expires_at=row[21], now=now)
                if kind is ClaimKind.CLAIMED:
                    intent = replace(
                        _intent(row), state=State.CLAIMED, lease_owner=owner,
                        lease_token=row[20] + 1, lease_expires_at=lease_expires_at,
                        attempts=row[17] + 1, updated_at=now,
                    )
                    updates.append((owner, lease_expires_at, now, key, state.value, row[20]))
                    events.append((key, row[1], "claimed", now, "claimed", intent.attempts,
                                   owner, message_id, None, None))
                    claim = Claim(key=key, kind=ClaimKind.CLAIMED, intent=intent,
                                  token=intent.lease_token, state=State.CLAIMED)
                    claimed_now[key] = claim
                else:
                    if kind is ClaimKind.DONE:
                        events.append((key, row[1], redelivery_event(state), now,
                                       state.value, row[17], owner, message_id, None,
                                       None))
                    claim = Claim(key=key, kind=kind, state=state, retry_at=retry_at)
                claims.append(claim)
            if updates:
                cursor = conn.executemany(sql["intent_claim"], updates)
                if cursor.rowcount != len(updates):
                    # Impossible under BEGIN IMMEDIATE; refuse rather than hand out a
                    # lease that another writer may also hold.
                    raise StoreError("claim guard failed inside a write transaction")
            conn.executemany(sql["event_insert"], events)
            return claims

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

    async def intent_apply_many(self, changes: Sequence[Change], *, now: float) -> list[str]:
        """Apply guarded changes in one transaction; return the keys applied."""
        for change in changes:
            check(change.from_state, change.to_state)
        if not changes:
            return []
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> list[str]:
            applied: list[str] = []
            events: list[_EventRow] = []
            for change in changes:
                row = conn.execute(sql["intent_apply"], _change_params(change, now)).fetchone()
                if row is None:
                    continue
                channel, attempts = row
                applied.append(change.key)
                events.append((
                    change.key, channel, change.event, now, change.to_state.value, attempts,
                    change.worker, change.message_id, change.provider_request_id,
                    change.detail if change.detail is not None else change.reason,
                ))
            conn.executemany(sql["event_insert"], events)
            return applied

        return await self.db.write(fn)

    async def intent_request_cancel(self, key: str, *, now: float, reason: str) -> State | None:
        """Cancel at once unless claimed (then flag it for the worker); None if unknown."""
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> State | None:
            row = conn.execute(sql["intent_cancel_read"], (key,)).fetchone()
            if row is None:
                return None
            state, channel, attempts, requested = State(row[0]), row[1], row[2], row[3]
            if state in CLAIMABLE:
                change = Change(key=key, from_state=state, to_state=State.CANCELLED,
                                event="cancelled", reason=reason)
                conn.execute(sql["intent_apply"], _change_params(change, now))
                conn.execute(sql["event_insert"], (key, channel, "cancelled", now, "cancelled",
                                                   attempts, None, None, None, reason))
                return State.CANCELLED
            if state is State.CLAIMED and not requested:
                conn.execute(sql["intent_cancel_request"], (now, key))
                conn.execute(sql["event_insert"], (key, channel, "cancel_requested", now,
                                                   "claimed", attempts, None, None, None, reason))
            return state

        return await self.db.write(fn)

    # ---------------------------------------------------------------- reads

    async def intent_get(self, key: str) -> Intent | None:
        def fn(conn: sqlite3.Connection) -> Intent | None:
            row = conn.execute(self._sql["intent_get"], (key,)).fetchone()
            return None if row is None else _intent(row)

        return await self.db.read(fn)

    async def intent_find(
        self,
        *,
        states: Sequence[State],
        channel: str | None = None,
        updated_before: float | None = None,
        lease_expired_at: float | None = None,
        limit: int = 1000,
    ) -> list[Intent]:
        """Intents in ``states`` narrowed by the filters, in (state, due time) order."""
        params = {"states": json.dumps([State(s).value for s in states]), "channel": channel,
                  "updated_before": updated_before, "lease_expired_at": lease_expired_at,
                  "limit": limit}

        def fn(conn: sqlite3.Connection) -> list[Intent]:
            return [_intent(row) for row in conn.execute(self._sql["intent_find"], params)]

        return await self.db.read(fn)

    async def intent_counts(self) -> dict[str, dict[str, int]]:
        """``{channel: {state: count}}`` over every intent."""
        return await self._nested_counts("intent_counts")

    async def intent_latencies(self, channel: str) -> list[float]:
        """Seconds from due to acceptance for every accepted intent of ``channel``."""
        def fn(conn: sqlite3.Connection) -> list[float]:
            return [row[0] for row in conn.execute(self._sql["intent_latencies"], (channel,))]

        return await self.db.read(fn)

    async def _nested_counts(self, query: str) -> dict[str, dict[str, int]]:
        def fn(conn: sqlite3.Connection) -> dict[str, dict[str, int]]:
            counts: dict[str, dict[str, int]] = {}
            for outer, inner, count in conn.execute(self._sql[query]):
                counts.setdefault(outer, {})[inner] = count
            return counts

        return await self.db.read(fn)

    # ---------------------------------------------------------------- events

    async def event_append_many(self, events: Sequence[Event]) -> None:
        if not events:
            return
        rows = [_event_row(e) for e in events]
        await self.db.write(lambda conn: conn.executemany(self._sql["event_insert"], rows))

    async def events_for(self, key: str) -> list[Event]:
        """Every event of ``key``, in the order written."""
        def fn(conn: sqlite3.Connection) -> list[Event]:
            return [
                Event(key=r[0], channel=r[1], type=r[2], at=r[3], state=r[4], attempt=r[5],
                      worker=r[6], message_id=r[7], provider_request_id=r[8], detail=r[9])
                for r in conn.execute(self._sql["events_for"], (key,))
            ]

        return await self.db.read(fn)

    async def event_counts(self) -> dict[str, dict[str, int]]:
        """``{channel: {event type: count}}``."""
        return await self._nested_counts("event_counts")

    # ---------------------------------------------------------------- occurrences

    async def occurrence_open(
        self, *, id: str, campaign: str, logical_at: float, logical_date: str, kind: str,
        now: float,
    ) -> Occurrence:
        """Return the occurrence, creating it if new; a replay re-opens one not done.

        ``passes`` counts the openings that leave it admitting.
        """
        sql = self._sql
        params = {"id": id, "campaign": campaign, "logical_at": logical_at,
                  "logical_date": logical_date, "kind": kind, "now": now}

        def fn(conn: sqlite3.Connection) -> Occurrence:
            if conn.execute(sql["occurrence_insert"], params).rowcount == 0:
                conn.execute(sql["occurrence_reopen"], {"id": id, "kind": kind})
            return _occurrence(conn.execute(sql["occurrence_get"], (id,)).fetchone())

        return await self.db.write(fn)

    async def occurrence_get(self, id: str) -> Occurrence | None:
        def fn(conn: sqlite3.Connection) -> Occurrence | None:
            row = conn.execute(self._sql["occurrence_get"], (id,)).fetchone()
            return None if row is None else _occurrence(row)

        return await self.db.read(fn)

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

    async def occurrence_list(self, campaign: str | None = None) -> list[Occurrence]:
        def fn(conn: sqlite3.Connection) -> list[Occurrence]:
            rows = conn.execute(self._sql["occurrence_list"], {"campaign": campaign})
            return [_occurrence(row) for row in rows]

        return await self.db.read(fn)

    # ---------------------------------------------------------------- admission switches

    async def switch_set(
        self, *, scope: str, name: str, paused: bool, now: float, reason: str | None = None
    ) -> Switch:
        params = {"scope": scope, "name": name, "paused": int(paused), "now": now,
                  "reason": reason}

        def fn(conn: sqlite3.Connection) -> Switch:
            return _switch(conn.execute(self._sql["switch_upsert"], params).fetchone())

        return await self.db.write(fn)

    async def switch_all(self) -> list[Switch]:
        def fn(conn: sqlite3.Connection) -> list[Switch]:
            return [_switch(row) for row in conn.execute(self._sql["switch_all"])]

        return await self.db.read(fn)

    async def switch_trip(self, *, scope: str, name: str, now: float, reason: str
                          ) -> Switch | None:
        """Pause unless already paused; the switch if this call paused it, else None."""
        params = {"scope": scope, "name": name, "now": now, "reason": reason}

        def fn(conn: sqlite3.Connection) -> Switch | None:
            row = conn.execute(self._sql["switch_trip"], params).fetchone()
            return None if row is None else _switch(row)

        return await self.db.write(fn)

    async def outcome_counts(self, *, since: float, bucket_s: float) -> list[OutcomeCount]:
        """Outcome events at or after ``since`` per channel, campaign, type and bucket."""
        params = {"since": since, "bucket_s": bucket_s}

        def fn(conn: sqlite3.Connection) -> list[OutcomeCount]:
            return [OutcomeCount(channel=channel, campaign=campaign, type=kind,
                                 bucket=int(bucket), count=int(count))
                    for channel, campaign, kind, bucket, count
                    in conn.execute(self._sql["outcome_counts"], params)]

        return await self.db.read(fn)

    # ---------------------------------------------------------------- recipient preferences

    async def preference_set(self, preference: Preference, *, now: float) -> None:
        """Insert or replace the preference of (recipient_id, channel), stamped ``now``."""
        params = {"recipient_id": preference.recipient_id, "channel": preference.channel,
                  "opted_out": int(preference.opted_out), "quiet_start": preference.quiet_start,
                  "quiet_end": preference.quiet_end, "timezone": preference.timezone,
                  "now": now}
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

        def fn(conn: sqlite3.Connection) -> dict[tuple[str, str], Preference]:
            return {
                (r, c): Preference(recipient_id=r, channel=c, opted_out=bool(out),
                                   quiet_start=start, quiet_end=end, timezone=tz)
                for r, c, out, start, end, tz in conn.execute(self._sql["preferences_for"],
                                                              params)
            }

        return await self.db.read(fn)

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
            row = conn.execute(sql["pacer_read"], (channel,)).fetchone()
            new_state, result = fn(None if row is None else json.loads(row[0]))
            conn.execute(sql["pacer_write"], (channel, json.dumps(new_state)))
            return result

        return await self.db.write(transact)

    async def pacer_read(self, channel: str) -> dict[str, Any] | None:
        def fn(conn: sqlite3.Connection) -> dict[str, Any] | None:
            row = conn.execute(self._sql["pacer_read"], (channel,)).fetchone()
            state: dict[str, Any] | None = None if row is None else json.loads(row[0])
            return state

        return await self.db.read(fn)

    async def pacer_pause(self, channel: str, until: float) -> None:
        await self.db.write(lambda conn: conn.execute(self._sql["pacer_pause"], (channel, until)))

    async def pacer_paused_until(self, channel: str) -> float:
        def fn(conn: sqlite3.Connection) -> float:
            row = conn.execute(self._sql["pacer_paused_until"], (channel,)).fetchone()
            return 0.0 if row is None else float(row[0])

        return await self.db.read(fn)

    # ---------------------------------------------------------------- operator API

    async def api_token_insert(self, token: ApiToken) -> None:
        """Store a new token; StoreError if its id exists."""
        params = _api_token_params(token)
        await self.db.write(lambda conn: conn.execute(self._sql["api_token_insert"], params))

    async def api_token_get(self, id: str) -> ApiToken | None:
        def fn(conn: sqlite3.Connection) -> ApiToken | None:
            row = conn.execute(self._sql["api_token_get"], (id,)).fetchone()
            return None if row is None else _api_token(row)

        return await self.db.read(fn)

    async def api_token_list(self) -> list[ApiToken]:
        def fn(conn: sqlite3.Connection) -> list[ApiToken]:
            return [_api_token(row) for row in conn.execute(self._sql["api_token_list"])]

        return await self.db.read(fn)

    async def api_token_revoke(self, id: str, *, now: float) -> ApiToken | None:
        """Revoke a token (a second revocation keeps the first time); None if unknown."""
        def fn(conn: sqlite3.Connection) -> ApiToken | None:
            row = conn.execute(self._sql["api_token_revoke"], {"id": id, "now": now}).fetchone()
            return None if row is None else _api_token(row)

        return await self.db.write(fn)

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

    async def api_trigger_counts(self) -> dict[str, int]:
        def fn(conn: sqlite3.Connection) -> dict[str, int]:
            return {c: int(n) for c, n in conn.execute(self._sql["api_trigger_counts"])}

        return await self.db.read(fn)

    async def api_idempotency_get(self, key: str) -> IdempotentResponse | None:
        def fn(conn: sqlite3.Connection) -> IdempotentResponse | None:
            row = conn.execute(self._sql["api_idempotency_get"], (key,)).fetchone()
            return None if row is None else _idempotent(row)

        return await self.db.read(fn)

    async def api_idempotency_put(self, record: IdempotentResponse, *,
                                  expire_before: float | None = None) -> IdempotentResponse:
        """Keep the first answer to a key; return the one stored (this one or an older)."""
        sql = self._sql
        params = {"key": record.key, "request_hash": record.request_hash,
                  "status": record.status, "body": record.body,
                  "created_at": record.created_at}

        def fn(conn: sqlite3.Connection) -> IdempotentResponse:
            if expire_before is not None:
                conn.execute(sql["api_idempotency_prune"], {"before": expire_before})
            if conn.execute(sql["api_idempotency_insert"], params).rowcount == 1:
                return record
            return _idempotent(conn.execute(sql["api_idempotency_get"],
                                            (record.key,)).fetchone())

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

    async def intent_summary(self, *, now: float, since: float) -> list[IntentSummary]:
        """One summary per (campaign, channel), ordered by campaign then channel."""
        def fn(conn: sqlite3.Connection) -> list[IntentSummary]:
            rows = conn.execute(self._sql["intent_summary"], {"now": now, "since": since})
            return [_summary(row) for row in rows]

        return await self.db.read(fn)

    async def intent_latency_histogram(self, bounds: Sequence[float]) -> list[LatencyHistogram]:
        """Due-to-accepted latencies per channel counted into ``bounds`` (ascending)."""
        params = {"bounds": json.dumps([float(b) for b in bounds])}

        def fn(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(self._sql["intent_latency_histogram"], params).fetchall()

        return _histograms(bounds, await self.db.read(fn))

    async def intent_find_by_recipient(self, recipient_id: str, *,
                                       limit: int = 100) -> list[Intent]:
        """A recipient's intents, latest due first."""
        params = {"recipient_id": recipient_id, "limit": limit}

        def fn(conn: sqlite3.Connection) -> list[Intent]:
            return [_intent(row)
                    for row in conn.execute(self._sql["intent_find_by_recipient"], params)]

        return await self.db.read(fn)

    async def event_keys_by_detail(self, detail: str, *, limit: int = 100) -> list[str]:
        """Keys with an event whose ``detail`` is exactly ``detail``, latest first."""
        params = {"detail": detail, "limit": limit}

        def fn(conn: sqlite3.Connection) -> list[str]:
            return [key for (key,) in conn.execute(self._sql["event_keys_by_detail"], params)]

        return await self.db.read(fn)


    # ---------------------------------------------------------------- provider webhooks

    async def provider_events_record(self, events: Sequence[ProviderEvent], *,
                                     now: float) -> RecordResult:
        """Record provider events once each, on their intent's timeline or orphaned."""
        unique = unique_provider_events(events)
        if not unique:
            return RecordResult(duplicates=len(events))
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> RecordResult:
            recorded = orphaned = 0
            timeline: list[_EventRow] = []
            for event in unique:
                intent = conn.execute(sql["intent_by_receipt"],
                                      {"message_id": event.message_id}).fetchone()
                inserted = conn.execute(sql["provider_event_insert"], {
                    "provider": event.provider, "message_id": event.message_id,
                    "type": event.type.value, "at": event.at, "now": now,
                    "key": None if intent is None else intent[0], "detail": event.detail,
                }).rowcount
                if not inserted:
                    continue
                if intent is None:
                    orphaned += 1
                    continue
                recorded += 1
                timeline.append(provider_timeline_row(event, *intent))
            conn.executemany(sql["event_insert"], timeline)
            return RecordResult(recorded=recorded, orphaned=orphaned,
                                duplicates=len(events) - recorded - orphaned)

        return await self.db.write(fn)

    async def provider_events_orphaned(self, *, limit: int = 100) -> list[StoredProviderEvent]:
        """Orphaned provider events, oldest received first."""
        def fn(conn: sqlite3.Connection) -> list[StoredProviderEvent]:
            rows = conn.execute(self._sql["provider_events_orphaned"], {"limit": limit})
            return [_stored_provider_event(row) for row in rows]

        return await self.db.read(fn)

    async def provider_events_adopt(self, *, since: float, limit: int = 1000) -> int:
        """Attach orphans received since ``since`` whose message id is now a receipt."""
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> int:
            rows = conn.execute(sql["provider_events_adoptable"],
                                {"since": since, "limit": limit}).fetchall()
            timeline: list[_EventRow] = []
            for row in rows:
                row_id, key = row[0], row[6]
                if conn.execute(sql["provider_event_adopt"],
                                {"id": row_id, "key": key}).rowcount:
                    timeline.append(provider_timeline_row(adopted_event(row), *row[6:10]))
            conn.executemany(sql["event_insert"], timeline)
            return len(timeline)

        return await self.db.write(fn)

    async def provider_event_counts(self) -> list[ProviderEventCount]:
        """Provider events per (provider, type), ordered by both."""
        def fn(conn: sqlite3.Connection) -> list[ProviderEventCount]:
            return [ProviderEventCount(provider=p, type=t, total=int(n), orphaned=int(o))
                    for p, t, n, o in conn.execute(self._sql["provider_event_counts"])]

        return await self.db.read(fn)
