"""Fair share among groups inside a lane (``tidings.core.fair``) on every transport that
keeps groups: the store's own queue and Redis Streams. A message published with a
group keeps it through receives, nacks, delays, visibility timeouts, dead letters and
redrives; a fair receive shares each lane among its groups by weight, in turn; a
receive without fair share still takes every group's messages; depth counts them.
RabbitMQ keeps one group a lane (a queue per lane, its messages in their own order):
it is left out, with that reason.

Given / when / then; every ``now`` is explicit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidings.admission.relay import RelayConfig, relay_pass
from tidings.core.fair import FairShare
from tidings.core.lanes import EVERY_LANE
from tidings.core.model import GroupDepth, IntentDraft, LaneDepth, OutgoingMessage, Received
from tidings.recovery.reconciler import Reconciler, ReconcilerConfig
from tidings.stores.sqlite import SqliteStore
from tidings.transports.base import Transport
from tidings.transports.sqlite import SqliteTransport

T0 = 1_000_000.0
VIS = 30.0


@pytest.fixture(autouse=True)
def _keeps_groups(request: pytest.FixtureRequest) -> None:
    if request.getfixturevalue("transport_backend").name == "rabbitmq":
        pytest.skip("RabbitMQ keeps one group a lane: a quorum queue per lane hands its "
                    "messages out in their own order (docs/lanes.md)")


def msg(message_id: str, group: str, lane: int = 1, delay_s: float = 0.0) -> OutgoingMessage:
    return OutgoingMessage(message_id=message_id, body=f'{{"key":"{message_id}"}}',
                           delay_s=delay_s, lane=lane, group=group)


async def publish_groups(transport: Transport, sizes: dict[str, int], *,
                         lane: int = 1) -> None:
    """``sizes[group]`` messages of each group, the big group published first."""
    for group, size in sizes.items():
        await transport.publish("email", [msg(f"{group or 'none'}-{n:03d}", group, lane)
                                          for n in range(size)], now=T0)


async def take(transport: Transport, now: float, limit: int = 10,
               lanes: tuple[int, ...] = EVERY_LANE, fair: FairShare | None = None,
               ) -> list[Received]:
    return await transport.receive("email", max_messages=limit, visibility_s=VIS, now=now,
                                   lanes=lanes, fair=fair)


def by_group(messages: list[Received]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in messages:
        group = m.message_id.rsplit("-", 1)[0]
        counts[group] = counts.get(group, 0) + 1
    return counts


async def test_a_shared_lane_gives_each_group_its_share_of_a_receive(
    transport: Transport,
) -> None:
    # Given one big tenant published first and two small ones
    await publish_groups(transport, {"big": 50, "small-a": 5, "small-b": 5})
    share = FairShare()

    # When a worker receives 9 with fair share
    first = await take(transport, T0 + 1, limit=9, fair=share)

    # Then each group gets a third, one from each in turn, oldest first
    assert by_group(first) == {"big": 3, "small-a": 3, "small-b": 3}
    assert [m.message_id for m in first[:3]] == ["big-000", "small-a-000", "small-b-000"]
    assert {m.lane for m in first} == {1}
    # And a group out of ready messages leaves its room to the others
    second = await take(transport, T0 + 1, limit=9, fair=share)
    assert by_group(second) == {"big": 5, "small-a": 2, "small-b": 2}
    # Only the big group has messages left: it has the whole receive
    assert by_group(await take(transport, T0 + 1, limit=9, fair=share)) == {"big": 9}


async def test_grouped_messages_are_never_stranded_on_a_lane_without_fair_share(
    transport: Transport,
) -> None:
    # Given messages that name groups (written while the channel shared its lanes)
    await publish_groups(transport, {"a": 3, "b": 3, "": 2})
    # When a worker receives without fair share, they all still come
    first = await take(transport, T0 + 1, limit=4)
    rest = await take(transport, T0 + 1, limit=10)
    # The ungrouped first (the lane's own order), then the groups in turn
    assert [m.message_id for m in first[:2]] == ["none-000", "none-001"]
    assert by_group(first + rest) == {"a": 3, "b": 3, "none": 2}
    assert await take(transport, T0 + 1) == []


async def test_weights_and_groups_that_do_not_fit_one_receive(transport: Transport) -> None:
    await publish_groups(transport, {"a": 20, "b": 20, "c": 20, "": 20})
    weighted = FairShare({"a": 2.0})
    assert by_group(await take(transport, T0 + 1, limit=10, fair=weighted)) == {
        "a": 4, "b": 2, "c": 2, "none": 2}
    # Two at a time: the groups are visited in turn, none skipped
    share = FairShare()
    seen = [by_group(await take(transport, T0 + 1, limit=2, fair=share)) for _ in range(4)]
    assert all(sum(s.values()) == 2 for s in seen)
    assert {g for s in seen for g in s} == {"a", "b", "c", "none"}


async def test_a_grouped_message_keeps_its_group_through_nacks_delays_and_timeouts(
    transport: Transport,
) -> None:
    # Given a delayed message of a group, and two received ones of it
    await transport.publish("email", [msg("a-later", "a", delay_s=50), msg("a-1", "a"),
                                      msg("a-2", "a")], now=T0)
    a1, a2 = await take(transport, T0, limit=2, fair=FairShare())
    assert (a1.message_id, a2.message_id) == ("a-1", "a-2")
    await transport.publish("email", [msg("b-1", "b")], now=T0 + 1)

    # When one is nacked with a failure, the other extended then left to its timeout
    await transport.nack("email", [(a1.receipt, 0.0)], now=T0 + 1, failed=True)
    await transport.extend("email", [a2.receipt], visibility_s=VIS, now=T0 + 20)

    # Then the nacked one comes back (its group's, its count and failure kept); the
    # extended one only after its new timeout
    back = await take(transport, T0 + 31, fair=FairShare())
    assert sorted(m.message_id for m in back) == ["a-1", "b-1"]
    again = next(m for m in back if m.message_id == "a-1")
    assert (again.lane, again.receive_count, again.failures) == (1, 2, 1)
    [late] = await take(transport, T0 + 51, limit=1, fair=FairShare())
    assert late.message_id in ("a-2", "a-later")
    rest = await take(transport, T0 + 51, fair=FairShare())
    assert sorted(m.message_id for m in [late, *rest]) == ["a-2", "a-later"]
    # A stale receipt does nothing; acked, each is gone from the queue
    await transport.nack("email", [(a2.receipt, 0.0)], now=T0 + 52)
    await transport.ack("email", [m.receipt for m in (*back, late, *rest)])
    assert await take(transport, T0 + 200) == []
    assert await transport.contains("email", ["a-1", "a-2", "a-later", "b-1"]) == set()
    depth = await transport.depth("email", now=T0 + 200)
    assert (depth.ready, depth.delayed, depth.in_flight, depth.lanes) == (0, 0, 0, ())


async def test_a_redriven_dead_letter_goes_back_to_its_group(transport: Transport) -> None:
    await transport.publish("email", [msg("a-1", "a"), msg("b-1", "b")], now=T0)
    taken = await take(transport, T0, fair=FairShare())
    a1 = next(m for m in taken if m.message_id == "a-1")
    await transport.dead_letter("email", [(a1.receipt, "poison")], now=T0 + 1)
    [dead] = await transport.dead_letters("email")
    assert (dead.message_id, dead.reason) == ("a-1", "poison")
    await transport.ack("email", [m.receipt for m in taken if m is not a1])

    assert await transport.redrive("email", [dead.id], now=T0 + 2) == 1

    # Back in its lane, shared as its group's: it comes with another group's share
    await transport.publish("email", [msg(f"b-{n}", "b") for n in range(2, 6)], now=T0 + 3)
    got = await take(transport, T0 + 4, limit=2, lanes=(1,), fair=FairShare())
    assert sorted(m.message_id for m in got) == ["a-1", "b-2"]


async def test_depth_counts_grouped_messages_in_their_lane(transport: Transport) -> None:
    await transport.publish("email", [msg("a-1", "a"), msg("a-2", "a", delay_s=100),
                                      msg("none-1", "", lane=0)], now=T0)
    await transport.publish("email", [msg("b-1", "b")], now=T0 + 5)
    [first] = await take(transport, T0 + 6, limit=1, lanes=(1,), fair=FairShare())

    depth = await transport.depth("email", now=T0 + 10)

    assert first.message_id == "a-1"
    assert (depth.ready, depth.delayed, depth.in_flight) == (2, 1, 1)
    assert depth.oldest_age_s == 10.0
    assert depth.lanes == (LaneDepth(lane=0, ready=1, total=1, oldest_age_s=10.0),
                           LaneDepth(lane=1, ready=1, total=3, oldest_age_s=10.0))


async def test_depth_names_the_groups_holding_the_most_messages(transport: Transport) -> None:
    # Given three groups of lane 1 and an ungrouped message, the largest group holding
    # one message taken (in flight)
    await publish_groups(transport, {"big": 5})
    [first] = await take(transport, T0 + 1, limit=1, lanes=(1,), fair=FairShare())
    assert first.message_id.startswith("big-")
    await publish_groups(transport, {"mid": 3, "small": 1, "": 1})

    # When depth is read
    depth = await transport.depth("email", now=T0 + 2)

    # Then it names each group, the largest first, its ready messages and all of them
    assert depth.groups == (GroupDepth(lane=1, group="big", ready=4, total=5),
                            GroupDepth(lane=1, group="mid", ready=3, total=3),
                            GroupDepth(lane=1, group="small", ready=1, total=1))


async def two_groups_admitted(tmp_path: Path) -> SqliteStore:
    """A ledger holding intents of two groups of lane 1, admitted (``selected``), the
    big group first: ``big-1`` .. ``big-3``, ``small-1``."""
    store = await SqliteStore.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    await store.migrate(now=T0)
    await store.intent_admit([
        IntentDraft(key=key, channel="email", recipient_id=f"r-{key}",
                    address=f"{key}@example.com", template="t@v1", due_at=T0, lane=1,
                    group=key.split("-")[0])
        for key in ("big-1", "big-2", "big-3", "small-1")], now=T0)
    return store


async def test_the_relay_publishes_each_intent_in_its_group(
    transport: Transport, tmp_path: Path,
) -> None:
    # Given intents of two groups admitted to the outbox (selected), the big one first
    store = await two_groups_admitted(tmp_path)
    try:
        # When the relay publishes them to the transport
        assert await relay_pass(store, transport, now=T0 + 1, config=RelayConfig()) == 4
    finally:
        await store.close()

    # Then a fair receive of two takes one of each group
    got = await take(transport, T0 + 2, limit=2, fair=FairShare())
    assert sorted(m.message_id for m in got) == ["big-1", "small-1"]


async def test_a_lost_message_is_published_again_in_its_intents_group(
    transport: Transport, tmp_path: Path,
) -> None:
    # Given intents of two groups published to another queue than this transport (from
    # here, their messages are lost), the big group first
    store = await two_groups_admitted(tmp_path)
    try:
        assert await relay_pass(store, SqliteTransport(store.db), now=T0,
                                config=RelayConfig()) == 4

        # When the reconciler finds them missing from this transport
        result = await Reconciler(store=store, transport=transport, providers={},
                                  config=ReconcilerConfig(lost_after_s=0.0)
                                  ).run_pass(now=T0 + 10)
        assert result.republished_lost == 4
    finally:
        await store.close()

    # Then each went back to its group: a fair receive of two takes one of each
    got = await take(transport, T0 + 11, limit=2, fair=FairShare())
    assert sorted(m.message_id for m in got) == ["big-1", "small-1"]
