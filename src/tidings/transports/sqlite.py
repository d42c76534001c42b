"""The embedded transport: per-channel queues as rows in the store's own database.

A receive hides rows by moving ``available_at`` forward and bumps a per-row
``receive_token``; the receipt ``"<id>:<token>"`` fences ``nack``, ``extend`` and
``dead_letter`` so a consumer whose visibility timeout ran out cannot touch a
message someone else now holds. ``ack`` deletes by id alone: whoever acks has
finished the work, and ids are never reused (AUTOINCREMENT).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from tidings.core.errors import StoreError, TransportError
from tidings.core.fair import NO_GROUP, FairShare, Passes
from tidings.core.lanes import EVERY_LANE
from tidings.core.model import (
    MAX_GROUPS_SHOWN,
    DeadLetter,
    GroupDepth,
    LaneDepth,
    OutgoingMessage,
    QueueDepth,
    Received,
)
from tidings.stores.receipts import parse_receipt
from tidings.stores.sqlite_db import SqliteDatabase, publish_messages
from tidings.transports.wakeups import Wakeups

T = TypeVar("T")


def body_of(raw: bytes | None) -> str | bytes:
    """A body as text, or as the bytes it is when they are not UTF-8 (for the consumer to
    dead-letter; see ``Message.decode``)."""
    try:
        return (raw or b"").decode("utf-8")
    except UnicodeDecodeError:
        return raw or b""


def shown(raw: bytes | None) -> str:
    """Text for display and logs: bytes that are not UTF-8 escaped, never an error."""
    return (raw or b"").decode("utf-8", errors="backslashreplace")


#: A received row: id, message id, body, receive count, token, enqueued at, failures, lane.
Row = tuple[int, bytes, bytes, int, int, float, int, int]


def fair_groups(conn: sqlite3.Connection, sql: Mapping[str, str], queue: str, lane: int,
                room: int, share: FairShare) -> list[str]:
    """The next ``room`` groups with messages in ``lane`` after the last receive's
    (wrapping round to the first), and notes where this receive stops."""
    after = share.after(lane)
    params = {"queue": queue, "lane": lane, "after": after, "limit": room}
    first = sql["message_groups_first"]
    groups = [g for (g,) in conn.execute(sql["message_groups"] if after else first, params)]
    if len(groups) < room and after:
        seen = set(groups)
        groups += [g for (g,) in conn.execute(first, {**params, "limit": room - len(groups)})
                   if g not in seen]
    if groups:
        share.visited(lane, groups[-1])
    return groups


class SqliteTransport:
    """The ``Transport`` port on tables ``messages`` and ``dead_letters``."""

    name = "sql"
    #: Publishes in other processes are not signalled: idle consumers poll.
    notifies = False

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db
        self._sql = db.sql
        self._wakeups = Wakeups()
        self._receiver: str | None = None
        # Where a receive without fair share last took grouped messages (see receive).
        self._leftover = FairShare()
        db.retain()

    def receive_as(self, receiver: str | None) -> None:
        """Record ``receiver`` on every message received from now on."""
        self._receiver = receiver

    async def release_receiver(self, receiver: str, *, now: float) -> int:
        """Make the messages ``receiver`` holds hidden visible now, fencing its receipts."""
        params = {"receiver": receiver, "now": now}

        def fn(conn: sqlite3.Connection) -> list[str]:
            return [q for (q,) in conn.execute(self._sql["message_release_receiver"], params)]

        queues = await self._write(fn)
        for queue in set(queues):
            self._wakeups.wake(queue)
        return len(queues)

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return await self.db.write(fn)
        except StoreError as exc:
            raise TransportError(str(exc)) from exc

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return await self.db.read(fn)
        except StoreError as exc:
            raise TransportError(str(exc)) from exc

    async def publish(self, queue: str, messages: Sequence[OutgoingMessage], *, now: float) -> None:
        """Publish messages, each visible after its ``delay_s``."""
        if not messages:
            return
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> None:
            publish_messages(conn, sql, queue,
                             [(m.message_id, m.body, m.delay_s, m.lane, m.group)
                              for m in messages],
                             now=now)

        await self._write(fn)
        self._wakeups.wake(queue)

    async def receive(
        self, queue: str, *, max_messages: int, visibility_s: float, now: float,
        lanes: Sequence[int] = EVERY_LANE, fair: FairShare | None = None,
    ) -> list[Received]:
        """Take up to ``max_messages`` visible messages, lane by lane in the order of
        ``lanes``, oldest first in each, hiding them; with ``fair``, each lane's room
        shared among its groups (``tidings.core.fair``)."""
        if max_messages <= 0 or not lanes:
            return []
        sql = self._sql
        base = {"queue": queue, "now": now, "visible_at": now + visibility_s,
                "receiver": self._receiver}
        leftover = self._leftover

        def lane_rows(conn: sqlite3.Connection, lane: int, room: int) -> list[Row]:
            rows = conn.execute(sql["message_receive"],
                                {**base, "lane": lane, "limit": room}).fetchall()
            # RETURNING order is unspecified; publish order is what "oldest" means
            # within a lane.
            rows.sort(key=lambda r: (r[5], r[0]))
            return rows

        def shared_rows(conn: sqlite3.Connection, lane: int, room: int, share: FairShare,
                        *, named_only: bool = False) -> list[Row]:
            groups = fair_groups(conn, sql, queue, lane, room, share)
            if named_only:
                groups = [g for g in groups if g != NO_GROUP]
            passes: Passes[Row] = Passes(groups, room, share.weights)
            while asks := passes.asks():
                given: dict[str, list[Row]] = {}
                for group, most in asks:
                    rows = conn.execute(sql["message_receive_group"], {
                        **base, "lane": lane, "group": group, "limit": most}).fetchall()
                    rows.sort(key=lambda r: (r[5], r[0]))
                    given[group] = rows
                passes.took(given)
            return passes.rows()

        def fn(conn: sqlite3.Connection) -> list[Row]:
            taken: list[Row] = []
            for lane in lanes:
                room = max_messages - len(taken)
                if fair is None:
                    taken += lane_rows(conn, lane, room)
                    if len(taken) < max_messages and conn.execute(
                            sql["message_has_groups"], {"queue": queue, "lane": lane}
                    ).fetchone()[0]:
                        # Messages that name a group, on a channel that does not share
                        # its lanes (written while it did): taken in turn, never stranded.
                        taken += shared_rows(conn, lane, max_messages - len(taken), leftover,
                                             named_only=True)
                else:
                    taken += shared_rows(conn, lane, room, fair)
                if len(taken) >= max_messages:
                    break
            return taken

        rows = await self._write(fn)
        # float(): RETURNING hands back a whole REAL as the integer SQLite stored it as.
        return [
            Received(queue=queue, message_id=shown(message_id), body=body_of(body),
                     receipt=f"{row_id}:{token}", receive_count=count,
                     enqueued_at=float(enqueued_at), failures=failures, lane=lane)
            for row_id, message_id, body, count, token, enqueued_at, failures, lane in rows
        ]

    async def ack(self, queue: str, receipts: Sequence[str]) -> None:
        """Delete messages by id; unknown or already acked receipts are a no-op."""
        if not receipts:
            return
        params = {"queue": queue,
                  "ids": json.dumps(sorted({parse_receipt(r)[0] for r in receipts}))}
        await self._write(lambda conn: conn.execute(self._sql["message_ack"], params))

    async def nack(self, queue: str, receipts: Sequence[tuple[str, float]], *, now: float,
                   failed: bool = False) -> None:
        """Make messages visible again after the paired delay, counting a failure on each
        with ``failed``; stale receipts are ignored."""
        rows = [(now + max(0.0, delay), queue, *parse_receipt(receipt))
                for receipt, delay in receipts]
        query = self._sql["message_nack_failed" if failed else "message_nack"]
        if rows:
            await self._write(lambda conn: conn.executemany(query, rows))
            self._wakeups.wake(queue)

    async def extend(
        self, queue: str, receipts: Sequence[str], *, visibility_s: float, now: float
    ) -> None:
        """Hide in-flight messages until ``now + visibility_s``; stale receipts are ignored."""
        rows = [(now + visibility_s, queue, *parse_receipt(receipt)) for receipt in receipts]
        if rows:
            await self._write(lambda conn: conn.executemany(self._sql["message_extend"], rows))

    async def dead_letter(
        self, queue: str, receipts: Sequence[tuple[str, str]], *, now: float
    ) -> None:
        """Move messages to the dead letters with the paired reason; stale receipts are ignored."""
        rows = [(reason, now, queue, *parse_receipt(receipt)) for receipt, reason in receipts]
        if not rows:
            return
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> None:
            conn.executemany(sql["message_dead_letter_copy"], rows)
            conn.executemany(sql["message_dead_letter_delete"], [row[2:] for row in rows])

        await self._write(fn)

    async def dead_letters(self, queue: str, *, limit: int = 100) -> list[DeadLetter]:
        """The oldest dead letters of ``queue``."""
        def fn(conn: sqlite3.Connection) -> list[DeadLetter]:
            return [
                DeadLetter(id=str(r[0]), queue=r[1], message_id=shown(r[2]), body=shown(r[3]),
                           reason=shown(r[4]), receive_count=r[5], dead_at=r[6])
                for r in conn.execute(self._sql["dead_letter_list"], (queue, limit))
            ]

        return await self._read(fn)

    async def redrive(self, queue: str, ids: Sequence[str], *, now: float) -> int:
        """Put dead letters back on their queue as fresh messages visible now."""
        numeric = sorted({int(i) for i in ids if i.isdigit()})
        if not numeric:
            return 0
        params = {"queue": queue, "ids": json.dumps(numeric), "now": now}
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> int:
            moved = conn.execute(sql["dead_letter_redrive_copy"], params).rowcount
            conn.execute(sql["dead_letter_redrive_delete"],
                         {"queue": queue, "ids": params["ids"]})
            return moved

        moved = await self._write(fn)
        if moved:
            self._wakeups.wake(queue)
        return moved

    async def wait(self, queue: str, *, timeout_s: float, now: float) -> None:
        """Sleep until the next message is due, a publish in this process, or ``timeout_s``.

        Publishes by other processes are not signalled: callers keep ``timeout_s`` short.
        """
        sql = self._sql

        def earliest(conn: sqlite3.Connection) -> float | None:
            (value,) = conn.execute(sql["queue_next_available"], (queue,)).fetchone()
            return None if value is None else float(value)

        async def ready_in() -> float | None:
            value = await self._read(earliest)
            return None if value is None else max(0.0, value - now)

        await self._wakeups.wait(queue, timeout_s, ready_in)

    async def depth(self, queue: str, *, now: float) -> QueueDepth:
        """Ready, delayed, in-flight and dead counts, and the age of the oldest message."""
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> QueueDepth:
            ready, delayed, in_flight, oldest = conn.execute(
                sql["queue_depth"], {"queue": queue, "now": now}).fetchone()
            (dead,) = conn.execute(sql["dead_letter_count"], (queue,)).fetchone()
            age = 0.0 if oldest is None else max(0.0, now - oldest)
            lanes = tuple(
                LaneDepth(lane=lane, ready=lane_ready, total=total,
                          oldest_age_s=max(0.0, now - first))
                for lane, lane_ready, total, first in conn.execute(
                    sql["queue_depth_lanes"], {"queue": queue, "now": now}))
            groups = tuple(
                GroupDepth(lane=lane, group=group, ready=group_ready, total=total)
                for lane, group, group_ready, total in conn.execute(
                    sql["queue_depth_groups"],
                    {"queue": queue, "now": now, "limit": MAX_GROUPS_SHOWN}))
            return QueueDepth(ready=ready, delayed=delayed, in_flight=in_flight, dead=dead,
                              oldest_age_s=age, lanes=lanes, groups=groups)

        return await self._read(fn)

    async def contains(self, queue: str, message_ids: Sequence[str]) -> set[str]:
        """Which of ``message_ids`` still have a message on the queue (any visibility)."""
        if not message_ids:
            return set()
        params = {"queue": queue, "ids": json.dumps(list(dict.fromkeys(message_ids)))}

        def fn(conn: sqlite3.Connection) -> set[str]:
            return {mid for (mid,) in conn.execute(self._sql["message_contains"], params)}

        return await self._read(fn)

    async def close(self) -> None:
        """Release the database; it closes when no other adapter still uses it."""
        await self.db.release()
