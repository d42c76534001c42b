"""The embedded transport on PostgreSQL: per-channel queues as rows in the store's database.

The twin of ``transports.sqlite`` (same tables, same receipts ``"<id>:<token>"``, same
fencing): a receive hides rows by moving ``available_at`` forward and bumps a per-row
``receive_token``, taking its batch ``FOR UPDATE SKIP LOCKED`` so receivers in many
processes on many machines split the ready messages instead of queueing on each
other's rows. ``ack`` deletes by id alone; identities are never reused.

Idle consumers do not poll hard: every transaction that makes messages visible
notifies the queue (``pg_notify``, delivered at commit), and ``wait`` sleeps until
that notification, until the earliest hidden or delayed message is due, or until its
timeout (see ``postgres_listen``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

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
from tidings.stores.postgres_db import Conn, PostgresDatabase, insert_messages
from tidings.stores.receipts import parse_receipt
from tidings.transports.postgres_listen import ReadyListener
from tidings.transports.wakeups import Wakeups

T = TypeVar("T")

#: How long an idle consumer waits at most while the LISTEN connection is down.
POLL_WITHOUT_LISTENER_S = 0.5


class PostgresTransport:
    """The ``Transport`` port on tables ``messages`` and ``dead_letters`` in PostgreSQL."""

    name = "pg"
    notifies = True

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self._sql = db.sql
        self._wakeups = Wakeups()
        self._listener = ReadyListener(db.url, db.safe_url, db.sql, self._wakeups)
        self._receiver: str | None = None
        # Where a receive without fair share last took grouped messages (see receive).
        self._leftover = FairShare()
        db.retain()

    def receive_as(self, receiver: str | None) -> None:
        """Record ``receiver`` on every message received from now on."""
        self._receiver = receiver

    async def release_receiver(self, receiver: str, *, now: float) -> int:
        """Make the messages ``receiver`` holds hidden visible now (waking their queues'
        consumers everywhere), fencing its receipts."""
        rows = await self._rows("message_release_receiver", {"receiver": receiver, "now": now})
        for queue, _, _ in rows:
            self._wakeups.wake(queue)
        return sum(count for _, count, _ in rows)

    @classmethod
    async def open(cls, url: str) -> PostgresTransport:
        """A transport on its own connection pool, from ``postgresql://…``."""
        db = PostgresDatabase.from_url(url)
        await db.open()
        return cls(db)

    async def _run(self, fn: Callable[[Conn], Awaitable[T]], *, single: bool = False) -> T:
        """``fn`` in a transaction (or, with ``single``, as the one statement it runs)."""
        try:
            return await self.db.transaction(fn, block=not single)
        except StoreError as exc:
            raise TransportError(str(exc)) from exc

    async def _execute(self, query: str, params: Any) -> int:
        async def fn(conn: Conn) -> int:
            cur = await conn.execute(self._sql[query], params)
            return cur.rowcount

        return await self._run(fn, single=True)

    async def _execute_and_notify(self, query: str, queue: str, params: Any) -> int:
        """``query`` and a ready notification for ``queue`` in one transaction."""
        async def fn(conn: Conn) -> int:
            cur = await conn.execute(self._sql[query], params)
            if cur.rowcount:
                await conn.execute(self._sql["queue_notify"], {"queue": queue})
            return cur.rowcount

        count = await self._run(fn)
        if count:
            self._wakeups.wake(queue)
        return count

    async def _rows(self, query: str, params: Any) -> list[tuple[Any, ...]]:
        async def fn(conn: Conn) -> list[tuple[Any, ...]]:
            cur = await conn.execute(self._sql[query], params)
            return await cur.fetchall()

        return await self._run(fn, single=True)

    async def publish(self, queue: str, messages: Sequence[OutgoingMessage], *, now: float) -> None:
        """Publish messages, each visible after its ``delay_s``."""
        if not messages:
            return
        rows = [(m.message_id, m.body, m.delay_s) for m in messages]

        async def fn(conn: Conn) -> None:
            await insert_messages(conn, self._sql, queue, rows, now=now,
                                  own_lanes=[m.lane for m in messages],
                                  own_groups=[m.group for m in messages])

        await self._run(fn, single=True)
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
        params = {"queue": queue, "now": now, "visible_at": now + visibility_s,
                  "receiver": self._receiver}
        if fair is None:
            rows = await self._rows("message_receive", {
                **params, "limit": max_messages, "lanes": list(lanes)})
            # RETURNING order is unspecified; lane order, then publish order within a
            # lane, is what the caller asked for.
            rank = {lane: i for i, lane in enumerate(lanes)}
            rows.sort(key=lambda r: (rank.get(r[7], len(rank)), r[5], r[0]))
            if len(rows) < max_messages and (await self._rows("message_has_groups", {
                    "queue": queue, "lanes": list(lanes)}))[0][0]:
                # Messages that name a group, on a channel that does not share its lanes
                # (written while it did): taken in turn, never stranded.
                more = max_messages - len(rows)
                rows += await self._run(lambda conn: self._receive_shared(
                    conn, params, lanes, more, self._leftover, named_only=True))
        else:
            rows = await self._run(lambda conn: self._receive_shared(
                conn, params, lanes, max_messages, fair))
        return [
            Received(queue=queue, message_id=message_id, body=body,
                     receipt=f"{row_id}:{token}", receive_count=count,
                     enqueued_at=float(enqueued_at), failures=failures, lane=lane)
            for row_id, message_id, body, count, token, enqueued_at, failures, lane, *_ in rows
        ]

    async def _receive_shared(self, conn: Conn, params: dict[str, Any], lanes: Sequence[int],
                              limit: int, fair: FairShare, *, named_only: bool = False
                              ) -> list[tuple[Any, ...]]:
        """``receive`` with each lane's room shared among its groups, in one transaction:
        the lane's next groups after the last receive's (``message_groups``), then
        passes of ``message_receive_groups``; ``named_only``: leave out the messages
        that name no group."""
        taken: list[tuple[Any, ...]] = []
        for lane in lanes:
            room = limit - len(taken)
            if room <= 0:
                break
            after = fair.after(lane)
            listing = {"queue": params["queue"], "lane": lane, "after": after, "limit": room}
            first = self._sql["message_groups_first"]
            cur = await conn.execute(self._sql["message_groups"] if after else first, listing)
            groups = [g for (g,) in await cur.fetchall()]
            if len(groups) < room and after:
                cur = await conn.execute(first, {**listing, "limit": room - len(groups)})
                seen = set(groups)
                groups += [g for (g,) in await cur.fetchall() if g not in seen]
            if groups:
                fair.visited(lane, groups[-1])
            if named_only:
                groups = [g for g in groups if g != NO_GROUP]
            passes: Passes[tuple[Any, ...]] = Passes(groups, room, fair.weights)
            while asks := passes.asks():
                cur = await conn.execute(self._sql["message_receive_groups"], {
                    **params, "lane": lane, "groups": [g for g, _ in asks],
                    "shares": [n for _, n in asks]})
                given: dict[str, list[tuple[Any, ...]]] = {}
                for row in sorted(await cur.fetchall(), key=lambda r: (r[5], r[0])):
                    given.setdefault(row[8], []).append(row)
                passes.took(given)
            taken += passes.rows()
        return taken

    async def ack(self, queue: str, receipts: Sequence[str]) -> None:
        """Delete messages by id; unknown or already acked receipts are a no-op."""
        if receipts:
            ids = sorted({parse_receipt(r)[0] for r in receipts})
            await self._execute("message_ack", {"queue": queue, "ids": ids})

    async def nack(self, queue: str, receipts: Sequence[tuple[str, float]], *, now: float,
                   failed: bool = False) -> None:
        """Make messages visible again after the paired delay, counting a failure on each
        with ``failed``; stale receipts are ignored."""
        if not receipts:
            return
        parsed = [(*parse_receipt(receipt), now + max(0.0, delay)) for receipt, delay in receipts]
        query = "message_nack_failed" if failed else "message_nack"
        await self._execute_and_notify(query, queue, {
            "queue": queue, "ids": [p[0] for p in parsed], "tokens": [p[1] for p in parsed],
            "available": [p[2] for p in parsed]})

    async def extend(
        self, queue: str, receipts: Sequence[str], *, visibility_s: float, now: float
    ) -> None:
        """Hide in-flight messages until ``now + visibility_s``; stale receipts are ignored."""
        if not receipts:
            return
        parsed = [parse_receipt(r) for r in receipts]
        await self._execute("message_extend", {
            "queue": queue, "ids": [p[0] for p in parsed], "tokens": [p[1] for p in parsed],
            "available": now + visibility_s})

    async def dead_letter(
        self, queue: str, receipts: Sequence[tuple[str, str]], *, now: float
    ) -> None:
        """Move messages to the dead letters with the paired reason; stale receipts are ignored."""
        if not receipts:
            return
        parsed = [(*parse_receipt(receipt), reason) for receipt, reason in receipts]
        await self._execute("message_dead_letter", {
            "queue": queue, "now": now, "ids": [p[0] for p in parsed],
            "tokens": [p[1] for p in parsed], "reasons": [p[2] for p in parsed]})

    async def dead_letters(self, queue: str, *, limit: int = 100) -> list[DeadLetter]:
        """The oldest dead letters of ``queue``."""
        return [
            DeadLetter(id=str(r[0]), queue=r[1], message_id=r[2], body=r[3], reason=r[4],
                       receive_count=r[5], dead_at=r[6])
            for r in await self._rows("dead_letter_list", (queue, limit))
        ]

    async def redrive(self, queue: str, ids: Sequence[str], *, now: float) -> int:
        """Put dead letters back on their queue as fresh messages visible now."""
        numeric = sorted({int(i) for i in ids if i.isdigit()})
        if not numeric:
            return 0
        return await self._execute_and_notify("dead_letter_redrive", queue,
                                              {"queue": queue, "ids": numeric, "now": now})

    async def depth(self, queue: str, *, now: float) -> QueueDepth:
        """Ready, delayed, in-flight and dead counts, and the age of the oldest message."""
        [(ready, delayed, in_flight, oldest, dead)] = await self._rows(
            "queue_depth", {"queue": queue, "now": now})
        age = 0.0 if oldest is None else max(0.0, now - oldest)
        lanes = tuple(
            LaneDepth(lane=lane, ready=lane_ready, total=total,
                      oldest_age_s=max(0.0, now - first))
            for lane, lane_ready, total, first in await self._rows(
                "queue_depth_lanes", {"queue": queue, "now": now}))
        groups = tuple(
            GroupDepth(lane=lane, group=group, ready=group_ready, total=total)
            for lane, group, group_ready, total in await self._rows(
                "queue_depth_groups", {"queue": queue, "now": now, "limit": MAX_GROUPS_SHOWN}))
        return QueueDepth(ready=ready, delayed=delayed, in_flight=in_flight, dead=dead,
                          oldest_age_s=age, lanes=lanes, groups=groups)

    async def contains(self, queue: str, message_ids: Sequence[str]) -> set[str]:
        """Which of ``message_ids`` still have a message on the queue (any visibility)."""
        if not message_ids:
            return set()
        rows = await self._rows("message_contains",
                                {"queue": queue, "ids": list(dict.fromkeys(message_ids))})
        return {row[0] for row in rows}

    async def wait(self, queue: str, *, timeout_s: float, now: float) -> None:
        """Sleep until a publish to ``queue`` commits anywhere, the next message is due,
        or ``timeout_s`` (at most ``POLL_WITHOUT_LISTENER_S`` while not listening)."""
        self._listener.start()
        if not self._listener.connected:
            timeout_s = min(timeout_s, POLL_WITHOUT_LISTENER_S)

        async def ready_in() -> float | None:
            [(earliest,)] = await self._rows("queue_next_available", {"queue": queue})
            return None if earliest is None else max(0.0, float(earliest) - now)

        await self._wakeups.wait(queue, timeout_s, ready_in)

    async def close(self) -> None:
        """Release the database; it closes when no other adapter still uses it."""
        await self._listener.close()
        await self.db.release()
