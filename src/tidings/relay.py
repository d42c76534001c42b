"""The outbox relay: publishes selected intents to their channel queues.

Admission publishes what it just wrote; the relay picks up everything else that is
``selected``: future-dated intents whose window opened, and intents whose publisher
died between writing and publishing (their publish lease expired). The message id is
always the intent key, so a second publication is a harmless duplicate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tidings.model import OutgoingMessage, message_body
from tidings.stores.base import Ledger, PublishItem
from tidings.transports.base import Transport


@dataclass(frozen=True, kw_only=True)
class RelayConfig:
    horizon_s: float = 60.0
    lease_s: float = 30.0
    page: int = 5000


async def publish(
    transport: Transport, items: Iterable[tuple[str, str, float]], *, now: float
) -> int:
    """Publish ``(key, channel, due_at)`` items, delayed until due; return the count."""
    by_channel: dict[str, list[OutgoingMessage]] = defaultdict(list)
    for key, channel, due_at in items:
        by_channel[channel].append(OutgoingMessage(
            message_id=key, body=message_body(key), delay_s=max(0.0, due_at - now)))
    for channel, messages in by_channel.items():
        await transport.publish(channel, messages, now=now)
    return sum(len(m) for m in by_channel.values())


async def relay_pass(
    store: Ledger, transport: Transport, *, now: float, config: RelayConfig,
    paused_channels: Sequence[str] = (), max_pages: int = 20,
) -> int:
    """Publish due ``selected`` intents, page by page; return how many were published."""
    total = 0
    for _ in range(max_pages):
        claimed: list[PublishItem] = await store.intent_claim_publish(
            now=now, horizon_s=config.horizon_s, lease_s=config.lease_s, limit=config.page)
        # A paused channel keeps its intents selected; their lease lapses and a later
        # pass takes them once the channel is resumed.
        ready = [i for i in claimed if i.channel not in paused_channels]
        if ready:
            await publish(transport, ((i.key, i.channel, i.due_at) for i in ready), now=now)
            await store.intent_mark_enqueued([i.key for i in ready], now=now)
            total += len(ready)
        if len(claimed) < config.page:
            break
    return total
