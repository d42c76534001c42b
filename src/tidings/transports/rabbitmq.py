"""The RabbitMQ transport: per-channel durable quorum queues over AMQP 0.9.1 (aio-pika).

Topology, per channel ``q`` (every name under a prefix, ``tidings`` by default):

- ``<prefix>.q``: the queue. A quorum queue (replicated, fsynced before the publisher
  confirm), ``x-delivery-limit`` as a backstop against a message that kills its
  consumer on every delivery (the consumer's own poison limit counts failures, which a
  crash never records), and dead-lettering at least once (``x-dead-letter-strategy``,
  which needs ``x-overflow: reject-publish``) into ``<prefix>.q.dead``.
- ``<prefix>.q.dead``: the dead letters, with their reason in the header
  ``x-tidings-reason`` (the broker's own, ``delivery_limit``, from ``x-first-death-reason``).
- ``<prefix>.q.delay.<ms>``: delay queues, made on first use. Every message of one has the
  same queue-wide TTL (``x-message-ttl``) and dead-letters back into the queue when it
  expires.
- ``<prefix>.q.lane.<n>`` (and its ``….delay.<ms>``): lane n's queue, as the queue above
  is lane 0's (``tidings.core.lanes``; ``rabbitmq_topology``). A receive takes from the
  lanes it is asked in their order until it has ``max_messages``; a message keeps its
  lane (``x-tidings-lane``) through nacks, delays, dead letters and redrives. One group
  a lane: a message's ``group`` and ``fair`` are not kept on this broker (a lane's
  queue hands its messages out in their own order; docs/lanes.md).

**Delays without plugins.** RabbitMQ expires messages only at the head of a queue, so a
single delay queue with a per-message expiration blocks a short delay behind a long one
(head-of-line). A delay queue per distinct delay would need a queue per jittered backoff.
Here the delays are buckets, powers of four from a quarter of a second to three days
(eleven queues at most per channel), each with one TTL for all its messages, so the head
always expires first. A message goes into the largest bucket not longer than what is
left of its delay and carries the exact time it is due (``x-tidings-visible-at``); when
a bucket hands it back early, the receiver puts it into the next smaller bucket for the
rest (at most three hops per level), so it is visible at most the smallest bucket early
by the receiver's clock, and late by at most that much plus the time until a receive.

**Time comes from the caller** (the port's rule), and the broker's timers run on the
broker's clock. So the transport also moves what it knows is due by the caller's
``now``: the delayed messages it published itself (a heap of hints; it takes the head of
the bucket and moves it only if its due time has come), and the visibility of what it
holds.

**Visibility.** AMQP has no visibility timeout: an unacked delivery stays with its
channel until it is acked, rejected, or the channel or connection closes (a crashed
process's messages come back when the broker sees its connection die). So the transport
keeps what it handed out in a map of its own with a deadline; ``receive`` first gives
back (``basic.nack`` with requeue, in the order they were first published) what is past
its deadline, and ``extend`` only moves the deadline. The broker's ``consumer_timeout``
(30 minutes by default) must stay above the longest lease a worker keeps extending.

**Counts.** The quorum queue counts the returns of a message (``x-delivery-count``), so
``receive_count`` is the receives carried by the copy (``x-tidings-receives``) plus its
returns plus this one. A nack with a delay or a failure, a dead-letter and a redrive put
a new copy (with confirm) and then ack the old one: a crash between the two leaves two
copies, which the consumer's ledger turns into a duplicate observed, never a second
send. ``failures`` travel in ``x-tidings-failures`` on the copy.

**Receiving** is ``basic.get`` on eight channels side by side (a quorum queue answers
one get per channel at a time; a consumer's prefetch would hold messages no receive
asked for, out of every other process's reach), the batch sorted back into publish
order.

**Receipts** are ``"<instance>:<connection generation>.<channel>:<delivery tag>"``:
delivery tags count per channel from 1, so a receipt from before a reconnect (whose
delivery the broker has already put back) or of another channel is never taken for
this one; unknown receipts are ignored.

**The broker going away** (a restart, a dropped connection): every operation connects
again and runs again for up to ``RETRY_FOR_S``. What the lost connection held is back on
the queue (the broker returns unacked deliveries), so acks, nacks and dead-letters of
its receipts are ignored and those messages are received again (the ledger turns the
second receive into a duplicate observed); a publish run again may publish twice.

**Depth and ``contains``.** AMQP 0.9.1 tells a queue's ready count only. Delayed counts
are the delay queues' counts; in flight is what this instance holds (another process's
deliveries are invisible to it); the oldest age is read from the head of the queue: a
process that consumes the queue takes it and hands it out with its next receive; any
other does not read it (giving it back would count a return against the head's delivery
limit, and a status run in a loop dead-lettered live messages) and reports the oldest
of what it holds.
``contains`` cannot be asked of a queue by message id (a scan
with get-and-requeue costs a return per message on every look, eating the delivery
limit); so the transport answers exactly only when its own view accounts for every
message on the queue (what it holds, published and has not received since, delayed), as
when the queue is empty or when one process runs it, and otherwise says every asked id is
present. The reconciler then republishes a lost message once the queue has drained, not
earlier: late, never never, and never a flood of duplicates over a long backlog.

**Modules.** The port's methods are here; the headers a copy carries and the queue
views are ``rabbitmq_messages``, the connection and its retries ``rabbitmq_connection``,
the queues, delay buckets and dead-letter queue ``rabbitmq_topology``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from datetime import datetime

import aiormq
from aio_pika.abc import AbstractIncomingMessage, AbstractQueue

from tidings.core.fair import FairShare
from tidings.core.lanes import EVERY_LANE, MAX_LANES
from tidings.core.model import DeadLetter, LaneDepth, OutgoingMessage, QueueDepth, Received
from tidings.transports.rabbitmq_connection import (
    AMQP_ERRORS,
    LOST,
    NOT_LOST,
    OP_TIMEOUT_S,
    RETRY_FOR_S,
    BrokerLost,
    retrying,
)
from tidings.transports.rabbitmq_messages import (
    H_COPY,
    H_DEAD_AT,
    H_REASON,
    H_RECEIVES,
    H_VISIBLE,
    Copy,
    Held,
    QueueView,
    header_count,
    header_lane,
    header_number,
    header_text,
    message_id_of,
)
from tidings.transports.rabbitmq_topology import (
    BUCKETS_S,
    DELIVERY_LIMIT,
    EARLY_S,
    KNOWN_LIMIT,
    RabbitTopology,
    bucket_for,
)
from tidings.transports.sqlite import body_of, shown

__all__ = [
    "AMQP_ERRORS",
    "BUCKETS_S",
    "DELIVERY_LIMIT",
    "EARLY_S",
    "GET_CHANNELS",
    "KNOWN_LIMIT",
    "LOST",
    "NOT_LOST",
    "OP_TIMEOUT_S",
    "REDRIVE_SCAN_LIMIT",
    "RETRY_FOR_S",
    "BrokerLost",
    "RabbitTransport",
    "bucket_for",
    "message_id_of",
]

#: Channels a receive takes messages on side by side (one ``basic.get`` each at a time).
GET_CHANNELS = 8
#: How many dead letters ``redrive`` reads at most in one call.
REDRIVE_SCAN_LIMIT = 100_000


class RabbitTransport(RabbitTopology):
    """The ``Transport`` port on RabbitMQ quorum queues."""

    name = "amqp"
    #: Publishes in other processes are not signalled: idle consumers poll.
    notifies = False

    @classmethod
    async def open(cls, url: str, *, retry_for_s: float | None = None) -> RabbitTransport:
        """A transport on its own connection, from ``amqp://user:pass@host:port/vhost``
        (``?prefix=`` names the queues' prefix)."""
        patience = RETRY_FOR_S if retry_for_s is None else retry_for_s
        # A broker not there at start is more likely a wrong URL than an outage: the
        # first contact is given RETRY_FOR_S at most, however patient the service.
        transport = cls(url, retry_for_s=min(patience, RETRY_FOR_S))
        await transport._connect_once()
        transport.retry_for_s = patience
        return transport

    # ------------------------------------------------------------ the port

    @retrying
    async def publish(self, queue: str, messages: Sequence[OutgoingMessage], *, now: float) -> None:
        """Publish messages, each visible after its ``delay_s``, with publisher confirms."""
        if not messages:
            return
        async with self._io(f"publish to {queue}"):
            await self._main(queue)
            await self._put(queue, [
                (Copy(message_id=m.message_id, body=m.body.encode("utf-8", "surrogatepass"),
                       enqueued_at=now, receives=0, failures=0, order=self._next_order(now),
                       lane=min(max(m.lane, 0), MAX_LANES - 1)),
                 now + max(0.0, m.delay_s)) for m in messages], now=now)
        self._wakeups.wake(queue)

    @retrying
    async def receive(
        self, queue: str, *, max_messages: int, visibility_s: float, now: float,
        lanes: Sequence[int] = EVERY_LANE, fair: FairShare | None = None,
    ) -> list[Received]:
        """Take up to ``max_messages`` visible messages, hiding them: lane by lane in
        the order of ``lanes``, each in publish order (returns first). One group a lane
        here (``fair`` is not kept on this broker)."""
        asked = [lane for lane in dict.fromkeys(lanes) if 0 <= lane < MAX_LANES]
        if max_messages <= 0 or not asked:
            return []
        async with self._lock, self._io(f"receive from {queue}"):
            await self._main(queue)
            view = self._view(queue)
            view.consumer = True
            await self._expire(view, now)
            await self._promote(queue, view, now)
            out: list[Received] = []
            for lane in asked:
                while len(out) < max_messages:
                    wanted = max_messages - len(out)
                    batch = await self._take_batch(queue, view, lane, wanted)
                    out += await self._hand_out(queue, view, batch,
                                                visibility_s=visibility_s, now=now)
                    if len(batch) < min(wanted, GET_CHANNELS):
                        break  # the lane has no more
            return out

    async def _take_batch(self, queue: str, view: QueueView, lane: int,
                          wanted: int) -> list[Held]:
        """Up to ``wanted`` messages from the head of ``lane``: its stashed one first,
        then gets on the get channels side by side (a quorum queue answers one
        ``basic.get`` per channel at a time), in publish order."""
        taken: list[Held] = []
        for held in [h for h in view.stash if h.copy.lane == lane][:wanted]:
            view.stash.remove(held)
            taken.append(held)
        if len(taken) < wanted:
            queues = await self._get_queues(queue, lane)
            width = min(wanted - len(taken), len(queues))
            got = await asyncio.gather(*(self._get(queue, q, lane) for q in queues[:width]))
            taken += [h for h in got if h is not None]
        return sorted(taken, key=lambda h: h.copy.order)

    async def _hand_out(self, queue: str, view: QueueView, batch: list[Held], *,
                        visibility_s: float, now: float) -> list[Received]:
        out: list[Received] = []
        for held in batch:
            visible_at = header_number(dict(held.delivery.headers or {}), H_VISIBLE, default=now)
            if visible_at > now + EARLY_S:  # a bucket gave it back early: the rest
                await self._put(queue, [(held.copy, visible_at)], now=now)
                await held.delivery.ack()
                continue
            channel = held.delivery.channel.number if held.delivery.channel else 0
            receipt = (f"{self._instance}:{self._generation}.{channel}:"
                       f"{held.delivery.delivery_tag}")
            held.deadline = now + visibility_s
            view.held[receipt] = held
            out.append(Received(
                queue=queue, message_id=held.copy.message_id, body=body_of(held.copy.body),
                receipt=receipt, receive_count=held.receive_count,
                enqueued_at=held.copy.enqueued_at, failures=held.copy.failures,
                lane=held.copy.lane))
        return out

    async def _get_queues(self, queue: str, lane: int = 0) -> list[AbstractQueue]:
        """The lane's queue as seen from each get channel (opened once per connection)."""
        await self._main(queue)
        name = self._lane_name(queue, lane)
        if not self._get_channels:
            assert self._connection is not None
            for _ in range(GET_CHANNELS):
                self._get_channels.append(
                    await self._connection.channel(publisher_confirms=False))
        found = self._get_views.get(name)
        if found is None:
            found = [await c.get_queue(name, ensure=False) for c in self._get_channels]
            self._get_views[name] = found
        return found

    async def _get(self, queue: str, main: AbstractQueue, lane: int = 0) -> Held | None:
        delivery = await main.get(no_ack=False, fail=False, timeout=OP_TIMEOUT_S)
        if delivery is None:
            return None
        copy = Copy.of(delivery, lane)
        view = self._view(queue)
        if view.known.get(copy.message_id):
            view.known[copy.message_id] -= 1
            if not view.known[copy.message_id]:
                del view.known[copy.message_id]
        return Held(queue=queue, delivery=delivery, copy=copy)

    async def _expire(self, view: QueueView, now: float) -> None:
        """Give back what is past its visibility deadline, oldest publish first (the
        quorum queue delivers returns first, in the order they came back)."""
        expired = sorted((r for r, h in view.held.items() if h.deadline <= now),
                         key=lambda r: view.held[r].copy.order)
        for receipt in expired:
            held = view.held.pop(receipt)
            await held.delivery.nack(requeue=True)
            self._know(view, held.copy.message_id)

    def _take(self, queue: str, receipts: Iterable[str]) -> list[tuple[str, Held]]:
        """The deliveries behind receipts this instance holds now (stale ones skipped)."""
        view = self._view(queue)
        taken = []
        for receipt in dict.fromkeys(receipts):
            held = view.held.pop(receipt, None)
            if held is not None:
                taken.append((receipt, held))
        return taken

    @retrying
    async def ack(self, queue: str, receipts: Sequence[str]) -> None:
        """Remove messages for good; unknown or already acked receipts are a no-op."""
        if not receipts:
            return
        async with self._lock, self._io(f"ack on {queue}"):
            for _, held in self._take(queue, receipts):
                await held.delivery.ack()

    @retrying
    async def nack(self, queue: str, receipts: Sequence[tuple[str, float]], *, now: float,
                   failed: bool = False) -> None:
        """Make messages visible again after the paired delay, counting a failure on each
        with ``failed``; stale receipts are ignored."""
        delays = dict(receipts)
        async with self._lock, self._io(f"nack on {queue}"):
            view = self._view(queue)
            taken = self._take(queue, delays)
            copies = []
            for receipt, held in taken:
                delay = max(0.0, delays[receipt])
                if delay <= 0 and not failed:
                    await held.delivery.nack(requeue=True)  # the broker counts the return
                    self._know(view, held.copy.message_id)
                    continue
                copy = Copy(message_id=held.copy.message_id, body=held.copy.body,
                             enqueued_at=held.copy.enqueued_at, receives=held.receive_count,
                             failures=held.copy.failures + (1 if failed else 0),
                             order=held.copy.order, lane=held.copy.lane)
                copies.append((held, copy, now + delay))
            if copies:
                await self._put(queue, [(c, at) for _, c, at in copies], now=now)
                for held, _, _ in copies:
                    await held.delivery.ack()
        if taken:
            self._wakeups.wake(queue)

    async def extend(
        self, queue: str, receipts: Sequence[str], *, visibility_s: float, now: float
    ) -> None:
        """Hide in-flight messages until ``now + visibility_s``; stale receipts are ignored."""
        view = self._view(queue)
        for receipt in receipts:
            held = view.held.get(receipt)
            if held is not None:
                held.deadline = now + visibility_s

    @retrying
    async def dead_letter(
        self, queue: str, receipts: Sequence[tuple[str, str]], *, now: float
    ) -> None:
        """Move messages to the dead-letter queue with the paired reason (a header)."""
        reasons = dict(receipts)
        async with self._lock, self._io(f"dead-letter on {queue}"):
            for receipt, held in self._take(queue, reasons):
                copy = Copy(message_id=held.copy.message_id, body=held.copy.body,
                             enqueued_at=held.copy.enqueued_at, receives=held.receive_count,
                             failures=held.copy.failures, order=held.copy.order,
                             lane=held.copy.lane)
                await self._put(queue, [(copy, now)], now=now, dead={
                    H_REASON: reasons[receipt], H_DEAD_AT: repr(now)})
                await held.delivery.ack()

    def _letter(self, queue: str, delivery: AbstractIncomingMessage) -> DeadLetter:
        headers = dict(delivery.headers or {})
        reason = header_text(headers, H_REASON)
        dead_at = header_number(headers, H_DEAD_AT, default=-1.0)
        if reason is None:  # dead-lettered by the broker itself
            reason = f"broker: {header_text(headers, 'x-first-death-reason') or 'unknown'}"
        if dead_at < 0:
            deaths = headers.get("x-death")
            when = deaths[0].get("time") if isinstance(deaths, list) and deaths and \
                isinstance(deaths[0], dict) else None
            dead_at = when.timestamp() if isinstance(when, datetime) else 0.0
        receives = header_count(headers, H_RECEIVES)
        return DeadLetter(queue=queue, id=header_text(headers, H_COPY) or "",
                          message_id=message_id_of(delivery), body=shown(delivery.body),
                          reason=reason, receive_count=receives, dead_at=dead_at)

    @retrying
    async def dead_letters(self, queue: str, *, limit: int = 100) -> list[DeadLetter]:
        """The oldest dead letters of ``queue`` (read and given back, in order)."""
        async with self._io(f"dead letters of {queue}"):
            channel, dead = await self._dead_channel(queue)
            try:
                read: list[AbstractIncomingMessage] = []
                while len(read) < limit:
                    delivery = await dead.get(no_ack=False, fail=False, timeout=OP_TIMEOUT_S)
                    if delivery is None:
                        break
                    read.append(delivery)
                letters = [self._letter(queue, d) for d in read]
                for delivery in read:
                    await delivery.nack(requeue=True)
                return letters
            finally:
                with contextlib.suppress(Exception):
                    await channel.close()

    @retrying
    async def redrive(self, queue: str, ids: Sequence[str], *, now: float) -> int:
        """Put dead letters back on their queue as fresh messages visible now."""
        wanted = set(ids)
        if not wanted:
            return 0
        async with self._lock, self._io(f"redrive on {queue}"):
            channel, dead = await self._dead_channel(queue)
            try:
                chosen: list[AbstractIncomingMessage] = []
                others: list[AbstractIncomingMessage] = []
                while len(chosen) < len(wanted) and len(others) < REDRIVE_SCAN_LIMIT:
                    delivery = await dead.get(no_ack=False, fail=False, timeout=OP_TIMEOUT_S)
                    if delivery is None:
                        break
                    copy_id = header_text(dict(delivery.headers or {}), H_COPY)
                    (chosen if copy_id in wanted else others).append(delivery)
                if chosen:
                    await self._put(queue, [
                        (Copy(message_id=message_id_of(d), body=d.body, enqueued_at=now,
                               receives=0, failures=0, order=self._next_order(now),
                               lane=header_lane(dict(d.headers or {}))), now)
                        for d in chosen], now=now)
                    for delivery in chosen:
                        await delivery.ack()
                for delivery in others:
                    await delivery.nack(requeue=True)
            finally:
                with contextlib.suppress(Exception):
                    await channel.close()
        if chosen:
            self._wakeups.wake(queue)
        return len(chosen)

    @retrying
    async def depth(self, queue: str, *, now: float) -> QueueDepth:
        """Ready, delayed, in-flight (held here) and dead counts, and the oldest age;
        the same lane by lane for each lane holding messages."""
        async with self._lock, self._io(f"depth of {queue}"):
            readies, delays, dead = await self._lane_counts(queue)
            view = self._view(queue)
            lanes = []
            for lane in range(MAX_LANES):
                ready = readies[lane]
                if ready and not any(h.copy.lane == lane for h in view.stash):
                    ready = await self._head(queue, view, lane, ready)
                held = [h for h in view.held.values() if h.copy.lane == lane]
                expired = sum(1 for h in held if h.deadline <= now)
                stash = [h for h in view.stash if h.copy.lane == lane]
                enqueued = [h.copy.enqueued_at for h in (*held, *stash)]
                enqueued += [entry[4] for entry in view.delayed if entry[5] == lane]
                oldest = min(enqueued, default=None)
                lanes.append((LaneDepth(
                    lane=lane, ready=ready + len(stash) + expired,
                    total=ready + len(stash) + len(held) + delays[lane],
                    oldest_age_s=0.0 if oldest is None else max(0.0, now - oldest)),
                    len(held) - expired))
            shown_lanes = tuple(d for d, _ in lanes if d.total > 0)
            return QueueDepth(
                ready=sum(d.ready for d, _ in lanes), delayed=sum(delays),
                in_flight=sum(n for _, n in lanes), dead=dead,
                oldest_age_s=max((d.oldest_age_s for d in shown_lanes), default=0.0),
                lanes=shown_lanes)

    async def _head(self, queue: str, view: QueueView, lane: int, ready: int) -> int:
        """The ready count of ``lane``'s queue left once its head is stashed.

        A consumer of the queue takes the head and keeps it for its next receive (no
        return counted). Any other process (the CLI's status, another channel's worker)
        does not look: giving a message back counts a return against its
        ``x-delivery-limit``, and a status run in a loop would dead-letter live
        messages. It reports the oldest message it holds; the ledger's oldest intent
        (``tidings status``) is the measure that needs no consumer."""
        if not view.consumer:
            return ready
        await self._main(queue)
        held = await self._get(queue, self._queues[self._lane_name(queue, lane)], lane)
        if held is None:
            return ready
        view.stash.append(held)
        return ready - 1

    @retrying
    async def contains(self, queue: str, message_ids: Sequence[str]) -> set[str]:
        """Which of ``message_ids`` still have a message on the queue (any visibility):
        exact when this instance accounts for every message on it, else all of them."""
        asked = set(message_ids)
        if not asked:
            return set()
        async with self._lock, self._io(f"contains on {queue}"):
            ready, delayed, _dead = await self._counts(queue)
            view = self._view(queue)
            here = {h.copy.message_id for h in (*view.held.values(), *view.stash)}
            exact = (not view.overflow and ready == sum(view.known.values())
                     and delayed == len(view.delayed))
            if not exact:
                return asked
            return asked & (here | set(view.known) | {e[3] for e in view.delayed})

    @retrying
    async def wait(self, queue: str, *, timeout_s: float, now: float) -> None:
        """Sleep until a message is ready here or on the broker, until what this instance
        holds or delayed falls due, a publish in this process, or ``timeout_s``."""
        async def ready_in() -> float | None:
            view = self._view(queue)
            if view.stash:
                return 0.0
            dues = [h.deadline for h in view.held.values()]
            if view.delayed:
                dues.append(view.delayed[0][0])
            async with self._io(f"wait on {queue}"):
                await self._main(queue)
                ready = 0
                for lane in range(MAX_LANES):
                    ready += await self._count(self._lane_name(queue, lane))
            if ready:
                return 0.0
            return max(0.0, min(dues) - now) if dues else None

        await self._wakeups.wait(queue, timeout_s, ready_in)

    async def close(self) -> None:
        """Close the connection; what is held goes back to the queues with it."""
        if self._closed:
            return
        await self._drop()
        self._closed = True

    @retrying
    async def delete_queues(self, queues: Iterable[str]) -> int:
        """Delete the broker queues of ``queues`` (their delay and dead-letter queues
        too); return how many there were."""
        names = [name for queue in queues for name in (
            self._dead_name(queue), *(self._lane_name(queue, lane) for lane in range(MAX_LANES)),
            *(self._bucket_name(queue, b, lane) for b in BUCKETS_S
              for lane in range(MAX_LANES)))]
        deleted = 0
        async with self._lock, self._io("delete queues"):
            for name in names:
                channel = await self._probe_chan()
                try:
                    await channel.declare_queue(name, passive=True, timeout=OP_TIMEOUT_S)
                except aiormq.exceptions.ChannelNotFoundEntity:
                    self._probe = None
                    continue
                await channel.queue_delete(name, timeout=OP_TIMEOUT_S)
                deleted += 1
            await self._drop()
        return deleted

    async def drop_all(self) -> int:
        """Delete every queue of every channel this instance has used (a demo's or a
        test's clean-up: AMQP cannot list queues); return how many there were."""
        return await self.delete_queues(list(self._views))
