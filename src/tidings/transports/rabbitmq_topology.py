"""The RabbitMQ transport's queues: each channel's quorum queue per lane, its
dead-letter queue and each lane's delay buckets (declared once per connection), and
putting copies on them (a delayed copy into its lane's bucket, with a hint of its due
time; a dead one into the dead-letter queue), moving what is due out of the buckets by
the caller's clock, and counting what the broker holds.

**Lanes** (``tidings.core.lanes``): lane 0 is the queue a channel had before lanes
(``<prefix>.q``, its buckets ``<prefix>.q.delay.<ms>``), so what a deployment held then
is lane 0's; lane n is ``<prefix>.q.lane.<n>`` (buckets ``<prefix>.q.lane.<n>.delay.<ms>``),
each bucket dead-lettering back into its own lane's queue. Every lane's queue is
declared with the channel's (a receive asks every lane, and a get on a queue that does
not exist closes the channel); the buckets are made on first use. The dead letters of
every lane share one queue, each copy naming its lane (``x-tidings-lane``).

**Delays without plugins**: the buckets are powers of four from a quarter of a second
to three days, each one queue-wide TTL that dead-letters back into the queue, so the
head of a bucket always expires first (see ``tidings.transports.rabbitmq``).
"""

from __future__ import annotations

import asyncio
import heapq
import uuid
from collections.abc import Iterable
from typing import Any

import aiormq
from aio_pika.abc import AbstractChannel, AbstractQueue

from tidings.core.errors import TransportError
from tidings.core.lanes import MAX_LANES
from tidings.transports.rabbitmq_connection import OP_TIMEOUT_S, RabbitConnection
from tidings.transports.rabbitmq_messages import (
    H_COPY,
    H_VISIBLE,
    Copy,
    QueueView,
    header_count,
    header_number,
)

#: Delay buckets, seconds: powers of four from 0.25 s to three days.
BUCKETS_S: tuple[float, ...] = tuple(0.25 * 4**k for k in range(11))
#: A message a delay queue hands back this little before it is due (by the receiver's
#: clock) is visible: what is left is shorter than the shortest delay queue.
EARLY_S = BUCKETS_S[0]
#: Returns of one copy of a message before the broker dead-letters it (crash loops).
DELIVERY_LIMIT = 100
#: Ids per queue this instance remembers having put there (beyond: ``contains`` is
#: conservative until the queue drains).
KNOWN_LIMIT = 100_000


def bucket_for(remaining_s: float) -> float:
    """The largest bucket not longer than ``remaining_s`` (the smallest below it)."""
    chosen = BUCKETS_S[0]
    for bucket in BUCKETS_S:
        if bucket <= remaining_s:
            chosen = bucket
    return chosen


class RabbitTopology(RabbitConnection):
    """The queues of each channel and the copies put on them."""

    def _name(self, queue: str, suffix: str = "") -> str:
        return f"{self.prefix}.{queue}{suffix}"

    def _dead_name(self, queue: str) -> str:
        return self._name(queue, ".dead")

    def _lane_name(self, queue: str, lane: int) -> str:
        return self._name(queue, f".lane.{lane}" if lane else "")

    def _bucket_name(self, queue: str, bucket_s: float, lane: int = 0) -> str:
        return self._name(queue, f"{f'.lane.{lane}' if lane else ''}"
                                 f".delay.{round(bucket_s * 1000)}")

    def _view(self, queue: str) -> QueueView:
        return self._views.setdefault(queue, QueueView())

    async def _declare(self, name: str, arguments: dict[str, Any]) -> AbstractQueue:
        channel = await self._chan()
        queue = await channel.declare_queue(name, durable=True, arguments={
            "x-queue-type": "quorum", **arguments}, timeout=OP_TIMEOUT_S)
        self._declared.add(name)
        self._queues[name] = queue
        return queue

    async def _main(self, queue: str) -> AbstractQueue:
        """Lane 0's queue; every lane's queue and the dead-letter queue are declared with
        it, once per connection."""
        name = self._name(queue)
        await self._chan()
        if name in self._queues:
            return self._queues[name]
        await self._declare(self._dead_name(queue), {})
        # Lane 0's last: the mark that the channel's queues are declared.
        for lane in reversed(range(MAX_LANES)):
            declared = await self._declare(self._lane_name(queue, lane), {
                "x-delivery-limit": DELIVERY_LIMIT,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": self._dead_name(queue),
                "x-dead-letter-strategy": "at-least-once",
                "x-overflow": "reject-publish",
            })
        return declared

    async def _bucket(self, queue: str, bucket_s: float, lane: int = 0) -> str:
        name = self._bucket_name(queue, bucket_s, lane)
        if name not in self._queues:
            await self._main(queue)  # a bucket dead-letters into its lane's queue
            await self._declare(name, {
                "x-message-ttl": round(bucket_s * 1000),
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": self._lane_name(queue, lane),
                "x-dead-letter-strategy": "at-least-once",
                "x-overflow": "reject-publish",
            })
        return name

    async def _count(self, name: str) -> int:
        """Ready messages on ``name`` (0 when it does not exist)."""
        probe = await self._probe_chan()
        try:
            declared = await probe.declare_queue(name, passive=True, timeout=OP_TIMEOUT_S)
        except aiormq.exceptions.ChannelNotFoundEntity:
            self._probe = None  # the broker closed the channel with its 404
            return 0
        return int(declared.declaration_result.message_count or 0)

    # ------------------------------------------------------------ putting copies

    async def _put(self, queue: str, items: Iterable[tuple[Copy, float]], *, now: float,
                   dead: dict[str, Any] | None = None) -> None:
        """Publish copies (each visible at the paired time), all confirmed, in order."""
        channel = await self._chan()
        view = self._view(queue)
        sends = []
        for copy, visible_at in items:
            due: float | None = None
            if dead is not None:
                target = self._dead_name(queue)
                extra = {**dead, H_COPY: uuid.uuid4().hex}
            elif visible_at > now:
                due = visible_at
                bucket = bucket_for(visible_at - now)
                target = await self._bucket(queue, bucket, copy.lane)
                heapq.heappush(view.delayed, (visible_at, copy.order, bucket, copy.message_id,
                                              copy.enqueued_at, copy.lane))
                extra = None
            else:
                target = self._lane_name(queue, copy.lane)
                self._know(view, copy.message_id)
                extra = None
            sends.append(channel.default_exchange.publish(
                copy.message(visible_at=due, extra=extra), routing_key=target,
                mandatory=True, timeout=OP_TIMEOUT_S))
        results = await asyncio.gather(*sends, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
            if not isinstance(result, aiormq.spec.Basic.Ack):
                raise TransportError(f"RabbitMQ refused a publish to {queue}: {result!r}")

    @staticmethod
    def _know(view: QueueView, message_id: str) -> None:
        if view.overflow:
            return
        if len(view.known) >= KNOWN_LIMIT and message_id not in view.known:
            view.overflow = True
            view.known.clear()
            return
        view.known[message_id] += 1

    def _next_order(self, now: float) -> str:
        # Sorts by publish time, then by this instance's sequence.
        return f"{now:020.6f}:{self._instance}:{next(self._order):012d}"

    # ------------------------------------------------------------ delays

    async def _promote(self, queue: str, view: QueueView, now: float) -> None:
        """Move the delayed messages this instance knows are due (by the caller's clock)
        from the head of their bucket to the queue."""
        buckets: set[tuple[int, float]] = set()
        while view.delayed and view.delayed[0][0] <= now:
            hint = heapq.heappop(view.delayed)
            buckets.add((hint[5], hint[2]))
        if not buckets:
            return
        for lane, bucket in sorted(buckets):
            source = self._queues[await self._bucket(queue, bucket, lane)]
            while True:
                delivery = await source.get(no_ack=False, fail=False, timeout=OP_TIMEOUT_S)
                if delivery is None:
                    break
                visible_at = header_number(dict(delivery.headers or {}), H_VISIBLE, default=now)
                if visible_at > now:
                    await delivery.nack(requeue=True)  # back to the head of its bucket
                    break
                copy = Copy.of(delivery, lane)
                copy.receives -= header_count(dict(delivery.headers or {}), "x-delivery-count")
                await self._put(queue, [(copy, now)], now=now)
                await delivery.ack()
                self._forget_delayed(view, copy)

    @staticmethod
    def _forget_delayed(view: QueueView, copy: Copy) -> None:
        for index, entry in enumerate(view.delayed):
            if entry[1] == copy.order and entry[3] == copy.message_id:
                view.delayed.pop(index)
                heapq.heapify(view.delayed)
                return

    # ------------------------------------------------------------ counts and dead letters

    async def _counts(self, queue: str) -> tuple[int, int, int]:
        """Ready (on the broker), delayed and dead counts, every lane's."""
        ready, delayed, dead = await self._lane_counts(queue)
        return sum(ready), sum(delayed), dead

    async def _lane_counts(self, queue: str) -> tuple[list[int], list[int], int]:
        """Ready (on the broker) and delayed counts of each lane, and the dead count."""
        await self._main(queue)
        ready = [await self._count(self._lane_name(queue, lane)) for lane in range(MAX_LANES)]
        delayed = [0] * MAX_LANES
        for lane in range(MAX_LANES):
            for bucket in BUCKETS_S:
                delayed[lane] += await self._count(self._bucket_name(queue, bucket, lane))
        dead = await self._count(self._dead_name(queue))
        view = self._view(queue)
        if not any(delayed):
            view.delayed.clear()
        if not any(ready):
            view.known.clear()
            view.overflow = False
        return ready, delayed, dead

    async def _dead_channel(self, queue: str) -> tuple[AbstractChannel, AbstractQueue]:
        """A channel of its own for reading dead letters: closing it gives them all back."""
        await self._main(queue)
        assert self._connection is not None
        channel = await self._connection.channel(publisher_confirms=False)
        return channel, await channel.get_queue(self._dead_name(queue), ensure=False)
