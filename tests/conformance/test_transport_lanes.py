"""Lanes on every transport (``tidings.core.lanes``), one suite for the store's own
queue and the brokers alike: a message is published in its lane and keeps it through
receives, nacks, delays, visibility timeouts, dead letters and redrives; a receive walks
the lanes in the order it is given (oldest first in each); depth counts each lane; and
the outbox relay publishes each intent in its lane.

Given / when / then; every ``now`` is explicit.
"""

from __future__ import annotations

from pathlib import Path

from tidings.admission.relay import RelayConfig, relay_pass
from tidings.core.lanes import EVERY_LANE
from tidings.core.model import IntentDraft, LaneDepth, OutgoingMessage, Received
from tidings.stores.sqlite import SqliteStore
from tidings.transports.base import Transport

T0 = 1_000_000.0
VIS = 30.0


def msg(message_id: str, lane: int, delay_s: float = 0.0) -> OutgoingMessage:
    return OutgoingMessage(message_id=message_id, body=f'{{"key":"{message_id}"}}',
                           delay_s=delay_s, lane=lane)


async def take(transport: Transport, now: float, limit: int = 10,
               lanes: tuple[int, ...] = EVERY_LANE) -> list[Received]:
    return await transport.receive("email", max_messages=limit, visibility_s=VIS, now=now,
                                   lanes=lanes)


def named(messages: list[Received]) -> list[tuple[str, int]]:
    return [(m.message_id, m.lane) for m in messages]


async def test_a_receive_takes_the_first_lane_before_older_messages_of_the_next(
    transport: Transport,
) -> None:
    # Given bulk messages published first, then transactional ones
    await transport.publish("email", [msg("b1", 1), msg("b2", 1), msg("b3", 1)], now=T0)
    await transport.publish("email", [msg("t1", 0), msg("t2", 0)], now=T0 + 1)

    # When a worker receives fewer than all of them
    first = await take(transport, T0 + 2, limit=3)
    rest = await take(transport, T0 + 2)

    # Then the transactional ones come first, each lane oldest first
    assert named(first) == [("t1", 0), ("t2", 0), ("b1", 1)]
    assert named(rest) == [("b2", 1), ("b3", 1)]


async def test_a_receive_asks_only_the_lanes_it_names_in_their_order(
    transport: Transport,
) -> None:
    await transport.publish("email", [msg("t1", 0), msg("b1", 1), msg("x1", 2), msg("y1", 3)],
                            now=T0)

    owed = await take(transport, T0 + 1, lanes=(1,))
    reordered = await take(transport, T0 + 1, lanes=(3, 2, 0))

    assert named(owed) == [("b1", 1)]
    assert named(reordered) == [("y1", 3), ("x1", 2), ("t1", 0)]
    assert await take(transport, T0 + 1) == []


async def test_a_message_keeps_its_lane_through_nacks_delays_and_timeouts(
    transport: Transport,
) -> None:
    # Given a delayed bulk message and two received ones
    await transport.publish("email", [msg("later", 1, delay_s=50), msg("b1", 1),
                                      msg("b2", 1)], now=T0)
    b1, _b2 = await take(transport, T0)

    # When one is nacked at once, the other left to its visibility timeout
    await transport.nack("email", [(b1.receipt, 0.0)], now=T0 + 1)
    # Then each comes back in lane 1, behind a transactional message published after
    await transport.publish("email", [msg("t1", 0)], now=T0 + 2)
    back = await take(transport, T0 + 2)
    assert named(back) == [("t1", 0), ("b1", 1)]
    [late] = await take(transport, T0 + VIS + 1)
    assert named([late]) == [("b2", 1)]
    await transport.ack("email", [m.receipt for m in (*back, late)])
    # A lane asked alone gives only its own, the delayed one once due
    assert await take(transport, T0 + 60, lanes=(0,)) == []
    assert named(await take(transport, T0 + 60, lanes=(1,))) == [("later", 1)]


async def test_a_nack_with_a_delay_and_a_failure_keeps_the_lane(transport: Transport) -> None:
    await transport.publish("email", [msg("b1", 2)], now=T0)
    [b1] = await take(transport, T0)

    await transport.nack("email", [(b1.receipt, 10.0)], now=T0 + 1, failed=True)

    assert await take(transport, T0 + 5) == []
    [again] = await take(transport, T0 + 12, lanes=(2,))
    assert (again.message_id, again.lane, again.failures, again.receive_count) == (
        "b1", 2, 1, 2)
    # Acked, it is gone from every lane
    await transport.ack("email", [again.receipt])
    assert await take(transport, T0 + 100) == []
    assert await transport.contains("email", ["b1"]) == set()


async def test_a_redriven_dead_letter_goes_back_to_its_lane(transport: Transport) -> None:
    await transport.publish("email", [msg("b1", 1), msg("t1", 0)], now=T0)
    t1, b1 = await take(transport, T0)
    await transport.dead_letter("email", [(b1.receipt, "poison")], now=T0 + 1)
    await transport.ack("email", [t1.receipt])

    [dead] = await transport.dead_letters("email")
    assert dead.message_id == "b1"
    assert await transport.redrive("email", [dead.id], now=T0 + 2) == 1

    assert await take(transport, T0 + 3, lanes=(0,)) == []
    assert named(await take(transport, T0 + 3, lanes=(1,))) == [("b1", 1)]


async def test_depth_counts_each_lane_holding_messages(transport: Transport) -> None:
    # Given a ready and a delayed transactional message, and bulk ones: one in flight
    await transport.publish("email", [msg("t1", 0), msg("t2", 0, delay_s=100)], now=T0 + 5)
    await transport.publish("email", [msg("b1", 1), msg("b2", 1)], now=T0)
    [b1] = await take(transport, T0 + 6, limit=1, lanes=(1,))
    assert b1.message_id == "b1"

    depth = await transport.depth("email", now=T0 + 10)

    assert (depth.ready, depth.delayed, depth.in_flight) == (2, 1, 1)
    assert depth.oldest_age_s == 10.0
    assert depth.lanes == (LaneDepth(lane=0, ready=1, total=2, oldest_age_s=5.0),
                           LaneDepth(lane=1, ready=1, total=2, oldest_age_s=10.0))


async def test_the_relay_publishes_each_intent_in_its_lane(
    transport: Transport, tmp_path: Path,
) -> None:
    # Given intents admitted to the outbox (selected) in two lanes
    store = await SqliteStore.open(f"sqlite:///{tmp_path / 'outbox.db'}")
    try:
        await store.migrate(now=T0)
        await store.intent_admit([
            IntentDraft(key=key, channel="email", recipient_id=f"r-{key}",
                        address=f"{key}@example.com", template="t@v1", due_at=T0, lane=lane)
            for key, lane in (("b1", 1), ("b2", 1), ("t1", 0))], now=T0)

        # When the relay publishes them to the transport
        assert await relay_pass(store, transport, now=T0 + 1, config=RelayConfig()) == 3
    finally:
        await store.close()

    # Then each is in its intent's lane
    assert named(await take(transport, T0 + 2)) == [("t1", 0), ("b1", 1), ("b2", 1)]
