"""Admission on SQLite (the ``Ledger`` role's way in): one write transaction, a
multi-row insert of the drafts whose keys are new, and their events and queue
messages one statement per channel over a JSON key list. A campaign page is bound in
its columns: nothing is made per intent but the key.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

from tidings.core.errors import StoreError
from tidings.core.model import (
    DraftPage,
    IntentDraft,
    message_body,
    message_body_parts,
    plain_keys,
)
from tidings.core.repeats import AdmitGuard
from tidings.stores import base, rows
from tidings.stores.sqlite_base import SqliteBase
from tidings.stores.sqlite_db import insert_messages, row_runs

#: One row of the multi-row admission insert: the twelve draft columns.
_DRAFT_ROW = "(?,?,?,?,?,?,?,?,?,?,?,?)"
#: Rows per admission statement: 12,000 variables, well under SQLite's 32,766, and one
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
    lane: int
    group: str
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


def _page_parts(channels: Sequence[str], lanes: Sequence[int], groups: Sequence[str],
                keys: list[str], page_rows: Sequence[tuple[int, str, str, str]]) -> _PageParts:
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
        parts.append(_ChannelPart(channel=channel, lane=lanes[index], group=groups[index],
                                  keys=chosen_keys,
                                  keys_json=listed,
                                  values=values, plain=plain_keys(chosen_keys)))
    return _PageParts(keys_json=keys_json, channels=parts)


def _insert_page_rows(conn: sqlite3.Connection, insert: str, head: tuple[Any, ...],
                      values: list[str]) -> int:
    """Insert one channel's intents of a page (``values``: four per intent),
    ``_PAGE_CHUNK`` per statement; returns the rows written."""
    written = 0
    for start, size in row_runs(len(values) // _PAGE_WIDTH, _PAGE_CHUNK):
        chunk = values[start * _PAGE_WIDTH:(start + size) * _PAGE_WIDTH]
        statement = _page_statement(insert, size)
        written += conn.execute(statement, [*head, *chunk]).rowcount
    return written


@functools.lru_cache(maxsize=32)
def _page_statement(insert: str, count: int) -> str:
    """``insert`` with ``count`` row groups (``row_runs`` sizes: a few texts in all)."""
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


class SqliteAdmission(SqliteBase):
    """``intent_admit``, and the admission transaction body ``api_publish_many`` runs
    too."""

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

    async def intent_admit_groups(
            self, groups: Sequence[tuple[Sequence[IntentDraft], bool]], *, now: float,
            guard: AdmitGuard | None = None) -> list[str]:
        """``Ledger.intent_admit_groups``: every group in one write transaction, then
        ``guard`` over what is under its keys besides what this one created (nobody else
        writes under BEGIN IMMEDIATE); its KeyConflict rolls the transaction back."""
        bodies = [self._admit_fn(list(drafts), now=now, publish_lease_until=None,
                                 progress=None, enqueue=enqueue)
                  for drafts, enqueue in groups if drafts]
        if not bodies:
            return []
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> list[str]:
            created: list[str] = []
            for body in bodies:
                created += body(conn)
            if guard is not None:
                made = set(created)
                wanted = json.dumps([key for key in guard.keys if key not in made])
                cursor = conn.execute(sql["intent_bodies"], {"keys": wanted})
                guard.check({b.key: b for b in rows.INTENT_BODY.all(cursor.description,
                                                                     cursor.fetchall())})
            return created

        return await self.db.write(fn)

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
        whole = _page_parts(channels, page.lanes, page.groups, keys, page.rows)
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
                parts = _page_parts(channels, page.lanes, page.groups, fresh_keys,
                                   fresh_rows).channels
            written = 0
            for part in parts:
                written += _insert_page_rows(conn, insert,
                                             (*stamp, part.channel, *shared, part.lane,
                                              part.group),
                                             part.values)
                _insert_events(conn, sql, {part.channel: part.keys}, type=state, state=state,
                               at=now, keys_json=part.keys_json)
                if not enqueue:
                    continue
                if part.plain:
                    conn.execute(sql["message_insert_keys"], {
                        "queue": part.channel, "now": now, "keys": part.keys_json,
                        "body_head": body_head, "body_tail": body_tail,
                        "available_at": available_at, "lane": part.lane,
                        "group_key": part.group})
                else:
                    insert_messages(conn, sql, part.channel,
                                    [(k, message_body(k), page.due_at - now, part.lane,
                                      part.group) for k in part.keys], now=now)
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
            rows_by_queue: dict[str, list[tuple[str, str, float, int, str]]] = {}
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
            for start, size in row_runs(len(fresh), _ADMIT_CHUNK):
                chunk = fresh[start:start + size]
                params: list[Any] = [*head]
                for d in chunk:
                    params += (d.key, d.channel, d.recipient_id, d.address, d.template, d.data,
                               d.campaign, d.occurrence, d.due_at, d.expires_at, d.lane,
                               d.group)
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
                        (d.key, message_body(d.key), d.due_at - now, d.lane, d.group))
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
