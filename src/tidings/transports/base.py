"""The Transport port: per-channel queues, at-least-once, with a visibility timeout.

A received message stays invisible for ``visibility_s``; unacked it comes back with
``receive_count`` grown by one. ``nack`` makes it visible again after a delay, and
with ``failed`` also grows the message's ``failures``: the receives that failed on the
message itself, which the consumer (never the transport) weighs against its poison
limit (a broker keeps the count with the message: a header on the copy it puts back,
a field beside the stream entry). A dead-lettered message leaves the queue for its
dead-letter list with a reason.
``now`` always comes from the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from tidings.core.fair import FairShare
from tidings.core.lanes import EVERY_LANE
from tidings.core.model import DeadLetter, OutgoingMessage, QueueDepth, Received


class Transport(Protocol):
    name: str
    notifies: bool
    """True when ``wait`` is woken by a publish from any process on any machine, so an
    idle consumer can wait long instead of polling."""

    async def publish(self, queue: str, messages: Sequence[OutgoingMessage], *, now: float) -> None:
        """Publish messages, each visible after its ``delay_s``. Publishing the same
        ``message_id`` twice makes two deliveries (consumers deduplicate)."""
        ...

    async def receive(
        self, queue: str, *, max_messages: int, visibility_s: float, now: float,
        lanes: Sequence[int] = EVERY_LANE, fair: FairShare | None = None,
    ) -> list[Received]:
        """Take up to ``max_messages`` visible messages, hiding them: lane by lane in the
        order of ``lanes`` (``tidings.core.lanes``; a lane not named is not taken from),
        oldest first within a lane. With ``fair``, each lane's room is shared among the
        groups with messages in it (``tidings.core.fair``). A transport that keeps no
        lanes holds every message in lane 0, and one that keeps no groups, one group."""
        ...

    async def ack(self, queue: str, receipts: Sequence[str]) -> None:
        """Remove messages for good. Acking an unknown or already acked receipt is a no-op."""
        ...

    async def nack(self, queue: str, receipts: Sequence[tuple[str, float]], *, now: float,
                   failed: bool = False) -> None:
        """Make messages visible again after the paired delay (seconds); with ``failed``,
        count one more failure on each message (``Received.failures``). Stale receipts
        are ignored."""
        ...

    async def extend(
        self, queue: str, receipts: Sequence[str], *, visibility_s: float, now: float
    ) -> None:
        """Push the visibility timeout of in-flight messages to ``now + visibility_s``."""
        ...

    async def dead_letter(
        self, queue: str, receipts: Sequence[tuple[str, str]], *, now: float
    ) -> None:
        """Move messages to the dead-letter list with the paired reason."""
        ...

    async def dead_letters(self, queue: str, *, limit: int = 100) -> list[DeadLetter]: ...

    async def redrive(self, queue: str, ids: Sequence[str], *, now: float) -> int:
        """Put dead letters back on their queue (visible now); return how many."""
        ...

    async def depth(self, queue: str, *, now: float) -> QueueDepth: ...

    async def contains(self, queue: str, message_ids: Sequence[str]) -> set[str]:
        """Which of ``message_ids`` still have a message on the queue (any visibility)."""
        ...

    async def wait(self, queue: str, *, timeout_s: float, now: float) -> None:
        """Return when a message may be ready on ``queue``: at once if one is, when a
        delayed or hidden message becomes visible, when a publish wakes it (where
        ``notifies``), or after ``timeout_s`` at the latest. Spurious returns are allowed;
        the caller receives to find out."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class RecordsReceiver(Protocol):
    """Optional: a transport that records which worker received each message, so the
    reconciler can make a gone worker's messages visible again at once
    (``tidings.core.liveness``) instead of after their visibility timeout. A broker that sees
    its consumer's connection die and puts its messages back by itself has no need of it.
    """

    def receive_as(self, receiver: str | None) -> None:
        """Record ``receiver`` on every message this transport receives from now on."""
        ...

    async def release_receiver(self, receiver: str, *, now: float) -> int:
        """Make the messages ``receiver`` holds hidden visible now, fencing its receipts
        (its later ``nack``/``extend`` are ignored); return how many."""
        ...
