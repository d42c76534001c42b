"""What a message of the RabbitMQ transport carries, and what an instance knows of a
queue: the ``x-tidings-*`` headers a copy travels with from queue to queue (its id,
enqueue and due times, receives, failures, publish order), read back safely from
whatever a foreign publisher put there; a delivery held in flight; and the view of one
queue (held, stashed, known ids, delayed hints).
"""

from __future__ import annotations

import math
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import aio_pika
from aio_pika.abc import AbstractIncomingMessage

from tidings.core.lanes import MAX_LANES
from tidings.transports.sqlite import shown

H_ID = "x-tidings-id"
H_ENQUEUED = "x-tidings-enqueued-at"
H_VISIBLE = "x-tidings-visible-at"
H_RECEIVES = "x-tidings-receives"
H_FAILURES = "x-tidings-failures"
H_ORDER = "x-tidings-order"
H_COPY = "x-tidings-copy"
H_REASON = "x-tidings-reason"
H_DEAD_AT = "x-tidings-dead-at"
#: The message's lane: where a delay bucket or a redrive puts it back.
H_LANE = "x-tidings-lane"


def header_number(headers: dict[str, Any], name: str, default: float = 0.0) -> float:
    """A header as a finite number, else ``default``: a foreign publisher's "nan" or
    "1e999" must not fail every receive (or listing) that meets its message."""
    value = headers.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float | str | bytes):
        return default
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return default
    return number if math.isfinite(number) else default


def header_count(headers: dict[str, Any], name: str) -> int:
    """A header as a count from 0, no more than an AMQP table carries back (a copy
    publishes its counts again)."""
    return min(max(0, int(header_number(headers, name))), 2**31 - 1)


def header_text(headers: dict[str, Any], name: str) -> str | None:
    value = headers.get(name)
    if isinstance(value, bytes):
        return shown(value)
    return value if isinstance(value, str) else None


def header_lane(headers: dict[str, Any]) -> int:
    """The lane a copy names, 0 where it names none or one past ``MAX_LANES``."""
    lane = header_count(headers, H_LANE)
    return lane if lane < MAX_LANES else 0


def message_id_of(delivery: AbstractIncomingMessage) -> str:
    """The intent key: a header (AMQP's ``message-id`` property holds 255 bytes at most,
    a key up to 512 characters)."""
    return header_text(dict(delivery.headers or {}), H_ID) or delivery.message_id or ""


@dataclass
class Copy:
    """What a message carries from copy to copy."""

    message_id: str
    body: bytes
    enqueued_at: float
    receives: int
    failures: int
    order: str
    lane: int = 0

    @classmethod
    def of(cls, delivery: AbstractIncomingMessage, lane: int | None = None) -> Copy:
        """The copy a delivery carries; in ``lane`` where it was taken from a lane's
        queue, else in the lane its header names (0 for a foreign message)."""
        headers = dict(delivery.headers or {})
        returns = header_count(headers, "x-delivery-count")
        return cls(message_id=message_id_of(delivery), body=delivery.body,
                   enqueued_at=header_number(headers, H_ENQUEUED),
                   receives=header_count(headers, H_RECEIVES) + returns,
                   failures=header_count(headers, H_FAILURES),
                   order=header_text(headers, H_ORDER) or "",
                   lane=lane if lane is not None else header_lane(headers))

    def message(self, *, visible_at: float | None, extra: dict[str, Any] | None = None
                ) -> aio_pika.Message:
        """The copy as an AMQP message; ``visible_at`` only for a delay queue."""
        # Times as text: AMQP tables carry a Python float as 32 bits (minutes off at
        # epoch seconds), and ``repr`` gives it back exactly.
        headers: dict[str, Any] = {
            H_ID: self.message_id, H_ENQUEUED: repr(self.enqueued_at),
            H_RECEIVES: self.receives, H_FAILURES: self.failures, H_ORDER: self.order,
            H_COPY: uuid.uuid4().hex, H_LANE: self.lane}
        if visible_at is not None:
            headers[H_VISIBLE] = repr(visible_at)
        headers.update(extra or {})
        short = self.message_id if len(self.message_id.encode("utf-8", "replace")) <= 255 \
            else None
        return aio_pika.Message(self.body, message_id=short, headers=headers,
                                delivery_mode=aio_pika.DeliveryMode.PERSISTENT)


@dataclass
class Held:
    """A delivery this instance handed out (in flight) or took and holds (stashed)."""

    queue: str
    delivery: AbstractIncomingMessage
    copy: Copy
    deadline: float = math.inf

    @property
    def receive_count(self) -> int:
        return self.copy.receives + 1


@dataclass
class QueueView:
    """What this instance knows of one channel's queues (every lane's)."""

    held: dict[str, Held] = field(default_factory=dict)
    stash: deque[Held] = field(default_factory=deque)
    #: Ids this instance put on the queue, ready, and has not received since.
    known: Counter[str] = field(default_factory=Counter)
    overflow: bool = False
    #: Delayed messages this instance put in a bucket: (due, order, bucket, id, enqueued,
    #: lane).
    delayed: list[tuple[float, str, float, str, float, int]] = field(default_factory=list)
    #: True once this instance received from the queue (it hands out what it takes).
    consumer: bool = False
    #: (when, enqueued_at) of the head last read by a process that does not consume.
